"""Port-forward's rules on a SPDY session: one forwarded TCP connection per request.

The client opens, per connection, two streams with the same ``requestID`` and ``port`` headers:
``streamType: error`` then ``streamType: data``; the server answers each with SYN_REPLY. The
client writes nothing on the error stream (it half-closes it once accepted); the server writes a
connection's failure there as text, then closes it. Bytes go both ways as DATA on the data stream;
a FIN is a TCP half-close. The client waits for each SYN_REPLY before writing (client-go's
spdystream drops DATA on a stream it has not yet accepted). Ending a connection early resets
both streams (client-go's ``RemoveStreams``).

:class:`TunnelClient` and :class:`TunnelServer` drive a :class:`~._spdy_session.SpdySession`
and translate its events into connection events; both are sans-IO (feed ``receive_data``, take
``next_event()``, send ``data_to_send()``).
"""

from __future__ import annotations

import collections
from typing import Literal

import attrs

from .._errors import ExecError, ExecErrorCode
from .._session import NEED_DATA, SessionSignal
from ._spdy_frames import RstStatus
from ._spdy_session import (
    DataReceived,
    GoAwayReceived,
    PingAnswered,
    Role,
    SessionEvent,
    SpdySession,
    StreamOpened,
    StreamReplied,
    StreamReset,
    WindowOpened,
)

__all__ = [
    "MAX_ERROR_MESSAGE_BYTES",
    "TUNNEL_SUBPROTOCOL",
    "ConnectionData",
    "ConnectionEOF",
    "ConnectionEnded",
    "ConnectionErrorStreamEnded",
    "ConnectionFailed",
    "ConnectionReady",
    "ConnectionRequested",
    "ConnectionWritable",
    "TunnelClient",
    "TunnelEvent",
    "TunnelGoingAway",
    "TunnelPong",
    "TunnelServer",
    "check_port",
]

#: The WebSocket subprotocol of the tunnel (kubectl ≥ 1.31).
TUNNEL_SUBPROTOCOL = "SPDY/3.1+portforward.k8s.io"

#: The most of a connection's error stream kept (the kubelet's messages are one line).
MAX_ERROR_MESSAGE_BYTES = 16 * 1024


def check_port(port: object) -> int:
    """``port`` as a TCP port number.

    Raises:
        ExecError: ``EXEC_INVALID``: ``port`` is not an int within 1..65535.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ExecError(
            ExecErrorCode.INVALID, f"port must be an integer within 1..65535, not {port!r}"
        )
    return port


@attrs.frozen
class ConnectionRequested:
    """(server) The client asked for a connection to ``port``."""

    request_id: str
    port: int


@attrs.frozen
class ConnectionReady:
    """(client) The server accepted both streams: bytes may flow."""

    request_id: str


@attrs.frozen(repr=False)
class ConnectionData:
    request_id: str
    data: bytes

    def __repr__(self) -> str:
        return f"ConnectionData(request_id={self.request_id!r}, {len(self.data)} bytes)"


@attrs.frozen
class ConnectionEOF:
    """The peer half-closed the connection: it will send no more bytes."""

    request_id: str


@attrs.frozen
class ConnectionFailed:
    """(client) The server reported the connection's failure on its error stream."""

    request_id: str
    message: str


@attrs.frozen
class ConnectionErrorStreamEnded:
    """(client) The server closed the connection's error stream without a failure: the
    connection did not fail (a kubelet may close the data stream first)."""

    request_id: str


@attrs.frozen
class ConnectionWritable:
    """A send window opened: ``send`` may take more (``request_id`` None: any connection)."""

    request_id: str | None


@attrs.frozen
class ConnectionEnded:
    """The connection is over on both streams (or was reset); its id is forgotten."""

    request_id: str
    reset: bool


@attrs.frozen
class TunnelPong:
    ping_id: int


@attrs.frozen
class TunnelGoingAway:
    """The peer accepts no new connection (GOAWAY)."""


