"""The WebSocket endpoint: one browser terminal bridged to one ``open_interactive(tty=True)``.

The page and the app speak the subprotocol ``kuber-exec.terminal.v1``:

* binary messages are terminal bytes: keystrokes from the page (the process's stdin), output
  to the page (the TTY's stdout, which the page feeds to xterm.js as bytes, so a multi-byte
  character split across messages is decoded whole);
* text messages are JSON objects with a ``type``: from the page ``resize`` (``columns``,
  ``rows``), ``ack`` (``bytes`` written to the screen), ``ping`` and ``pong``; from the app
  ``open`` (``pod``, ``container``, ``protocol``, ``open_ms``, and ``terminal``, the id its
  file transfers name, or ``null`` without them), ``exit`` (``code``), ``error``
  (``code``, ``message``), ``ping`` and ``pong``.

Backpressure holds end to end: the app sends output only while fewer than ``flow_window``
bytes are unacknowledged by the page (which acknowledges once xterm.js has parsed them), each
send awaits the socket's own flow control, and while the app is not sending, the session's
bounded queue fills and its reader stops reading the pod's exec socket. Both sides send a
``ping`` every ``ping_interval`` seconds; the app closes a connection it heard nothing from for
three intervals.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect

from kuber_exec_anyio import (
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    ExecService,
    Exit,
    InteractiveSession,
    Resize,
    Stderr,
    Stdin,
    Stdout,
)

from ._authorize import (
    BEARER_PREFIX,
    Authorize,
    TerminalRefused,
    TerminalRequest,
    bearer_from_authorization,
    call_authorize,
)
from ._recordings import RecordingStore
from ._transfer import Terminal, TerminalRegistry

__all__ = ["PROTOCOL", "TerminalEndpoint"]

logger = logging.getLogger("kuber_exec_web")

#: The WebSocket subprotocol of the page and the app.
PROTOCOL = "kuber-exec.terminal.v1"
#: WebSocket close codes (4000-4999 are the application's).
CLOSE_NORMAL = 1000
CLOSE_REFUSED = 4403
CLOSE_SILENT_PEER = 4408
CLOSE_BAD_MESSAGE = 4400
# A terminal's size the TTY starts with when the page sends none.
_DEFAULT_SIZE = (80, 24)
_MAX_DIMENSION = 10_000
# Seconds a close may wait for a socket whose peer stopped reading (the server drops it then).
_CLOSE_TIMEOUT = 5.0


class _Disconnected(Exception):
    """The browser went away."""


class _Flow:
    """Output bytes in flight to the page, and waiting for room under the window."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.unacknowledged = 0
        self._room = anyio.Event()

    async def reserve(self, size: int) -> None:
        while self.unacknowledged >= self.window:
            self._room = anyio.Event()
            await self._room.wait()
        self.unacknowledged += size

    def acknowledge(self, size: int) -> None:
        self.unacknowledged = max(0, self.unacknowledged - size)
        self._room.set()


