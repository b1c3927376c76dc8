"""The browser terminal's file transfer (``/files``), over real HTTP to the app under uvicorn,
against the sandbox: uploads land in the shell's working directory, downloads stream back,
refusals are JSON with a status. No browser here (see test_browser_transfer.py)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin, Subprotocol

import kuber_exec_asyncio as adapter
from kuber_exec_asyncio import AuditEvent, ExecError, ExecErrorCode
from kuber_exec_asyncio.testing import MemoryBackend
from kuber_exec_core.kube import ApiResponse
from kuber_exec_sandbox import Sandbox
from kuber_exec_web import PROTOCOL, TerminalGrant, TerminalRefused, TerminalRequest, create_app
from support import DEMO
from support.web import control as _control

from .app_server import serve_app

pytestmark = pytest.mark.anyio

TOKEN = "alice-token"
OTHER_TOKEN = "bob-token"
ALICE = TerminalGrant(DEMO, adapter.Impersonation("alice", groups=("developers",)))
BOB = TerminalGrant(
    adapter.Workspace(project="demo", uid="other-uid"), adapter.Impersonation("bob")
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio.


def authorize(request: TerminalRequest) -> TerminalGrant:
    grants = {TOKEN: ALICE, OTHER_TOKEN: BOB}
    if request.bearer_token not in grants:
        raise TerminalRefused("not authorized")
    return grants[request.bearer_token]


class Served:
    """The app on loopback (``address``, an ``http`` client to it) and its audit events."""

    def __init__(self) -> None:
        self.address = ""
        self.http: httpx.AsyncClient
        self.app: Any = None
        self.events: list[AuditEvent] = []
        self.changed = anyio.Event()

    def audit(self, event: AuditEvent) -> None:
        """The service's audit hook (on the event loop, as uvicorn is): keeps and announces."""
        self.events.append(event)
        self.changed.set()

    async def copy_event(self, phase: str) -> AuditEvent:
        """The first copy event of ``phase``, once the service has emitted it."""
        while True:
            for event in self.events:
                if (event.kind, event.phase) == ("copy", phase):
                    return event
            self.changed = anyio.Event()
            await self.changed.wait()

    def headers(self, token: str | None = TOKEN) -> dict[str, str]:
        return {} if token is None else {"authorization": f"Bearer {token}"}

    async def upload(
        self, terminal: str, name: str, data: bytes, token: str | None = TOKEN
    ) -> httpx.Response:
        async def pieces() -> AsyncIterator[bytes]:
            for offset in range(0, len(data), 100_000):
                yield data[offset : offset + 100_000]

        headers = {**self.headers(token), "content-length": str(len(data))}
        return await self.http.post(
            "/files", params={"terminal": terminal, "name": name}, content=pieces(), headers=headers
        )


@pytest.fixture
async def served(sandbox: Sandbox) -> AsyncIterator[Served]:
    running = Served()
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        service = adapter.ExecService(backend, audit=running.audit)
        app = create_app(service, authorize, default_deployment="web", max_upload_bytes=4_000_000)
        running.app = app
        async with serve_app(app) as address:
            running.address = address
            running.http = httpx.AsyncClient(base_url=f"http://{address}", timeout=30)
            try:
                yield running
            finally:
                await running.http.aclose()


async def _run(ws: ClientConnection, line: str) -> None:
    """Type ``line`` and wait until the shell ran it (the marker is split in the echo)."""
    await ws.send(f'{line}; echo DO""NE\r'.encode())
    received = b""
    while b"DONE" not in received:
        message = await ws.recv()
        if isinstance(message, bytes):
            received += message
            await ws.send(json.dumps({"type": "ack", "bytes": len(message)}))


def _terminal(address: str) -> Any:
    protocols = [Subprotocol(PROTOCOL), Subprotocol(f"bearer.{TOKEN}")]
    return connect(
        f"ws://{address}/ws?deployment=web",
        subprotocols=protocols,
        origin=Origin(f"http://{address}"),
    )


