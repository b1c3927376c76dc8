"""Three replicas of the browser terminal behind a round-robin proxy: a page that reconnects
lands on another replica and is relayed to the one holding its terminal (the terminal's id
names it, signed with the replicas' shared secret); a replica that is killed takes only its
own terminals, whose viewers get a clear end. Replicas on both servers (uvicorn and
hypercorn-on-trio), sharing one sandbox cluster; the client speaks the page's protocol."""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection

from kuber_exec_core.limits import SessionRecord, record_name
from kuber_exec_sandbox import Sandbox
from support import eventually
from support.web import control as _control
from support.web import terminal as _terminal

from .app_server import DemoProcess
from .drop_proxy import DropProxy

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parent / "shared_server.py"
_SEQ = re.compile(rb"(?:\d+\r\n)+")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def replicas(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[list[DemoProcess], str]]:
    token, secret = secrets.token_urlsafe(16), secrets.token_hex(32)
    started = []
    try:
        for index, runtime in enumerate(("asyncio", "trio", "asyncio")):
            started.append(
                DemoProcess(
                    "--runtime", runtime, "--kubeconfig-url", sandbox.url, "--token", token,
                    "--join-secret", secret, "--replica", "--grace", "30",
                    audit_log=tmp_path / f"audit-{index}.jsonl",
                    command=(sys.executable, str(SERVER)),
                )
            )  # fmt: skip
        yield started, token
    finally:
        for replica in started:
            replica.stop()


def _address(replica: DemoProcess) -> str:
    return replica.base.removeprefix("http://").rstrip("/")


class Page:
    def __init__(self, token: str) -> None:
        self.token = token
        self.session = self.key = ""
        self.received = 0
        self.screen = b""

    def connect(self, address: str) -> Any:
        if not self.session:
            return _terminal(address, token=self.token)
        return _terminal(
            address,
            f"session={self.session}&resume={self.received}",
            self.token,
            subprotocols_extra=[f"viewer.{self.key}"],
        )

    def opened(self, message: dict[str, Any]) -> None:
        assert message["type"] == "open", message
        assert message["offset"] == self.received
        self.session, self.key = message["session"], message["key"]

    async def read_until(self, ws: ClientConnection, needle: bytes) -> None:
        while needle not in self.screen:
            message = await ws.recv()
            if isinstance(message, bytes):
                self.screen += message
                self.received += len(message)
                ack = {"type": "ack", "bytes": len(message), "offset": self.received}
                await ws.send(json.dumps(ack))
            elif json.loads(message)["type"] in ("exit", "error", "missed"):
                raise AssertionError(f"{message} before {needle!r}")


async def test_a_reconnect_landing_on_another_replica_reaches_the_session(
    replicas: tuple[list[DemoProcess], str],
) -> None:
    processes, token = replicas
    addresses = [_address(replica) for replica in processes]
    proxy = DropProxy(*addresses)
    page = Page(token)
    with proxy.running() as front, anyio.fail_after(90):
        # 1. The terminal opens on replica 0 (the proxy's first pick).
        async with page.connect(front) as ws:
            page.opened(await _control(ws))
            await ws.send(b"export R=k38; echo pid=$$=dip\r")
            while (found := re.search(rb"pid=(\d+)=dip", page.screen)) is None:
                await _one(page, ws)
            pid = found.group(1)
            await ws.send(b"seq 1 30000; echo E''ND\r")
            await page.read_until(ws, b"\r\n1000\r\n")
            ws.transport.abort()
        assert page.session.count(".") == 2  # It names its replica.
        # 2. Back through the proxy: replica 1 (trio) relays to replica 0.
        async with page.connect(front) as ws:
            page.opened(await _control(ws))
            await page.read_until(ws, b"END")
            ws.transport.abort()
        # 3. Replica 2 is killed; the others go on: replica 0 directly, then 1 relaying.
        processes[2].process.kill()
        proxy.remove_target(addresses[2])
        for _ in range(2):
            async with page.connect(front) as ws:
                page.opened(await _control(ws))
                await ws.send(b"echo again=$$:$R\r")
                await page.read_until(ws, b"again=" + pid + b":k38\r\n")
                page.screen = page.screen.replace(b"again=", b"seen=")
                ws.transport.abort()
        numbers = b"".join(b"%d\r\n" % n for n in range(1, 30001))
        assert numbers in [m.group(0) for m in _SEQ.finditer(page.screen)], "lost or repeated"
        # 4. The holder (replica 0) is killed: a viewer relayed by replica 1 gets a clear end,
        # and so does one that reconnects (no retry: 4403).
        proxy.remove_target(addresses[0])
        async with page.connect(front) as ws:
            page.opened(await _control(ws))
            processes[0].process.kill()
            ended = await _control(ws)
            assert (ended["type"], ended["code"]) == ("error", "EXEC_FAILED")
            assert "replica holding this session is gone" in ended["message"]
        async with page.connect(front) as ws:
            refused = await _control(ws)
            assert (refused["type"], refused["code"]) == ("error", "EXEC_FAILED")
            assert "cannot be reached" in refused["message"]
            # The app's close, not the client's own on leaving the block.
            await ws.wait_closed()
        assert ws.close_code == 4403


