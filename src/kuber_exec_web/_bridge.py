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
    Chunk,
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    ExecService,
    Exit,
    Missed,
    Resize,
    Role,
    SessionHost,
    SharedSession,
    Stdin,
    Viewer,
)

from ._authorize import (
    BEARER_PREFIX,
    Authorize,
    TerminalGrant,
    TerminalRefused,
    TerminalRequest,
    bearer_from_authorization,
    call_authorize,
)
from ._recordings import RecordingStore
from ._relay import RelayFailed, relay_connect
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
#: Another connection of the same viewer took over (the page does not reconnect).
CLOSE_REPLACED = 4409
#: The app failed (a bug, logged by the server): not a normal end, so the page reconnects.
CLOSE_INTERNAL_ERROR = 1011
#: The subprotocol prefixes a page offers its viewer key (coming back) or a join token with:
#: secrets never go in a URL.
VIEWER_PREFIX = "viewer."
JOIN_PREFIX = "join."
# A page closing with these leaves for good (a drop is 1006, and a page's own timeout 4408).
_CLEAN_CLOSES = frozenset((1000, 1001))
# A terminal's size the TTY starts with when the page sends none.
_DEFAULT_SIZE = (80, 24)
_MAX_DIMENSION = 10_000
# Seconds a close may wait for a socket whose peer stopped reading (the server drops it then).
_CLOSE_TIMEOUT = 5.0


class _Disconnected(Exception):
    """The browser went away."""


#: How long the bridge waits, after sending the session's end, for the page to say it showed it.
_END_ACK_SECONDS = 5.0