TunnelEvent = (
    ConnectionRequested
    | ConnectionReady
    | ConnectionData
    | ConnectionEOF
    | ConnectionFailed
    | ConnectionErrorStreamEnded
    | ConnectionWritable
    | ConnectionEnded
    | TunnelPong
    | TunnelGoingAway
)


@attrs.define
class _Connection:
    request_id: str
    port: int
    error_stream: int = 0
    data_stream: int = 0
    error_replied: bool = False
    data_replied: bool = False
    error_text: bytearray = attrs.field(factory=bytearray)
    error_done: bool = False
    data_done: bool = False
    write_closed: bool = False
    announced: bool = False


class _Tunnel:
    def __init__(self, role: Role, **session_options: int) -> None:
        self.session = SpdySession(role, **session_options)
        self._connections: dict[str, _Connection] = {}
        self._by_stream: dict[int, _Connection] = {}
        self._events: collections.deque[TunnelEvent] = collections.deque()

    def data_to_send(self) -> bytes:
        return self.session.data_to_send()

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the peer (raises :class:`PortForwardProtocolError` as the session)."""
        self.session.receive_data(data)
        while (event := self.session.next_event()) is not NEED_DATA:
            self._translate(event)

    def next_event(self) -> TunnelEvent | Literal[SessionSignal.NEED_DATA]:
        if self._events:
            return self._events.popleft()
        return NEED_DATA

    def ping(self) -> int:
        return self.session.ping()

    @property
    def connections(self) -> int:
        return len(self._connections)

    def send_window(self, request_id: str) -> int | None:
        """How many bytes ``send`` may take now; ``None``: no limit (module docstring of the
        session)."""
        connection = self._connections.get(request_id)
        if connection is None or not connection.data_stream:
            return 0
        return self.session.send_window(connection.data_stream)

    def send(self, request_id: str, data: bytes) -> int:
        """Queue bytes of the connection; returns how many the window took.

        Raises:
            ValueError: the connection is unknown, not ready, or half-closed by us.
        """
        connection = self._writable(request_id)
        return self.session.send_data(connection.data_stream, data)

    def close_write(self, request_id: str) -> None:
        """Half-close the connection (FIN on its data stream); a no-op when done already."""
        connection = self._connections.get(request_id)
        if connection is None or connection.write_closed:
            return
        connection.write_closed = True
        if self.session.is_open(connection.data_stream):
            self.session.send_data(connection.data_stream, b"", fin=True)
        self._maybe_end(connection)

    def consumed(self, request_id: str, size: int) -> None:
        """The application took ``size`` received bytes: the peer may send that many more."""
        connection = self._connections.get(request_id)
        if connection is not None and connection.data_stream:
            self.session.consumed(connection.data_stream, size)

    def reset(self, request_id: str) -> None:
        """End the connection now: both streams reset (a no-op for an unknown id)."""
        connection = self._connections.pop(request_id, None)
        if connection is None:
            return
        for stream_id in (connection.error_stream, connection.data_stream):
            if stream_id:
                self._by_stream.pop(stream_id, None)
                self.session.reset(stream_id, RstStatus.CANCEL)

    def _writable(self, request_id: str) -> _Connection:
        connection = self._connections.get(request_id)
        if connection is None or not connection.data_stream or connection.write_closed:
            raise ValueError(f"connection {request_id!r} is not open for writing")
        if not self._ready(connection):
            raise ValueError(f"connection {request_id!r} is not ready")
        return connection

    def _ready(self, connection: _Connection) -> bool:
        return connection.error_replied and connection.data_replied

    def _maybe_end(self, connection: _Connection) -> None:
        if connection.error_done and connection.data_done and connection.write_closed:
            self._forget(connection, reset=False)

    def _forget(self, connection: _Connection, *, reset: bool) -> None:
        if self._connections.pop(connection.request_id, None) is None:
            return
        for stream_id in (connection.error_stream, connection.data_stream):
            self._by_stream.pop(stream_id, None)
            if reset:
                self.session.reset(stream_id, RstStatus.CANCEL)
        self._events.append(ConnectionEnded(connection.request_id, reset))

    def _translate(self, event: SessionEvent) -> None:
        if isinstance(event, PingAnswered):
            self._events.append(TunnelPong(event.ping_id))
        elif isinstance(event, GoAwayReceived):
            self._events.append(TunnelGoingAway())
        elif isinstance(event, WindowOpened):
            connection = self._by_stream.get(event.stream_id)
            self._events.append(ConnectionWritable(connection.request_id if connection else None))
        elif isinstance(event, StreamOpened):
            self._on_opened(event)
        elif isinstance(event, StreamReplied):
            self._on_replied(event)
        elif isinstance(event, StreamReset):
            connection = self._by_stream.get(event.stream_id)
            if connection is not None:
                self._on_reset(connection, event.stream_id)
        elif isinstance(event, DataReceived):
            connection = self._by_stream.get(event.stream_id)
            if connection is None:
                return
            if event.stream_id == connection.data_stream:
                if event.data:
                    self._events.append(ConnectionData(connection.request_id, event.data))
                if event.fin:
                    connection.data_done = True
                    self._events.append(ConnectionEOF(connection.request_id))
                    self._maybe_end(connection)
            else:
                self._on_error_data(connection, event)
        # HeadersReceived: port-forward sends none; nothing to do.

    def _on_opened(self, event: StreamOpened) -> None:
        # A client never accepts streams: port-forward's server opens none.
        self.session.reset(event.stream_id, RstStatus.REFUSED_STREAM)

    def _on_replied(self, event: StreamReplied) -> None:
        pass

    def _on_reset(self, connection: _Connection, stream_id: int) -> None:
        self._forget(connection, reset=True)

    def _on_error_data(self, connection: _Connection, event: DataReceived) -> None:
        pass


class TunnelClient(_Tunnel):
    """The client end: ``open_connection(port)`` per forwarded TCP connection."""

    def __init__(self, **session_options: int) -> None:
        super().__init__(Role.CLIENT, **session_options)
        self._next_request = 0

    def open_connection(self, port: int) -> str:
        """Open the error and data streams of a new connection to ``port``; returns its
        request id. ``ConnectionReady`` follows when the server accepted both.

        Raises:
            ExecError: ``port`` is outside 1..65535 (``EXEC_INVALID``); the session is broken
                or going away (``EXEC_FAILED``).
        """
        check_port(port)
        request_id = str(self._next_request)
        self._next_request += 1
        connection = _Connection(request_id, port)
        headers = {"streamType": "error", "port": str(port), "requestID": request_id}
        connection.error_stream = self.session.open_stream(headers)
        connection.data_stream = self.session.open_stream({**headers, "streamType": "data"})
        self._connections[request_id] = connection
        self._by_stream[connection.error_stream] = connection
        self._by_stream[connection.data_stream] = connection
        return request_id

    def _on_replied(self, event: StreamReplied) -> None:
        connection = self._by_stream.get(event.stream_id)
        if connection is None:
            return
        if event.stream_id == connection.error_stream:
            connection.error_replied = True
            # We never write on the error stream: close our half once it is accepted.
            if self.session.is_open(event.stream_id):
                self.session.send_data(event.stream_id, b"", fin=True)
        else:
            connection.data_replied = True
        if self._ready(connection) and not connection.announced:
            connection.announced = True
            self._events.append(ConnectionReady(connection.request_id))

    def _on_reset(self, connection: _Connection, stream_id: int) -> None:
        # A server may reset the streams right after writing the failure, before its FIN:
        # what it wrote is still the connection's failure.
        if connection.error_text and not connection.error_done:
            connection.error_done = True
            message = connection.error_text.decode("utf-8", "replace")
            self._events.append(ConnectionFailed(connection.request_id, message))
        super()._on_reset(connection, stream_id)

    def _on_error_data(self, connection: _Connection, event: DataReceived) -> None:
        room = MAX_ERROR_MESSAGE_BYTES - len(connection.error_text)
        connection.error_text += event.data[: max(0, room)]
        self.session.consumed(event.stream_id, len(event.data))
        if event.fin:
            connection.error_done = True
            if connection.error_text:
                message = connection.error_text.decode("utf-8", "replace")
                self._events.append(ConnectionFailed(connection.request_id, message))
            else:
                self._events.append(ConnectionErrorStreamEnded(connection.request_id))
            self._maybe_end(connection)


class TunnelServer(_Tunnel):
    """The server end: ``ConnectionRequested`` per connection the client opens; ``fail`` writes
    a connection's error; ``finish`` ends it after the pod's side closed."""

    def __init__(self, **session_options: int) -> None:
        super().__init__(Role.SERVER, **session_options)
        self._pending: dict[str, _Connection] = {}

    def fail(self, request_id: str, message: str) -> None:
        """Report the connection's failure on its error stream and end it."""
        connection = self._connections.get(request_id) or self._pending.get(request_id)
        if connection is None:
            return
        self._end_streams(connection, message.encode("utf-8"))

    def finish(self, request_id: str) -> None:
        """End the connection without error: half-close both streams (the data stream's FIN
        too, if ``close_write`` did not send it)."""
        connection = self._connections.get(request_id)
        if connection is not None:
            self._end_streams(connection, b"")

    def _end_streams(self, connection: _Connection, message: bytes) -> None:
        error_stream = connection.error_stream
        if (
            error_stream
            and self.session.is_open(error_stream)
            and self.session.send_window(error_stream) != 0
        ):
            self.session.send_data(connection.error_stream, message, fin=True)
        if connection.data_stream and not connection.write_closed:
            connection.write_closed = True
            if self.session.is_open(connection.data_stream):
                self.session.send_data(connection.data_stream, b"", fin=True)
        connection.error_done = True
        if self._pending.pop(connection.request_id, None) is not None:
            for stream_id in (connection.error_stream, connection.data_stream):
                if stream_id:
                    self._by_stream.pop(stream_id, None)
            return
        self._maybe_end(connection)

    def _on_opened(self, event: StreamOpened) -> None:
        headers = event.headers
        kind = headers.get("streamtype")
        request_id = headers.get("requestid")
        if kind not in ("error", "data") or not request_id:
            # The kubelet refuses a stream it cannot pair; the session goes on.
            self.session.reset(event.stream_id, RstStatus.PROTOCOL_ERROR)
            return
        connection = self._pending.get(request_id)
        if connection is None:
            if request_id in self._connections:
                self.session.reset(event.stream_id, RstStatus.PROTOCOL_ERROR)
                return
            connection = _Connection(request_id, 0)
            self._pending[request_id] = connection
        if (kind == "error" and connection.error_stream) or (
            kind == "data" and connection.data_stream
        ):
            self.session.reset(event.stream_id, RstStatus.PROTOCOL_ERROR)
            return
        self.session.reply(event.stream_id, {})
        self._by_stream[event.stream_id] = connection
        if kind == "error":
            connection.error_stream = event.stream_id
            connection.error_replied = True
        else:
            connection.data_stream = event.stream_id
            connection.data_replied = True
            port_text = headers.get("port", "")
            connection.port = int(port_text) if port_text.isascii() and port_text.isdigit() else 0
        if not (connection.error_stream and connection.data_stream):
            return
        del self._pending[request_id]
        self._connections[request_id] = connection
        if not 1 <= connection.port <= 65535:
            # The kubelet's answer to an unparsable or zero port, on the error stream.
            self._end_streams(connection, f"invalid port {headers.get('port', '')!r}".encode())
            return
        self._events.append(ConnectionRequested(request_id, connection.port))

    def _on_error_data(self, connection: _Connection, event: DataReceived) -> None:
        # The client writes nothing on the error stream; its FIN is all we expect.
        self.session.consumed(event.stream_id, len(event.data))

    def _on_reset(self, connection: _Connection, stream_id: int) -> None:
        self._pending.pop(connection.request_id, None)
        if connection.request_id in self._connections:
            self._forget(connection, reset=True)
        else:
            for other in (connection.error_stream, connection.data_stream):
                self._by_stream.pop(other, None)
                if other and other != stream_id:
                    self.session.reset(other, RstStatus.CANCEL)