async def test_a_dropped_file_lands_in_the_shells_working_directory_and_comes_back(
    served: Served, tmp_path: Path
) -> None:
    data = os.urandom(1_000_000)
    elsewhere = tmp_path / "second"
    elsewhere.mkdir()
    with anyio.fail_after(60):
        async with _terminal(served.address) as ws:
            opened = await _control(ws)
            terminal = opened["terminal"]
            assert opened["type"] == "open"
            assert isinstance(terminal, str)
            await _run(ws, f"cd {tmp_path}")
            answer = await served.upload(terminal, "data.bin", data)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {
                "path": str(tmp_path / "data.bin"),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "sha256_verified": True,
            }
            assert (tmp_path / "data.bin").read_bytes() == data
            # The shell's directory is read at each transfer: after a cd, the next goes there.
            await _run(ws, f"cd {elsewhere}")
            assert (await served.upload(terminal, "x.txt", b"hello\n")).status_code == 200
            assert (elsewhere / "x.txt").read_bytes() == b"hello\n"
            # A program the shell runs carries the marker too: it is not taken for the shell.
            await ws.send(b"(cd /; sleep 30)\r")
            assert (await served.upload(terminal, "y.txt", b"y")).status_code == 200
            assert (elsewhere / "y.txt").read_bytes() == b"y"
            # Downloads: relative to the shell's directory, or absolute.
            for path in ("../data.bin", str(tmp_path / "data.bin")):
                got = await served.http.get(
                    "/files", params={"terminal": terminal, "path": path}, headers=served.headers()
                )
                assert got.status_code == 200
                assert got.content == data
                assert got.headers["content-disposition"] == (
                    "attachment; filename=\"data.bin\"; filename*=UTF-8''data.bin"
                )
    copies = [e for e in served.events if e.kind == "copy" and e.phase == "ended"]
    assert [(e.direction, e.remote_path, e.outcome) for e in copies] == [
        ("upload", str(tmp_path / "data.bin"), "exit"),
        ("upload", str(elsewhere / "x.txt"), "exit"),
        ("upload", str(elsewhere / "y.txt"), "exit"),
        ("download", f"{elsewhere}/../data.bin", "exit"),  # As asked, from the cwd.
        ("download", str(tmp_path / "data.bin"), "exit"),
    ]
    # Every copy acted for the terminal's user, and its audit events say so.
    assert {(e.user, e.groups) for e in served.events if e.kind == "copy"} == {
        ("alice", ("developers",))
    }
    assert copies[0].bytes_in == len(data)
    assert copies[3].bytes_out == len(data)
    assert copies[0].sha256 == hashlib.sha256(data).hexdigest()


async def test_refusals_are_json_with_a_status(served: Served, tmp_path: Path) -> None:
    async def get(token: str | None = TOKEN, **params: str) -> httpx.Response:
        return await served.http.get("/files", params=params, headers=served.headers(token))

    with anyio.fail_after(60):
        async with _terminal(served.address) as ws:
            terminal = (await _control(ws))["terminal"]
            await _run(ws, f"cd {tmp_path}")
            (tmp_path / "f").write_bytes(b"f")
            cases: list[tuple[httpx.Response, int, str]] = [
                # No token, a wrong one: the authorization callable refuses.
                (await get(None, terminal=terminal, path="f"), 403, "UNAUTHORIZED"),
                (await get("nope", terminal=terminal, path="f"), 403, "UNAUTHORIZED"),
                (await served.upload(terminal, "f", b"x", token=None), 403, "UNAUTHORIZED"),
                # Another workspace's user cannot use this terminal, nor this one the other's
                # Deployment.
                (await get(OTHER_TOKEN, terminal=terminal, path="f"), 404, "TERMINAL_NOT_FOUND"),
                (
                    await get(deployment="other", path="/etc/hostname"),
                    403,
                    "EXEC_TARGET_FORBIDDEN",
                ),
                (await get(terminal="no-such-id", path="f"), 404, "TERMINAL_NOT_FOUND"),
                (await get(terminal=terminal, path="missing"), 404, "EXEC_FAILED"),
                (await get(deployment="web", path="relative"), 400, "EXEC_INVALID"),
                (await served.upload(terminal, "../escape", b"x"), 400, "EXEC_INVALID"),
                (await served.upload(terminal, "big", b"x" * 4_000_001), 413, "EXEC_INVALID"),
                (
                    await served.http.post(
                        "/files",
                        params={"terminal": terminal, "name": "f"},
                        content=b"x",
                        headers={**served.headers(), "origin": "http://evil.example"},
                    ),
                    403,
                    "UNAUTHORIZED",
                ),
            ]
            # Outside what the pod may write (sysfs refuses new files, even to root).
            await _run(ws, "cd /sys")
            denied = await served.upload(terminal, "new.txt", b"x")
            cases.append((denied, 403, "EXEC_FAILED"))
    for response, status, code in cases:
        assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert denied.json()["problem"] == "COPY_PERMISSION_DENIED"
    assert "Permission denied" in denied.json()["message"]
    assert not (tmp_path.parent / "escape").exists()