class _Flow:
    """Output bytes in flight to the page, and waiting for room under the window; whether the
    page said it has shown the session's end."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.unacknowledged = 0
        self._room = anyio.Event()
        self.end_shown = anyio.Event()

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
        #: The page closed on purpose (1000, or 1001 as a tab closes): it is not coming back.
        self.closed_by_page = False

    async def send_bytes(self, data: bytes) -> None:
        async with self._lock:
            await self._send({"type": "websocket.send", "bytes": data})

    async def send_json(self, value: dict[str, object]) -> None:
        await self.send_text(json.dumps(value, ensure_ascii=False))

    async def send_text(self, text: str) -> None:
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
            self.closed_by_page = message.get("code") in _CLEAN_CLOSES
            logger.debug(
                "terminal: the page's WebSocket closed (%s%s)",
                message.get("code"),
                ", on purpose" if self.closed_by_page else "",
            )
            raise _Disconnected
        self.last_heard = anyio.current_time()
        return message


def _offered(websocket: WebSocket, prefix: str) -> str | None:
    for offered in websocket.scope.get("subprotocols", ()):
        if offered.startswith(prefix):
            return str(offered[len(prefix) :]) or None
    return None


def _bearer_token(websocket: WebSocket) -> str | None:
    offered = _offered(websocket, BEARER_PREFIX)
    if offered is not None:
        return offered
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
        host: SessionHost | None = None,
        share_ttl: float = 3600.0,
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
        #: Where the terminals' shared sessions run (each in the handler that opened it).
        self.host = host if host is not None else SessionHost(service)
        self.share_ttl = share_ttl
        #: session id -> the file-transfer terminal id of that session.
        self._terminal_ids: dict[str, str | None] = {}

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
        except Exception:
            # Re-raised for the server to log; the page must not take the close for an end.
            if channel.close_code == CLOSE_NORMAL:
                channel.close_code, channel.close_reason = CLOSE_INTERNAL_ERROR, "internal error"
            raise
        finally:
            await channel.close(channel.close_code, channel.close_reason)

    def _request(
        self, websocket: WebSocket, deployment: str, container: str | None, **join: str | None
    ) -> TerminalRequest:
        return TerminalRequest(
            scope=websocket.scope,
            headers=dict(websocket.headers),
            query=dict(websocket.query_params),
            deployment=deployment,
            container=container,
            bearer_token=_bearer_token(websocket),
            **join,
        )

    async def _authorized(
        self, channel: _Channel, request: TerminalRequest
    ) -> TerminalGrant | None:
        try:
            return await call_authorize(self.authorize, request)
        except TerminalRefused as refused:
            logger.info("terminal refused by the authorization callable: %s", refused.message)
            await self._refuse(channel, refused.message)
            return None

    async def _refuse(self, channel: _Channel, message: str) -> None:
        await channel.send_json({"type": "error", "code": "UNAUTHORIZED", "message": message})
        await channel.close(CLOSE_REFUSED, "not authorized")

    async def _serve(self, websocket: WebSocket, channel: _Channel) -> None:
        query = dict(websocket.query_params)
        if query.get("session"):
            await self._rejoin(websocket, channel, query)
            return
        deployment = query.get("deployment") or self.default_deployment or ""
        container = query.get("container") or None
        grant = await self._authorized(channel, self._request(websocket, deployment, container))
        if grant is None:
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
        # The session runs in this handler's task group: it outlives this WebSocket (the
        # handler returns once the session has ended: its grace period after the last viewer).
        async with anyio.create_task_group() as tasks:
            try:
                shared: SharedSession = await tasks.start(
                    self.host.run, exec_request, None, recording
                )
            except ExecError as error:
                logger.info("terminal failed: %s", error)
                await channel.send_json(
                    {"type": "error", "code": error.code.value, "message": error.message}
                )
                return
            terminal_id = None
            if self.registry is not None:
                terminal = Terminal(
                    workspace,
                    grant.on_behalf_of,
                    deployment,
                    shared.target.pod,
                    shared.target.container,
                    marker,
                )
                terminal_id = self.registry.add(terminal)
            self._terminal_ids[shared.id] = terminal_id
            try:
                open_ms = round((time.monotonic() - started) * 1000, 1)
                logger.info(
                    "terminal open: workspace %s, %s/%s container %s, in %.1f ms",
                    workspace.project,
                    shared.target.namespace,
                    shared.target.pod,
                    shared.target.container,
                    open_ms,
                )
                name = "" if grant.on_behalf_of is None else grant.on_behalf_of.user
                async with shared.attach(Role.OWNER, name=name, auto_ack=False) as viewer:
                    await viewer.send(Resize(columns=columns, rows=rows))
                    try:
                        await self._bridge(shared, viewer, channel, open_ms=open_ms)
                        if channel.closed_by_page:
                            viewer.leave()
                    finally:
                        # The page is gone or the session ended: close now, not when the
                        # session ends (it waits for the page to come back).
                        await channel.close(channel.close_code, channel.close_reason)
                await shared.ended.wait()
            finally:
                self._terminal_ids.pop(shared.id, None)
                if terminal_id is not None and self.registry is not None:
                    self.registry.remove(terminal_id)

    async def _rejoin(self, websocket: WebSocket, channel: _Channel, query: dict[str, str]) -> None:
        """A viewer comes back (subprotocol ``viewer.<key>``) or joins with a share link's
        token (``join.<token>``)."""
        session_id = query["session"]
        key = _offered(websocket, VIEWER_PREFIX)
        token = _offered(websocket, JOIN_PREFIX)
        holder = self.host.holder_of(session_id)
        if (
            holder is not None
            and holder != self.host.replica
            and session_id not in {s.id for s in self.host.sessions}
        ):
            await self._relay(websocket, channel, holder)
            return
        try:
            shared = self.host.get(session_id)
            if key is not None:
                role = shared.role_of(key)
            elif token is not None:
                role = self.host.verify_token(session_id, token).role
            else:
                raise ExecError(ExecErrorCode.TARGET_FORBIDDEN, "no join token was offered")
            resume = _offset(query.get("resume"))
        except ExecError as error:
            logger.info("terminal rejoin refused: %s", error)
            await channel.send_json(
                {"type": "error", "code": error.code.value, "message": error.message}
            )
            await channel.close(CLOSE_REFUSED, "refused")
            return
        request = self._request(
            websocket,
            shared.target.deployment,
            shared.target.container,
            session=session_id,
            role=role.value,
        )
        grant = await self._authorized(channel, request)
        if grant is None:
            return
        if grant.workspace != shared.workspace:
            await self._refuse(channel, "not authorized for this session's workspace")
            return
        name = "" if grant.on_behalf_of is None else grant.on_behalf_of.user
        try:
            attach = (
                shared.attach(viewer=key, resume_from=resume, auto_ack=False)
                if key is not None
                else shared.attach(role, name=name, resume_from=resume, auto_ack=False)
            )
            async with attach as viewer:
                await self._bridge(shared, viewer, channel, open_ms=0.0)
                if channel.closed_by_page:
                    viewer.leave()
        except ExecError as error:
            await channel.send_json(
                {"type": "error", "code": error.code.value, "message": error.message}
            )

    async def _relay(self, websocket: WebSocket, channel: _Channel, holder: str) -> None:
        """Pass the page's WebSocket through to the replica holding its session."""
        query = websocket.scope.get("query_string", b"").decode("latin-1")
        target = f"{websocket.url.path}?{query}"
        try:
            upstream = await relay_connect(
                holder, target, list(websocket.scope.get("subprotocols", ()))
            )
        except RelayFailed as failed:
            logger.info("terminal relay failed: %s", failed)
            await channel.send_json(
                {"type": "error", "code": ExecErrorCode.FAILED.value, "message": str(failed)}
            )
            await channel.close(CLOSE_REFUSED, "session gone")
            return
        try:
            async with anyio.create_task_group() as tasks:

                async def down() -> None:
                    try:
                        while (message := await upstream.receive()) is not None:
                            if isinstance(message, bytes):
                                await channel.send_bytes(message)
                            else:
                                await channel.send_text(message)
                    finally:
                        tasks.cancel_scope.cancel()

                tasks.start_soon(down)
                try:
                    while True:
                        message = await channel.receive()
                        if message.get("bytes") is not None:
                            await upstream.send(bytes(message["bytes"]))
                        elif message.get("text") is not None:
                            await upstream.send(str(message["text"]))
                except (_Disconnected, OSError, anyio.BrokenResourceError):
                    pass
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            await upstream.aclose(clean=channel.closed_by_page)
        if channel.open:
            if upstream.close_code in (None, 1006):
                # The holder went away without a word: it was killed. Tell the page, which then
                # does not retry (the session is gone with its replica).
                gone = "the replica holding this session is gone"
                with contextlib.suppress(_Disconnected):
                    await channel.send_json(
                        {"type": "error", "code": ExecErrorCode.FAILED.value, "message": gone}
                    )
                channel.close_code, channel.close_reason = CLOSE_REFUSED, "session gone"
            else:
                channel.close_code = upstream.close_code
                channel.close_reason = upstream.close_reason

    async def _bridge(
        self, shared: SharedSession, viewer: Viewer, channel: _Channel, *, open_ms: float
    ) -> None:
        flow = _Flow(self.flow_window)
        size = shared.size
        await channel.send_json(
            {
                "type": "open",
                "pod": shared.target.pod,
                "container": shared.target.container,
                "protocol": shared.protocol.value,
                "open_ms": open_ms,
                "terminal": self._terminal_ids.get(shared.id),
                "session": shared.id,
                "viewer": viewer.id,
                "key": viewer.key,
                "role": viewer.role.value,
                "offset": viewer.position,
                "size": None if size is None else {"columns": size.columns, "rows": size.rows},
            }
        )
        async with anyio.create_task_group() as tasks:

            async def run_then_stop(task: Any, *args: Any) -> None:
                try:
                    await task(*args)
                finally:
                    tasks.cancel_scope.cancel()

            tasks.start_soon(run_then_stop, self._pump_output, viewer, channel, flow)
            tasks.start_soon(run_then_stop, self._heartbeat, channel)
            tasks.start_soon(run_then_stop, self._roster, shared, viewer, channel)
            await run_then_stop(self._pump_input, shared, viewer, channel, flow)

    async def _roster(self, shared: SharedSession, viewer: Viewer, channel: _Channel) -> None:
        """Tell the page who is watching and the terminal's size, whenever either changes."""
        shown: object = None
        while True:
            size = shared.size
            roster: dict[str, object] = {
                "type": "viewers",
                "you": viewer.id,
                "viewers": [
                    {"id": v.id, "role": v.role.value, "name": v.name, "attached": v.attached}
                    for v in shared.viewers
                ],
                "size": None if size is None else {"columns": size.columns, "rows": size.rows},
            }
            if roster != shown:
                try:
                    await channel.send_json(roster)
                except _Disconnected:
                    return
                shown = roster
            if shared.ended.is_set():
                await anyio.sleep_forever()  # The output pump ends the bridge.
            await shared.roster_changed()

    async def _pump_output(self, viewer: Viewer, channel: _Channel, flow: _Flow) -> None:
        try:
            async for answer in viewer:
                if isinstance(answer, Chunk):
                    await flow.reserve(len(answer.data))
                    await channel.send_bytes(answer.data)
                elif isinstance(answer, Missed):
                    await channel.send_json({"type": "missed", "bytes": answer.count})
                elif isinstance(answer, Exit | Error):
                    if isinstance(answer, Exit):
                        await channel.send_json({"type": "exit", "code": answer.exit_code})
                    else:
                        await channel.send_json(
                            {"type": "error", "code": answer.code.value, "message": answer.message}
                        )
                    # A send is no proof of arrival (hypercorn drops what is sent on a
                    # connection it already saw close): the page says it has shown the end.
                    # Without that word the viewer stays, and a page that comes back is sent
                    # the end again (the drop soak's lost exit codes).
                    with anyio.move_on_after(_END_ACK_SECONDS):
                        await flow.end_shown.wait()
                    return
            # A newer connection of the same viewer took over.
            channel.close_code = CLOSE_REPLACED
            channel.close_reason = "replaced by a newer connection"
        except _Disconnected:
            return

    async def _pump_input(
        self, shared: SharedSession, viewer: Viewer, channel: _Channel, flow: _Flow
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
                        await viewer.send(Stdin(data[offset : offset + limit]))
                elif message.get("text") is not None:
                    await self._control(shared, viewer, channel, flow, message["text"])
            except ExecError as error:
                if error.code is ExecErrorCode.INVALID:
                    logger.debug("terminal: a frame was refused: %s", error)
                    continue  # E.g. a resize out of range: nothing was sent.
                if error.code is ExecErrorCode.TARGET_FORBIDDEN:
                    # Its role may not: nothing was sent; the page is told, the viewer stays.
                    await channel.send_json(
                        {"type": "refused", "code": error.code.value, "message": error.message}
                    )
                    continue
                if error.code in (ExecErrorCode.ABORTED, ExecErrorCode.FAILED):
                    # The session has ended (or this connection was replaced), or its exec
                    # connection closed under the send (the shell exited as a key was typed,
                    # before the reader saw the exit status): the frame is dropped, but reading
                    # goes on, the page's acknowledgements included, until the output pump has
                    # sent the rest and the last frame (the exit code, or the broken
                    # connection's error) and ends the bridge. Telling the page of the refused
                    # key instead, or returning, cancels that pump: the page lost its exit code.
                    continue
                await channel.send_json(
                    {"type": "error", "code": error.code.value, "message": error.message}
                )
                return
            except (ValueError, TypeError, KeyError):
                await channel.close(CLOSE_BAD_MESSAGE, "malformed control message")
                return

    async def _control(
        self,
        shared: SharedSession,
        viewer: Viewer,
        channel: _Channel,
        flow: _Flow,
        text: str,
    ) -> None:
        control = json.loads(text)
        kind = control["type"]
        if kind == "end-shown":
            viewer.acknowledge_end()
            flow.end_shown.set()
        elif kind == "ack":
            flow.acknowledge(int(control["bytes"]))
            if "offset" in control:
                offset = control["offset"]
                if isinstance(offset, int) and not isinstance(offset, bool):
                    viewer.acknowledge(min(offset, viewer.position))
        elif kind == "resize":
            columns, rows = int(control["columns"]), int(control["rows"])
            # The terminal follows its owner's window; the others' sizes are theirs alone.
            if viewer.role.may_resize:
                await viewer.send(Resize(columns=columns, rows=rows))
        elif kind == "share":
            role = Role(str(control["role"]))
            if not viewer.role.may_end:
                raise ExecError(
                    ExecErrorCode.TARGET_FORBIDDEN, "only the owner may share the terminal"
                )
            token = self.host.issue_token(shared.id, role, self.share_ttl)
            await channel.send_json(
                {"type": "share", "role": role.value, "token": token, "session": shared.id}
            )
        elif kind == "end":
            await viewer.end()
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


def _offset(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise ExecError(ExecErrorCode.INVALID, "resume must be a byte offset")
    return int(value)
