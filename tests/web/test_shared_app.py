"""Shared terminals over the page's protocol (no browser): a dropped page comes back to the same
shell where it was, share links for peers and observers, roles, refusals; uvicorn on asyncio
(the trio twin is in test_app_trio.py)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

import kuber_exec_asyncio as adapter
from kuber_exec_asyncio import AuditEvent, ExecError, ExecErrorCode
from kuber_exec_asyncio.testing import MemoryBackend, MemoryExecConnection
from kuber_exec_core import Subprotocol
from kuber_exec_core.channels import Channel, Message
from kuber_exec_core.server import status_exit_code
from kuber_exec_core.testing import frame_message
from kuber_exec_sandbox import Sandbox
from kuber_exec_web import TerminalRefused, TerminalRequest, create_app, token_authorizer
from support import DEMO, eventually, single_pod_cluster
from support.web import TOKEN
from support.web import control as _control
from support.web import output_until as _output_until
from support.web import terminal as _terminal

from .app_server import serve_app

pytestmark = pytest.mark.anyio

_SEQ = re.compile(rb"(?:\d+\r\n)+")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def served(sandbox: Sandbox) -> AsyncIterator[Callable[..., Any]]:
    """``await served(authorize=..., **options)`` -> (``host:port``, audit events)."""
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        stack: list[Any] = []

        async def start(authorize: Any = None, **options: Any) -> tuple[str, list[AuditEvent]]:
            events: list[AuditEvent] = []
            service = adapter.ExecService(backend, audit=events.append)
            options.setdefault("default_deployment", "web")
            options.setdefault("reconnect_grace", 10.0)
            app = create_app(service, authorize or token_authorizer(TOKEN, DEMO), **options)
            context = serve_app(app)
            stack.append(context)
            return await context.__aenter__(), events

        try:
            yield start
        finally:
            for context in reversed(stack):
                await context.__aexit__(None, None, None)


class Page:
    """What the page keeps: the session, its viewer secret and the offset of the next byte."""

    def __init__(self) -> None:
        self.session = ""
        self.key = ""
        self.received = 0
        self.screen = b""

    def opened(self, message: dict[str, Any]) -> None:
        assert message["type"] == "open", message
        if not self.key:
            self.received = message["offset"]
        assert message["offset"] == self.received
        self.session, self.key = message["session"], message["key"]

    def rejoin(self, address: str, token: str | None = TOKEN) -> Any:
        return _terminal(
            address,
            f"session={self.session}&resume={self.received}",
            token,
            subprotocols_extra=[f"viewer.{self.key}"],
        )

    async def read_until(self, ws: ClientConnection, needle: bytes) -> None:
        while needle not in self.screen:
            message = await ws.recv()
            if isinstance(message, bytes):
                self.screen += message
                self.received += len(message)
                ack = {"type": "ack", "bytes": len(message), "offset": self.received}
                await ws.send(json.dumps(ack))
            elif json.loads(message)["type"] in ("exit", "error", "missed"):
                raise AssertionError(f"{message} before {needle!r}: {self.screen[-300:]!r}")


def _drop(ws: ClientConnection) -> None:
    """Cut the connection as a network would: no close frame, the TCP connection just ends."""
    ws.transport.abort()


def _one_run(screen: bytes, last: int) -> None:
    expected = b"".join(b"%d\r\n" % n for n in range(1, last + 1))
    assert expected in [match.group(0) for match in _SEQ.finditer(screen)], "lost or repeated"


async def test_a_dropped_page_comes_back_to_the_same_shell_where_it_was(
    served: Callable[..., Any],
) -> None:
    # A ring smaller than the output: while the page is away, the shell waits for it.
    address, events = await served(ring_bytes=16 * 1024)
    page = Page()
    with anyio.fail_after(60):
        async with _terminal(address) as ws:
            page.opened(await _control(ws))
            await ws.send(b"cd /tmp; export MARK=k38; echo pid=$$ at $(pwd)\r")
            await page.read_until(ws, b"at /tmp\r\n")
            pid = re.findall(rb"pid=(\d+) at", page.screen)[-1]
            await ws.send(b"seq 1 40000; echo E''ND\r")
            await page.read_until(ws, b"\r\n2000\r\n")
            _drop(ws)
        for _ in range(3):  # Dropped again and again, mid-stream.
            async with page.rejoin(address) as ws:
                page.opened(await _control(ws))
                await page.read_until(ws, b"\r\n%d\r\n" % (page.screen.count(b"\n") + 5000))
                _drop(ws)
        async with page.rejoin(address) as ws:
            page.opened(await _control(ws))
            await page.read_until(ws, b"END")
            await ws.send(b"echo again=$$ $(pwd) $MARK\r")
            await page.read_until(ws, b"again=" + pid + b" /tmp k38\r\n")
            await ws.send(b"exit 4\r")
            assert await _control(ws) == {"type": "exit", "code": 4}
    _one_run(page.screen, 40000)
    phases = [event.phase for event in events]
    assert phases.count("attached") == 5
    assert phases.count("joined") == 1


async def test_share_links_roles_and_the_owners_size(served: Callable[..., Any]) -> None:
    address, _ = await served()
    owner_page, observer_page, peer_page = Page(), Page(), Page()
    with anyio.fail_after(60):
        async with _terminal(address, "deployment=web&cols=90&rows=20") as owner:
            owner_page.opened(await _control(owner))
            tokens = {}
            for role in ("observer", "peer"):
                await owner.send(json.dumps({"type": "share", "role": role}))
                shared = await _control(owner)
                assert (shared["type"], shared["role"]) == ("share", role)
                tokens[role] = shared["token"]
            session = owner_page.session
            async with (
                _terminal(
                    address,
                    f"session={session}&cols=200&rows=60",
                    subprotocols_extra=[f"join.{tokens['observer']}"],
                ) as observer,
                _terminal(
                    address, f"session={session}", subprotocols_extra=[f"join.{tokens['peer']}"]
                ) as peer,
            ):
                observer_page.opened(await _control(observer))
                peer_page.opened(await _control(peer))
                assert (await _wait_for_viewers(observer, 3))["size"] == {"columns": 90, "rows": 20}
                # The observer types and resizes: refused and ignored; nothing reaches the shell.
                await observer.send(b"echo from-observer\r")
                refused = await _control(observer)
                assert (refused["type"], refused["code"]) == ("refused", "EXEC_TARGET_FORBIDDEN")
                await observer.send(json.dumps({"type": "resize", "columns": 200, "rows": 60}))
                await observer.send(json.dumps({"type": "end"}))
                assert (await _control(observer))["type"] == "refused"
                await peer.send(b"echo from-pe''er\r")
                await owner.send(b"echo from-ow''ner; stty size\r")
                await observer_page.read_until(observer, b"20 90\r\n")
                assert b"from-peer" in observer_page.screen
                assert b"from-owner" in observer_page.screen
                await owner_page.read_until(owner, b"20 90\r\n")
                assert b"from-observer\r\n" not in owner_page.screen.replace(b"echo ", b"")
                await owner.send(json.dumps({"type": "end"}))
                for ws in (owner, observer, peer):
                    ended = await _control(ws)
                    assert (ended["type"], ended["code"]) == ("error", "EXEC_ABORTED")
                    assert "ended by its owner" in ended["message"]


async def _wait_for_viewers(ws: ClientConnection, count: int) -> dict[str, Any]:
    while True:
        message = await ws.recv()
        if isinstance(message, str):
            value: dict[str, Any] = json.loads(message)
            if value["type"] == "viewers" and len(value["viewers"]) == count:
                return value


async def test_forged_or_foreign_tokens_and_the_authorizer_keep_joiners_out(
    served: Callable[..., Any],
) -> None:
    asked: list[tuple[str | None, str | None]] = []

    def authorize(request: TerminalRequest) -> Any:
        asked.append((request.session, request.role))
        if request.role == "peer":
            raise TerminalRefused("peers are not allowed here")
        return token_authorizer(TOKEN, DEMO)(request)

    address, _ = await served(authorize=authorize, join_secret=b"j" * 32)
    page = Page()
    with anyio.fail_after(60):
        async with _terminal(address) as owner:
            page.opened(await _control(owner))
            await owner.send(json.dumps({"type": "share", "role": "peer"}))
            peer_token = (await _control(owner))["token"]
            forged = peer_token[:-3] + ("xyz" if not peer_token.endswith("xyz") else "abc")
            for query, extra, code in (
                (f"session={page.session}", [f"join.{forged}"], "EXEC_TARGET_FORBIDDEN"),
                (f"session={page.session}", [], "EXEC_TARGET_FORBIDDEN"),
                ("session=nope", [f"join.{peer_token}"], "EXEC_TARGET_NOT_FOUND"),
                (f"session={page.session}", ["viewer.not-a-key"], "EXEC_TARGET_NOT_FOUND"),
                (f"session={page.session}", [f"join.{peer_token}"], "UNAUTHORIZED"),
                (f"session={page.session}&resume=x", [f"join.{peer_token}"], "EXEC_INVALID"),
            ):
                async with _terminal(address, query, subprotocols_extra=extra) as ws:
                    refused = await _control(ws)
                    assert (refused["type"], refused["code"]) == ("error", code), query
                    assert peer_token not in json.dumps(refused)
                    with pytest.raises(ConnectionClosed):
                        await _control(ws)
                    assert ws.close_code == 4403
            await owner.send(b"exit\r")
            assert (await _control(owner))["type"] == "exit"
    # The authorizer saw the joiner's session and role (after the token was verified).
    assert (page.session, "peer") in asked


async def test_a_page_dropped_as_its_shell_exits_comes_back_for_the_exit_code(
    served: Callable[..., Any],
) -> None:
    """The soak's last lost ``exit 7``: the page's connection broke as the shell exited; its
    reconnect was told "no such shared session". The ended session now waits (its grace
    period at most) for a viewer that did not get its end."""
    address, events = await served()
    page = Page()
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            page.opened(await _control(ws))
            await ws.send(b"echo ready\r")
            await page.read_until(ws, b"ready\r\n")
            await ws.send(b"echo b''ye; exit 7\r")
            _drop(ws)
        await eventually(lambda: any(e.phase == "ended" for e in events), "the shell's end")
        async with page.rejoin(address) as ws:
            page.opened(await _control(ws))
            await _output_until(ws, b"bye")  # the output the page had not got
            assert await _control(ws) == {"type": "exit", "code": 7}  # then the exit
    phases = [event.phase for event in events]
    assert phases.count("attached") == 2
    assert phases[-1] == "left"


async def test_an_end_the_page_did_not_say_it_showed_is_sent_again_when_it_comes_back(
    served: Callable[..., Any],
) -> None:
    """Under hypercorn an ``exit`` sent on a connection the server already saw close is dropped
    without an error (the soak's last lost exit codes, on the trio server): the viewer keeps
    its place until the page says ``end-shown``, and a page that comes back gets the end
    again; one that said it leaves, and the session is forgotten."""
    address, events = await served()
    page = Page()
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            page.opened(await _control(ws))
            await ws.send(b"exit 6\r")
            assert await _control(ws) == {"type": "exit", "code": 6}
            _drop(ws)  # before saying it was shown: as if it never arrived
        async with page.rejoin(address) as ws:
            page.opened(await _control(ws))
            assert await _control(ws) == {"type": "exit", "code": 6}
            await ws.send(json.dumps({"type": "end-shown"}))
            with pytest.raises(ConnectionClosed):
                await _control(ws)
            assert ws.close_code == 1000
        async with page.rejoin(address) as ws:
            refused = await _control(ws)
    assert refused["type"] == "error"
    assert refused["code"] == "EXEC_TARGET_NOT_FOUND"
    phases = [event.phase for event in events]
    assert phases.count("left") == 1


async def test_input_after_the_shell_exited_does_not_lose_the_exit(
    served: Callable[..., Any],
) -> None:
    """Keys that reach the app after the shell exited (a key typed as it exits, xterm.js's
    reply to a query) are refused by the ended session: the page must still get the rest of
    the output and the exit code, not a bare close (the soak's lost ``exit 7``)."""
    address, _ = await served()
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            assert (await _control(ws))["type"] == "open"
            await ws.send(b"echo bye; exit 7\r")
            screen = b""
            # Keep typing while it exits: some of these arrive after the session ended.
            async with anyio.create_task_group() as tasks:

                async def type_on() -> None:
                    with contextlib.suppress(ConnectionClosed):
                        while True:
                            await ws.send(b"x")
                            await anyio.sleep(0.001)

                tasks.start_soon(type_on)
                try:
                    while True:
                        message = await ws.recv()
                        if isinstance(message, bytes):
                            screen += message
                            ack = {"type": "ack", "bytes": len(message)}
                            await ws.send(json.dumps(ack))
                        elif (value := json.loads(message))["type"] not in ("ping", "viewers"):
                            break
                finally:
                    tasks.cancel_scope.cancel()
    assert value == {"type": "exit", "code": 7}, value
    assert b"bye" in screen


class _ClosedUnderTheKey:
    """The connection of a shell that exited as a key was typed: the key's send fails (the
    server has closed), and the exit status is read only after that failure (the order the
    sandbox and real clusters produce now and then, made certain)."""

    def __init__(self, connection: MemoryExecConnection, key_refused: anyio.Event) -> None:
        self._connection = connection
        self._key_refused = key_refused
        self._received = 0
        self.subprotocol = connection.subprotocol
        self.closed_cleanly = connection.closed_cleanly
        self.close_reason = connection.close_reason

    async def send_message(self, message: Message) -> None:
        if message[0] == Channel.STDIN:  # a key; the page's resize goes through
            self._key_refused.set()
            closed = "The exec connection closed while sending"
            raise ExecError(ExecErrorCode.FAILED, closed)
        await self._connection.send_message(message)

    async def receive_message(self) -> Message | None:
        if self._received == 1:  # the output came; the status waits for the refused key
            await self._key_refused.wait()
        self._received += 1
        return await self._connection.receive_message()


class _ExitsAsAKeyArrives(MemoryBackend):
    """One pod whose shell prints ``bye`` and exits 7 as the page types (see above)."""

    def __init__(self) -> None:
        script = [
            frame_message(Subprotocol.V5, Channel.STDOUT, b"bye\r\n"),
            frame_message(Subprotocol.V5, Channel.ERROR, status_exit_code(7)),
        ]
        super().__init__(single_pod_cluster(), script)
        self.key_refused = anyio.Event()

    @contextlib.asynccontextmanager
    async def exec(self, *args: Any) -> AsyncIterator[Any]:
        async with super().exec(*args) as connection:
            yield _ClosedUnderTheKey(connection, self.key_refused)


async def test_a_key_whose_send_finds_the_connection_closed_does_not_lose_the_exit() -> None:
    """The deterministic form of the test above: the send of a key fails because the shell's
    connection has closed, before the reader has seen the exit status. The refused key is
    dropped; the page gets the exit code (it got ``EXEC_FAILED`` "closed while sending")."""
    backend = _ExitsAsAKeyArrives()
    app = create_app(
        adapter.ExecService(backend), token_authorizer(TOKEN, DEMO), default_deployment="web"
    )
    with anyio.fail_after(30):
        async with serve_app(app) as address, _terminal(address) as ws:
            assert (await _control(ws))["type"] == "open"
            assert await _output_until(ws, b"bye") == b"bye\r\n"
            await ws.send(b"x")
            assert await _control(ws) == {"type": "exit", "code": 7}
    assert backend.key_refused.is_set()