async def test_a_browser_leaving_mid_upload_fails_the_copy_quietly(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host, _, port = served.address.rpartition(":")
    with anyio.fail_after(30):
        async with _terminal(served.address) as ws:
            terminal = (await _control(ws))["terminal"]
            await _run(ws, f"cd {tmp_path}")
            stream = await anyio.connect_tcp(host, int(port))
            head = (
                f"POST /files?terminal={terminal}&name=cut.bin HTTP/1.1\r\n"
                f"Host: {served.address}\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Length: 1000000\r\n\r\n"
            )
            await stream.send(head.encode() + b"x" * 1000)
            await served.copy_event("started")  # The copy has reached the pod.
            await stream.aclose()
            ended = await served.copy_event("ended")
    assert (ended.outcome, ended.user) == ("error", "alice")
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


async def test_a_terminal_whose_deployment_moved_to_another_pod_gets_no_files(
    served: Served,
) -> None:
    route = next(r for r in served.app.routes if getattr(r, "path", None) == "/files")
    registry = route.app.registry
    with anyio.fail_after(30):
        async with _terminal(served.address) as ws:
            terminal = (await _control(ws))["terminal"]
            # As after a rollout: the Deployment now resolves elsewhere than the shell's pod.
            moved = attrs.evolve(registry.get(terminal), pod="web-gone-12345")
            registry._terminals[terminal] = moved
            answer = await served.upload(terminal, "x.txt", b"x")
            got = await served.http.get(
                "/files",
                params={"terminal": terminal, "path": "/etc/hostname"},
                headers=served.headers(),
            )
    for response in (answer, got):
        assert (response.status_code, response.json()["code"]) == (409, "TERMINAL_MOVED")
        assert "web-gone-12345" in response.json()["message"]
    assert not [e for e in served.events if e.kind == "copy"]


async def test_after_the_terminal_ends_its_id_is_gone(served: Served) -> None:
    with anyio.fail_after(30):
        async with _terminal(served.address) as ws:
            terminal = (await _control(ws))["terminal"]
            await ws.send(b"exit\r")
            assert await _control(ws) == {"type": "exit", "code": 0}
        answer = await served.upload(terminal, "late.txt", b"x")
    assert (answer.status_code, answer.json()["code"]) == (404, "TERMINAL_NOT_FOUND")


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_a_bad_upload_limit_is_exec_invalid(value: object) -> None:
    service = adapter.ExecService(MemoryBackend(lambda get: ApiResponse(status=404, body=b"")))
    with pytest.raises(ExecError) as caught:
        create_app(service, authorize, max_upload_bytes=value)  # type: ignore[arg-type]
    assert caught.value.code is ExecErrorCode.INVALID


async def test_without_file_transfer_the_command_is_unwrapped_and_there_is_no_route(
    sandbox: Sandbox,
) -> None:
    events: list[AuditEvent] = []
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        service = adapter.ExecService(backend, audit=events.append)
        app = create_app(service, authorize, default_deployment="web", file_transfer=False)
        async with serve_app(app) as address, httpx.AsyncClient() as http:
            with anyio.fail_after(30):
                async with _terminal(address) as ws:
                    opened = await _control(ws)
                    await ws.send(b"exit\r")
                    assert await _control(ws) == {"type": "exit", "code": 0}
                page = await http.get(f"http://{address}/")
                files = await http.get(f"http://{address}/files?deployment=web&path=/etc/hostname")
    assert opened["terminal"] is None
    assert events[0].command == ("sh",)
    assert 'id="download"' not in page.text
    assert files.status_code == 404