class _Channel:
    """The app's side of the page's WebSocket: serialized sends, and when it last heard."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self._lock = anyio.Lock()
        self.last_heard = anyio.current_time()
        self.open = True
        #: How to close once the bridge is done (the heartbeat sets a silent peer's code).
        self.close_code = CLOSE_NORMAL
        self.close_reason = ""

    async def send_bytes(self, data: bytes) -> None:
        async with self._lock:
            await self._send({"type": "websocket.send", "bytes": data})

    async def send_json(self, value: dict[str, object]) -> None:
        text = json.dumps(value, ensure_ascii=False)
        async with self._lock:
            await self._send({"type": "websocket.send", "text": text})

    async def _send(self, message: dict[str, Any]) -> None:
        if not self.open:
            raise _Disconnected
        try:
            await self.websocket.send(message)
        except (WebSocketDisconnect, OSError, RuntimeError) as error:
            self.open = False
            raise _Disconnected from error

    async def close(self, code: int, reason: str = "") -> None:
        """Close (once), when no other task sends; a peer that reads nothing cannot hold it."""
        if not self.open:
            return
        self.open = False
        with (
            anyio.move_on_after(_CLOSE_TIMEOUT),
            contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError),
        ):
            await self.websocket.close(code, reason[:120])

    async def receive(self) -> MutableMapping[str, Any]:
        try:
            message = await self.websocket.receive()
        except (WebSocketDisconnect, OSError, RuntimeError) as error:
            self.open = False
            raise _Disconnected from error
        if message["type"] == "websocket.disconnect":
            self.open = False
            raise _Disconnected
        self.last_heard = anyio.current_time()
        return message


def _bearer_token(websocket: WebSocket) -> str | None:
    for offered in websocket.scope.get("subprotocols", ()):
        if offered.startswith(BEARER_PREFIX):
            return str(offered[len(BEARER_PREFIX) :]) or None
    return bearer_from_authorization(websocket.headers.get("authorization", ""))


def _dimension(value: str | None, default: int) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        return default
    return number if 1 <= number <= _MAX_DIMENSION else default


class TerminalEndpoint:
    """The ASGI WebSocket endpoint (see the module docstring for its messages)."""

    def __init__(
        self,
        service: ExecService,
        authorize: Authorize,
        *,
        command: Sequence[str],
        default_deployment: str | None,
        ping_interval: float,
        flow_window: int,
        allowed_origins: frozenset[str] | None,
        recordings: RecordingStore | None = None,
        registry: TerminalRegistry | None = None,
    ) -> None:
        self.service = service
        self.authorize = authorize
        self.command = tuple(command)
        self.default_deployment = default_deployment
        self.ping_interval = ping_interval
        self.flow_window = flow_window
        self.allowed_origins = allowed_origins
        self.recordings = recordings
        #: With file transfer: where open terminals are found, their shells marked.
        self.registry = registry

    def origin_allowed(self, headers: Mapping[str, str]) -> bool:
        """Whether a request with these headers may come from its ``Origin``."""
        origin = headers.get("origin")
        if origin is None:
            return True  # Not a browser: nothing to forge a cross-site request with.
        if self.allowed_origins is not None:
            return origin in self.allowed_origins
        # Same origin: the Origin's host:port is the Host the page was served from.
        host = headers.get("host", "")
        return origin.split("://", 1)[-1] == host

    async def __call__(self, websocket: WebSocket) -> None:
        if not self.origin_allowed(websocket.headers):
            logger.warning("terminal refused: cross-origin WebSocket from an unlisted origin")
            await websocket.close(CLOSE_REFUSED)  # Before accepting: an HTTP 403.
            return
        if PROTOCOL not in websocket.scope.get("subprotocols", ()):
            await websocket.close(CLOSE_REFUSED)
            return
        await websocket.accept(subprotocol=PROTOCOL)
        channel = _Channel(websocket)
        try:
            await self._serve(websocket, channel)
        except _Disconnected:
            pass
        finally:
            await channel.close(channel.close_code, channel.close_reason)

    async def _serve(self, websocket: WebSocket, channel: _Channel) -> None:
        query = dict(websocket.query_params)
        deployment = query.get("deployment") or self.default_deployment or ""
        container = query.get("container") or None
        request = TerminalRequest(
            scope=websocket.scope,
            headers=dict(websocket.headers),
            query=query,
            deployment=deployment,
            container=container,
            bearer_token=_bearer_token(websocket),
        )
        try:
            grant = await call_authorize(self.authorize, request)
        except TerminalRefused as refused:
            logger.info("terminal refused by the authorization callable: %s", refused.message)
            await channel.send_json(
                {"type": "error", "code": "UNAUTHORIZED", "message": refused.message}
            )
            await channel.close(CLOSE_REFUSED, "not authorized")
            return
        columns = _dimension(query.get("cols"), _DEFAULT_SIZE[0])
        rows = _dimension(query.get("rows"), _DEFAULT_SIZE[1])
        workspace = grant.workspace
        marker = TerminalRegistry.new_marker()
        command = (
            self.command if self.registry is None else TerminalRegistry.wrap(self.command, marker)
        )
        exec_request = ExecRequest(
            workspace=workspace,
            deployment=deployment,
            command=command,
            container=container,
            on_behalf_of=grant.on_behalf_of,
        )
        started = time.monotonic()
        recording = (
            None
            if self.recordings is None
            else await self.recordings.new(workspace, exec_request, columns, rows)
        )
        try:
            async with self.service.open_interactive(
                exec_request, tty=True, recording=recording
            ) as session:
                await session.send(Resize(columns=columns, rows=rows))
                open_ms = round((time.monotonic() - started) * 1000, 1)
                logger.info(
                    "terminal open: workspace %s, %s/%s container %s, in %.1f ms",
                    workspace.project,
                    session.target.namespace,
                    session.target.pod,
                    session.target.container,
                    open_ms,
                )
                terminal_id = None
                if self.registry is not None:
                    terminal = Terminal(
                        workspace,
                        grant.on_behalf_of,
                        deployment,
                        session.target.pod,
                        session.target.container,
                        marker,
                    )
                    terminal_id = self.registry.add(terminal)
                try:
                    await channel.send_json(
                        {
                            "type": "open",
                            "pod": session.target.pod,
                            "container": session.target.container,
                            "protocol": session.protocol.value,
                            "open_ms": open_ms,
                            "terminal": terminal_id,
                        }
                    )
                    await self._bridge(session, channel)
                finally:
                    if terminal_id is not None and self.registry is not None:
                        self.registry.remove(terminal_id)
        except ExecError as error:
            logger.info("terminal failed: %s", error)
            await channel.send_json(
                {"type": "error", "code": error.code.value, "message": error.message}
            )

    async def _bridge(self, session: InteractiveSession, channel: _Channel) -> None:
        flow = _Flow(self.flow_window)
        async with anyio.create_task_group() as tasks:

            async def output() -> None:
                try:
                    await self._pump_output(session, channel, flow)
                finally:
                    tasks.cancel_scope.cancel()

            async def heartbeat() -> None:
                try:
                    await self._heartbeat(channel)
                finally:
                    tasks.cancel_scope.cancel()

            tasks.start_soon(output)
            tasks.start_soon(heartbeat)
            try:
                await self._pump_input(session, channel, flow)
            finally:
                tasks.cancel_scope.cancel()

    async def _pump_output(
        self, session: InteractiveSession, channel: _Channel, flow: _Flow
    ) -> None:
        try:
            async for frame in session:
                if isinstance(frame, Stdout | Stderr):
                    await flow.reserve(len(frame.data))
                    await channel.send_bytes(frame.data)
                elif isinstance(frame, Exit):
                    await channel.send_json({"type": "exit", "code": frame.exit_code})
                    return
                elif isinstance(frame, Error):
                    await channel.send_json(
                        {"type": "error", "code": frame.code.value, "message": frame.message}
                    )
                    return
        except _Disconnected:
            return

    async def _pump_input(
        self, session: InteractiveSession, channel: _Channel, flow: _Flow
    ) -> None:
        limit = self.service.limits.max_stdin_frame_bytes
        while True:
            try:
                message = await channel.receive()
            except _Disconnected:
                return
            data = message.get("bytes")
            try:
                if data is not None:
                    for offset in range(0, len(data), limit):
                        await session.send(Stdin(data[offset : offset + limit]))
                elif message.get("text") is not None:
                    await self._control(session, channel, flow, message["text"])
            except ExecError as error:
                if error.code is ExecErrorCode.INVALID:
                    logger.debug("terminal: a frame was refused: %s", error)
                    continue  # E.g. a resize out of range: nothing was sent.
                if error.code is ExecErrorCode.ABORTED:
                    return  # The session has ended; its last frame is on its way.
                await channel.send_json(
                    {"type": "error", "code": error.code.value, "message": error.message}
                )
                return
            except (ValueError, TypeError, KeyError):
                await channel.close(CLOSE_BAD_MESSAGE, "malformed control message")
                return

    async def _control(
        self, session: InteractiveSession, channel: _Channel, flow: _Flow, text: str
    ) -> None:
        control = json.loads(text)
        kind = control["type"]
        if kind == "ack":
            flow.acknowledge(int(control["bytes"]))
        elif kind == "resize":
            columns, rows = int(control["columns"]), int(control["rows"])
            await session.send(Resize(columns=columns, rows=rows))
        elif kind == "ping":
            await channel.send_json({"type": "pong"})
        elif kind != "pong":
            raise ValueError(kind)

    async def _heartbeat(self, channel: _Channel) -> None:
        while True:
            await anyio.sleep(self.ping_interval)
            if anyio.current_time() - channel.last_heard > 3 * self.ping_interval:
                logger.info("terminal closed: nothing from the browser for three pings")
                # The bridge stops (a blocked send included); then the endpoint closes.
                channel.close_code = CLOSE_SILENT_PEER
                channel.close_reason = "no ping from the browser"
                return
            try:
                await channel.send_json({"type": "ping"})
            except _Disconnected:
                return
