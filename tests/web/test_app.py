"""The browser terminal's ASGI app, under uvicorn on loopback, driven by a WebSocket client.

No browser here: the client speaks the page's subprotocol (kuber-exec.terminal.v1) itself.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin, Subprotocol

import kuber_exec_asyncio as adapter
from kuber_exec_asyncio import AuditEvent, ExecError, ExecErrorCode, SessionLimits
from kuber_exec_asyncio.testing import MemoryBackend
from kuber_exec_core.kube import ApiResponse
from kuber_exec_sandbox import Sandbox
from kuber_exec_web import (
    PROTOCOL,
    TerminalGrant,
    TerminalRefused,
    TerminalRequest,
    create_app,
    token_authorizer,
)
from support import DEMO
from support.web import TOKEN
from support.web import control as _control
from support.web import output_until as _output_until
from support.web import terminal as _terminal

from .app_server import DemoProcess, IdleCuttingProxy, serve_app

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio.


@pytest.fixture
async def events() -> list[AuditEvent]:
    return []


def _sessions_only(events: list[AuditEvent]) -> Callable[[AuditEvent], None]:
    """An audit hook keeping the sessions' own events (not their viewers': test_shared_app)."""

    def hook(event: AuditEvent) -> None:
        if event.phase in ("started", "ended"):
            events.append(event)

    return hook


@pytest.fixture
async def served(sandbox: Sandbox, events: list[AuditEvent]) -> AsyncIterator[Callable[..., Any]]:
    """``await served(**create_app options)`` -> ``host:port`` of the app on this loop."""
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        stack: list[Any] = []

        async def start(session_limits: SessionLimits | None = None, **options: Any) -> str:
            service = adapter.ExecService(
                backend, audit=_sessions_only(events), session_limits=session_limits
            )
            options.setdefault("default_deployment", "web")
            # A page the app dropped may come back: its terminal waits this long for it.
            options.setdefault("reconnect_grace", 3.0)
            app = create_app(service, token_authorizer(TOKEN, DEMO), **options)
            context = serve_app(app)
            stack.append(context)
            return await context.__aenter__()

        try:
            yield start
        finally:
            for context in reversed(stack):
                await context.__aexit__(None, None, None)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("ping_interval", 0, "ping_interval must be more than 0 and at most 30 seconds"),
        ("ping_interval", 30.5, "ping_interval must be more than 0 and at most 30 seconds"),
        ("ping_interval", float("nan"), "ping_interval must be more than 0 and at most 30 seconds"),
        ("ping_interval", "25", "ping_interval must be more than 0 and at most 30 seconds"),
        ("ping_interval", True, "ping_interval must be more than 0 and at most 30 seconds"),
        ("flow_window", 0, "flow_window must be a positive integer"),
        ("flow_window", -1, "flow_window must be a positive integer"),
        ("flow_window", 1.5, "flow_window must be a positive integer"),
        ("flow_window", True, "flow_window must be a positive integer"),
    ],
)
def test_bad_options_are_exec_invalid_like_every_constructors(
    option: str, value: object, message: str
) -> None:
    service = adapter.ExecService(MemoryBackend(lambda get: ApiResponse(status=404, body=b"")))
    options: dict[str, Any] = {option: value}
    with pytest.raises(ExecError) as caught:
        create_app(service, token_authorizer(TOKEN, DEMO), **options)
    assert (caught.value.code, caught.value.message) == (ExecErrorCode.INVALID, message)


async def _count_pings_until_closed(ws: ClientConnection) -> int:
    pings = 0
    try:
        while True:
            pings += await ws.recv() == '{"type": "ping"}'
    except ConnectionClosed:
        return pings


async def _output_until_quiet(ws: ClientConnection, quiet: float, at_least: int) -> int:
    """Output bytes received, unacknowledged: ``at_least`` of them, then more until none came
    for ``quiet`` seconds."""
    received = 0
    while received < at_least:
        message = await ws.recv()
        if isinstance(message, bytes):
            received += len(message)
    while True:
        with anyio.move_on_after(quiet) as waited:
            message = await ws.recv()
        if waited.cancelled_caught:
            return received
        if isinstance(message, bytes):
            received += len(message)


async def test_a_terminal_runs_commands_and_reports_the_exit_code(
    served: Callable[..., Any], events: list[AuditEvent]
) -> None:
    address = await served()
    with anyio.fail_after(30):
        async with _terminal(address, "deployment=web&cols=100&rows=30") as ws:
            assert ws.subprotocol == PROTOCOL
            opened = await _control(ws)
            assert opened["type"] == "open"
            assert opened["container"] == "app"
            assert opened["pod"].startswith("web-")
            assert opened["open_ms"] > 0
            await ws.send(b"stty size; echo $((6 * 7))\r")
            received = await _output_until(ws, b"42\r\n")
            assert b"30 100\r\n" in received
            await ws.send(json.dumps({"type": "resize", "columns": 120, "rows": 40}))
            await ws.send(b"stty size\r")
            await _output_until(ws, b"40 120\r\n")
            await ws.send(b"exit 5\r")
            assert await _control(ws) == {"type": "exit", "code": 5}
            await ws.send(json.dumps({"type": "end-shown"}))  # as the page does
            with pytest.raises(ConnectionClosed):
                await _control(ws)
            assert ws.close_code == 1000
    started, ended = events
    assert (started.kind, started.tty) == ("interactive", True)
    # The shell starts marked, so that file transfers find its directory (test_transfer.py).
    assert re.fullmatch(
        r"env\x00KUBER_EXEC_TERMINAL=[0-9a-f]{32}\x00sh", "\0".join(started.command)
    )
    assert (ended.outcome, ended.exit_code) == ("exit", 5)
    assert ended.bytes_in == len(b"stty size; echo $((6 * 7))\rstty size\rexit 5\r")


async def test_another_workspaces_deployment_is_refused_with_the_message(
    served: Callable[..., Any],
) -> None:
    address = await served()
    with anyio.fail_after(30):
        async with _terminal(address, "deployment=other") as ws:
            refused = await _control(ws)
            with pytest.raises(ConnectionClosed):
                await _control(ws)
    assert refused["type"] == "error"
    assert refused["code"] == "EXEC_TARGET_FORBIDDEN"
    assert "other" in refused["message"]


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_without_the_token_there_is_no_terminal(
    served: Callable[..., Any], events: list[AuditEvent], token: str | None
) -> None:
    address = await served()
    with anyio.fail_after(30):
        async with _terminal(address, token=token) as ws:
            refused = await _control(ws)
            with pytest.raises(ConnectionClosed):
                await _control(ws)
            assert ws.close_code == 4403
    assert refused == {
        "type": "error",
        "code": "UNAUTHORIZED",
        "message": "not authorized: open the URL with the token printed at start",
    }
    assert events == []  # Nothing reached the service.


async def test_a_bearer_header_works_for_clients_that_can_send_one(
    served: Callable[..., Any],
) -> None:
    address = await served()
    with anyio.fail_after(30):
        async with _terminal(
            address, token=None, additional_headers={"Authorization": f"Bearer {TOKEN}"}
        ) as ws:
            assert (await _control(ws))["type"] == "open"


async def test_cross_origin_and_foreign_protocols_are_refused_at_the_handshake(
    served: Callable[..., Any],
) -> None:
    address = await served()
    with anyio.fail_after(30):
        with pytest.raises(InvalidStatus) as cross_origin:
            async with _terminal(address, origin=Origin("http://evil.example")):
                pass
        assert cross_origin.value.response.status_code == 403
        with pytest.raises(InvalidStatus) as no_protocol:
            async with connect(f"ws://{address}/ws", origin=Origin(f"http://{address}")):
                pass
        assert no_protocol.value.response.status_code == 403


async def test_allowed_origins_admit_the_platforms_own_page(
    served: Callable[..., Any],
) -> None:
    address = await served(allowed_origins={"https://console.example"})
    with anyio.fail_after(30):
        async with _terminal(address, origin=Origin("https://console.example")) as ws:
            assert (await _control(ws))["type"] == "open"
        with pytest.raises(InvalidStatus):
            async with _terminal(address):
                pass


async def test_the_app_pings_answers_pings_and_drops_a_silent_page(
    served: Callable[..., Any],
) -> None:
    address = await served(ping_interval=0.2)
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            assert (await _control(ws))["type"] == "open"
            await ws.send(json.dumps({"type": "ping"}))
            assert await _control(ws) == {"type": "pong"}
            # From now on the "page" says nothing: closed after three intervals.
            pings = await _count_pings_until_closed(ws)
            assert ws.close_code == 4408
            assert ws.close_reason == "no ping from the browser"
            assert pings >= 2


async def test_output_waits_for_the_page_to_acknowledge_it(served: Callable[..., Any]) -> None:
    window = 64 * 1024
    address = await served(flow_window=window)
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            assert (await _control(ws))["type"] == "open"
            await ws.send(b"yes\r")
            # Without acknowledgements, output stops at the window (plus the frame in flight).
            unacknowledged = await _output_until_quiet(ws, quiet=1.5, at_least=window)
            assert window <= unacknowledged <= window + 64 * 1024
            # Acknowledged, it flows again.
            await ws.send(json.dumps({"type": "ack", "bytes": unacknowledged}))
            more = await ws.recv()
            assert isinstance(more, bytes)
            await ws.send(b"\x03")


async def test_limits_reach_the_page_as_an_error(served: Callable[..., Any]) -> None:
    address = await served(session_limits=SessionLimits(idle_timeout=0.5))
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            assert (await _control(ws))["type"] == "open"
            ended = await _control(ws)
    assert ended == {
        "type": "error",
        "code": "EXEC_ABORTED",
        "message": "the session was idle for 0.5 s (no input and no output) and was closed",
    }


async def test_the_page_and_its_assets_come_from_this_app(served: Callable[..., Any]) -> None:
    address = await served(title="Team <a> terminal")
    async with httpx.AsyncClient(base_url=f"http://{address}") as client:
        page = await client.get("/", params={"deployment": 'x"><script>'})
        assert page.status_code == 200
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "<title>Team &lt;a&gt; terminal</title>" in page.text
        assert 'value="x&quot;&gt;&lt;script&gt;"' in page.text
        for asset in (
            "/assets/xterm/lib/xterm.js",
            "/assets/xterm/css/xterm.css",
            "/assets/addon-fit/lib/addon-fit.js",
            "/static/terminal.js",
        ):
            assert (await client.get(asset)).status_code == 200, asset
        xterm = json.loads((await client.get("/assets/xterm/package.json")).text)
        assert xterm["version"].startswith("6.")


async def test_an_async_authorizer_sees_the_request(
    sandbox: Sandbox,
) -> None:
    seen: list[TerminalRequest] = []

    async def authorize(request: TerminalRequest) -> Any:
        seen.append(request)
        if request.headers.get("cookie") != "session=alice":
            raise TerminalRefused("log in first")
        return DEMO

    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        app = create_app(adapter.ExecService(backend), authorize, default_deployment="web")
        async with serve_app(app) as address:
            with anyio.fail_after(30):
                async with _terminal(address, "container=app", token=None) as ws:
                    assert await _control(ws) == {
                        "type": "error",
                        "code": "UNAUTHORIZED",
                        "message": "log in first",
                    }
                async with _terminal(
                    address, token=None, additional_headers={"Cookie": "session=alice"}
                ) as ws:
                    assert (await _control(ws))["type"] == "open"
    assert (seen[0].deployment, seen[0].container, seen[0].bearer_token) == ("web", "app", None)
    assert seen[0].query == {"container": "app"}


async def test_the_authorizer_names_the_user_the_terminal_acts_for(sandbox: Sandbox) -> None:
    events: list[AuditEvent] = []
    before = len(sandbox.access.exec_users)  # the sandbox is shared by the module's tests

    def authorize(request: TerminalRequest) -> TerminalGrant:
        return TerminalGrant(DEMO, adapter.Impersonation("alice", groups=("developers",)))

    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        service = adapter.ExecService(backend, audit=events.append)
        app = create_app(service, authorize, default_deployment="web")
        async with serve_app(app) as address:
            with anyio.fail_after(30):
                async with _terminal(address, token=None) as ws:
                    assert (await _control(ws))["type"] == "open"
                    await ws.send(b"exit\r")
                    assert await _control(ws) == {"type": "exit", "code": 0}
    # The exec reached the API server as alice (the sandbox records whom each exec ran as).
    assert sandbox.access.exec_users[before:] == ["alice"]
    # The session's events, and its one viewer's (the owner) in between, all name alice.
    assert {(e.phase, e.user, e.groups) for e in events} == {
        (phase, "alice", ("developers",))
        for phase in ("started", "joined", "attached", "detached", "left", "ended")
    }
    assert {e.role for e in events if e.viewer is not None} == {"owner"}


async def test_a_failure_of_the_app_closes_with_1011_not_a_normal_end(
    sandbox: Sandbox,
) -> None:
    """A bug in the app (here the authorization callable's; the server logs it): the
    page gets 1011, which it treats as a drop; 1000 would tell it the terminal ended."""

    def authorize(request: TerminalRequest) -> Any:
        raise RuntimeError("a bug in the platform's authorizer")

    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        app = create_app(adapter.ExecService(backend), authorize, default_deployment="web")
        async with serve_app(app) as address:
            with anyio.fail_after(30):
                async with _terminal(address, token=None) as ws:
                    with pytest.raises(ConnectionClosed):
                        await ws.recv()
                    assert (ws.close_code, ws.close_reason) == (1011, "internal error")


async def test_an_authorizer_returning_something_else_is_a_type_error() -> None:
    from kuber_exec_web._authorize import call_authorize

    request = TerminalRequest(
        scope={}, headers={}, query={}, deployment="web", container=None, bearer_token=None
    )
    with pytest.raises(TypeError):
        await call_authorize(lambda _: TerminalGrant("demo"), request)  # type: ignore[arg-type]
    assert (await call_authorize(lambda _: DEMO, request)) == TerminalGrant(DEMO)


async def test_the_demo_prints_its_token_once_and_never_logs_it(tmp_path: Path) -> None:
    audit_log = tmp_path / "audit.jsonl"
    demo = await anyio.to_thread.run_sync(lambda: DemoProcess(audit_log=audit_log))
    try:
        address = demo.base.removeprefix("http://").rstrip("/")
        with anyio.fail_after(30):
            async with _terminal(address, token=demo.token) as ws:
                assert (await _control(ws))["type"] == "open"
                await ws.send(b"exit 3\r")
                assert await _control(ws) == {"type": "exit", "code": 3}
            async with _terminal(address, token=demo.token + "x") as ws:
                assert (await _control(ws))["code"] == "UNAUTHORIZED"
    finally:
        status = await anyio.to_thread.run_sync(demo.stop)
    assert status == 130, demo.output
    assert demo.output.count(demo.token) == 1, demo.output
    assert "".join(demo.stderr_lines).count("WebSocket /ws") == 2  # The access log is on.
    lines = [json.loads(line) for line in audit_log.read_text().splitlines()]
    # The owner's page detaches and leaves as the session ends: in either order.
    phases = [(line["phase"], line["exit_code"]) for line in lines]
    assert phases[:3] == [("started", None), ("joined", None), ("attached", None)]
    assert sorted(phases[3:]) == [("detached", None), ("ended", 3), ("left", None)]
    assert demo.token not in audit_log.read_text()


async def test_no_log_record_carries_the_token(
    served: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    address = await served()
    with anyio.fail_after(30):
        async with _terminal(address) as ws:
            assert (await _control(ws))["type"] == "open"
            await ws.send(b"exit\r")
            assert await _control(ws) == {"type": "exit", "code": 0}
    # The test's own WebSocket client (websockets.client) logs the headers it sends at DEBUG;
    # everything on the app's side (uvicorn, starlette, kuber_exec, kuber_exec_web) is checked.
    server_side = [r for r in caplog.records if not r.name.startswith("websockets.client")]
    assert {r.name.split(".")[0] for r in server_side} >= {"kuber_exec", "kuber_exec_web"}
    assert not [r for r in server_side if TOKEN in r.getMessage()]


async def test_mounted_in_a_starlette_app_behind_its_middleware(sandbox: Sandbox) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    def authorize(request: TerminalRequest) -> Any:
        return DEMO if request.scope.get("user") == "alice" else None

    def platform_auth(app: Any) -> Any:
        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            headers = dict(scope.get("headers", []))
            if headers.get(b"cookie") == b"session=alice":
                scope = {**scope, "user": "alice"}
            await app(scope, receive, send)

        return middleware

    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        terminal = create_app(adapter.ExecService(backend), authorize, default_deployment="web")
        platform = platform_auth(Starlette(routes=[Mount("/terminal", terminal)]))
        async with serve_app(platform) as address:
            async with httpx.AsyncClient(base_url=f"http://{address}") as client:
                page = await client.get("/terminal/")
                assert '<base href="/terminal/">' in page.text
                assert (await client.get("/terminal/static/terminal.js")).status_code == 200
            with anyio.fail_after(30):
                async with connect(
                    f"ws://{address}/terminal/ws?deployment=web",
                    subprotocols=[Subprotocol(PROTOCOL)],
                    origin=Origin(f"http://{address}"),
                    additional_headers={"Cookie": "session=alice"},
                ) as ws:
                    assert (await _control(ws))["type"] == "open"
                async with connect(
                    f"ws://{address}/terminal/ws?deployment=web",
                    subprotocols=[Subprotocol(PROTOCOL)],
                    origin=Origin(f"http://{address}"),
                ) as ws:
                    assert (await _control(ws))["code"] == "UNAUTHORIZED"


@pytest.mark.parametrize(
    ("ping_interval", "survives"), [(0.25, True), (30.0, False)], ids=["pinged", "control"]
)
async def test_pings_keep_a_quiet_terminal_alive_behind_a_proxy_that_cuts_idle_connections(
    sandbox: Sandbox, ping_interval: float, survives: bool
) -> None:
    # The proxy drops connections idle for 2 s (real ones: often 60 s; the app pings every 25 s).
    # uvicorn's own WebSocket pings are off here, so only the app's pings cross the proxy.
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        app = create_app(
            adapter.ExecService(backend),
            token_authorizer(TOKEN, DEMO),
            default_deployment="web",
            ping_interval=ping_interval,
            reconnect_grace=1.0,  # the cut page does not come back here
        )
        async with serve_app(app, ws_ping_interval=None) as address:
            proxy = IdleCuttingProxy(address, idle=2.0)
            async with proxy.running() as proxied:
                with anyio.fail_after(30):
                    async with _terminal(proxied) as ws:
                        assert (await _control(ws))["type"] == "open"
                        quiet_until = anyio.current_time() + 5.0  # over twice the cut-off
                        alive = await _answer_pings_until(ws, quiet_until)
                        if alive:
                            await ws.send(b"echo still here\r")
                            await _output_until(ws, b"still here\r\n")
    assert alive is survives
    assert proxy.cut == (0 if survives else 1)


async def _answer_pings_until(ws: ClientConnection, deadline: float) -> bool:
    """Answer the app's pings, as the page does, and nothing else; False if the link dropped."""
    try:
        while True:
            with anyio.move_on_after(deadline - anyio.current_time()) as waited:
                message = await ws.recv()
            if waited.cancelled_caught:
                return True
            if message == '{"type": "ping"}':
                await ws.send('{"type": "pong"}')
    except ConnectionClosed:
        return False