async def _one(page: Page, ws: ClientConnection) -> None:
    """Read one more message into the page."""
    message = await ws.recv()
    if isinstance(message, bytes):
        page.screen += message
        page.received += len(message)
        await ws.send(json.dumps({"type": "ack", "bytes": len(message), "offset": page.received}))


LEASE_SECONDS = 4


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _recorded_sessions(sandbox: Sandbox, namespace: str) -> int:
    """How many sessions the demo workspace's session records list (without a limit its
    sessions are spread over several records, by key)."""
    base = record_name("demo", "demo-uid")
    count = 0
    for name in sandbox.leases.holders(namespace):
        lease = sandbox.leases.lease(namespace, name)
        if name.startswith(base) and lease is not None:
            count += len(SessionRecord.from_lease("demo", "demo-uid", lease).entries)
    return count


def _session_of(pid: int) -> bytes:
    """The supervision id in the environment of ``pid`` (the session's cleanup finds it so)."""
    for variable in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if variable.startswith(b"KUBER_EXEC_SESSION="):
            return variable.split(b"=", 1)[1]
    raise AssertionError(f"{pid} is not a supervised session's process")


@pytest.mark.parametrize("holder", ["asyncio", "trio"])
async def test_a_killed_holder_s_shell_is_ended_by_the_survivor(
    sandbox: Sandbox, tmp_path: Path, holder: str
) -> None:
    """kill -9 of the replica holding a terminal: its viewers get a clear end, and its shell
    (with a background child) keeps running in the pod, as a real runtime's would, until the
    surviving replica, once the dead one's heartbeat expired, sweeps the session records and
    ends it (``ClusterSlots``: docs/cleanup.md, a replica that dies)."""
    token, secret = secrets.token_urlsafe(16), secrets.token_hex(32)
    # The replicas' heartbeats and session records (ClusterSlots): a namespace of this test's
    # own in the shared sandbox.
    namespace = f"replicas-{secrets.token_hex(4)}"
    survivor = "trio" if holder == "asyncio" else "asyncio"
    processes: list[DemoProcess] = []
    try:
        for index, runtime in enumerate((holder, survivor)):
            processes.append(
                DemoProcess(
                    "--runtime", runtime, "--kubeconfig-url", sandbox.url, "--token", token,
                    "--join-secret", secret, "--replica", "--grace", "30",
                    "--cluster-slots", namespace, "--lease-duration", str(LEASE_SECONDS),
                    audit_log=tmp_path / f"audit-{index}.jsonl",
                    command=(sys.executable, str(SERVER)),
                )
            )  # fmt: skip
        addresses = [_address(replica) for replica in processes]
        proxy = DropProxy(*addresses)
        page = Page(token)
        with proxy.running() as front, anyio.fail_after(120):
            # The terminal opens on the holder (the proxy's first pick); its shell starts a child.
            async with page.connect(front) as ws:
                page.opened(await _control(ws))
                await ws.send(b"sleep 600 & echo pids=$$,$!=dip\r")
                while (found := re.search(rb"pids=(\d+),(\d+)=dip", page.screen)) is None:
                    await _one(page, ws)
                ws.transport.abort()
            shell, child = int(found.group(1)), int(found.group(2))
            assert _session_of(shell) == _session_of(child)
            assert _recorded_sessions(sandbox, namespace) == 1
            # Back through the proxy: the survivor relays to the holder; then the holder dies.
            async with page.connect(front) as ws:
                page.opened(await _control(ws))
                await ws.send(b"echo relayed\r")
                await page.read_until(ws, b"relayed\r\n")
                processes[0].process.kill()
                ended = await _control(ws)
                assert (ended["type"], ended["code"]) == ("error", "EXEC_FAILED")
                assert "replica holding this session is gone" in ended["message"]
                # As the page does: it waits for the app's close, which says not to retry. (A
                # client closing at the same moment as the app can crash hypercorn's trio
                # worker: docs/web.md.)
                await ws.wait_closed()
                assert ws.close_code == 4403
                # Its connection to the pod went with it, but not the shell: a runtime lets it
                # run (the sandbox too); ending it is the survivor's job.
                assert _alive(shell)
                assert _alive(child)
            proxy.remove_target(addresses[0])
            # A page reconnecting now is told so, and does not retry.
            async with page.connect(front) as ws:
                refused = await _control(ws)
                assert (refused["type"], refused["code"]) == ("error", "EXEC_FAILED")
                assert "cannot be reached" in refused["message"]
                # The app's close, not the client's own on leaving the block.
                await ws.wait_closed()
            assert ws.close_code == 4403
            # Within the heartbeat's expiry, one sweep and the cleanup's bound.
            await eventually(
                lambda: not _alive(shell) and not _alive(child),
                "the dead replica's shell and its child ended",
                timeout=2 * LEASE_SECONDS + 30,
            )
            # Its entry in the workspace's session record is removed once its cleanup settled.
            await eventually(
                lambda: _recorded_sessions(sandbox, namespace) == 0,
                "the dead replica's session unrecorded",
            )
    finally:
        for index, replica in enumerate(processes):
            replica.stop()
            # Shown by pytest when the test failed: what each replica logged.
            print(f"--- replica {index} stderr ---", *replica.stderr_lines, sep="", file=sys.stderr)
