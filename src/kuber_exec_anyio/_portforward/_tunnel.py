"""One tunnel WebSocket (``SPDY/3.1+portforward.k8s.io``) to a pod, carrying many connections.

:class:`TunnelConnection` runs the core's :class:`~kuber_exec_core.portforward.TunnelClient`
over a :class:`~kuber_exec_anyio.transport.WebSocketTransport`: one reader task feeds it every
message and hands each connection its bytes; one keepalive task sends a SPDY PING every
``ping_interval`` seconds and ends the tunnel when no answer comes within ``pong_timeout``;
every send goes through one lock, so the SPDY byte stream leaves in order.

Each connection is a :class:`TunnelStream`, an anyio byte stream with half-close. Backpressure:
a connection's received bytes wait in its buffer until the application reads them, and only
then is the peer's window widened (WINDOW_UPDATE). A peer that speaks flow control (the
sandbox) therefore never sends more than the window; one that does not (client-go's kubelet
side) is held back by the reader instead: while any connection holds more than
``max_buffered`` unread bytes the reader stops reading the WebSocket (TCP then slows the
server), so memory stays bounded either way.

A connection's failure is what the server writes on its error stream; a kubelet may close the
data stream first, so the end of the data waits up to a second for the error stream to end (or
to carry the failure) before it reads as the pod's end.

When the tunnel ends (the server closed it, the pod went away, a protocol error, a missed pong)
every open connection fails with an ``ExecError`` saying why, and :attr:`TunnelConnection.closed`
tells the forward to open a new tunnel.
"""

from __future__ import annotations

import contextlib

import anyio
import anyio.abc
import attrs

from kuber_exec_core import NEED_DATA, ExecError, ExecErrorCode
from kuber_exec_core.portforward import (
    ConnectionData,
    ConnectionEnded,
    ConnectionEOF,
    ConnectionErrorStreamEnded,
    ConnectionFailed,
    ConnectionReady,
    ConnectionWritable,
    PortForwardProtocolError,
    TunnelClient,
    TunnelEvent,
    TunnelPong,
)

from .._connection._transport import TransportClosed, WebSocketTransport

__all__ = ["DEFAULT_MAX_BUFFERED", "TunnelConnection", "TunnelStream"]

#: Unread bytes one connection may hold before the reader stops reading the tunnel.
DEFAULT_MAX_BUFFERED = 1 << 20
#: How long the end of a connection's data waits for its error stream (module docstring).
_ERROR_GRACE = 1.0
#: Bytes queued for the WebSocket above which senders wait for the writer.
_HIGH_WATER = 1 << 20
#: The most bytes one SPDY write takes (a DATA frame is at most 64 KiB; a few per message).
_SEND_CHUNK = 256 * 1024


@attrs.define(eq=False)
class _Connection:
    request_id: str
    port: int
    buffer: bytearray = attrs.field(factory=bytearray)
    changed: anyio.Event = attrs.field(factory=anyio.Event)
    ready: bool = False
    eof: bool = False
    error_stream_ended: bool = False
    ended: bool = False
    failure: ExecError | None = None
    bytes_received: int = 0
    bytes_sent: int = 0

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()


class TunnelConnection:
    """The tunnel over ``transport``; :meth:`run` must be running (in a task) while it is used."""

    def __init__(
        self,
        transport: WebSocketTransport,
        *,
        pod: str,
        ping_interval: float | None = 10.0,
        pong_timeout: float = 10.0,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
    ) -> None:
        self._transport = transport
        self.pod = pod
        self._tunnel = TunnelClient()
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._max_buffered = max_buffered
        self._connections: dict[str, _Connection] = {}
        self._kick = anyio.Event()
        self._sent = anyio.Event()
        self._writable = anyio.Event()
        self._drained = anyio.Event()
        self._pong = anyio.Event()
        #: Why the tunnel ended; ``None`` while it runs.
        self.error: ExecError | None = None
        self._stop = anyio.Event()
        self._retired = False
        self._last_received = 0.0

    @property
    def closed(self) -> bool:
        return self.error is not None

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def run(self) -> None:
        """Read the tunnel and keep it alive until it ends or :meth:`stop` is called."""
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._keepalive, tasks.cancel_scope)
                tasks.start_soon(self._wait_stop, tasks.cancel_scope)
                tasks.start_soon(self._writer, tasks.cancel_scope)
                try:
                    await self._flush()  # our SETTINGS and session window
                    await self._read()
                except ExecError as error:
                    self._end(error)
                except TransportClosed as closed:
                    self._end(_tunnel_ended(closed.reason or "the server closed it"))
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            self._end(ExecError(ExecErrorCode.FAILED, f"the tunnel to pod {self.pod} ended"))

    def retire(self) -> None:
        """Take no new connection; stop once the open ones have closed."""
        self._retired = True
        if not self._connections:
            self.stop()

    def stop(self) -> None:
        """End the tunnel (its connections fail); :meth:`run` returns soon after."""
        self._end(ExecError(ExecErrorCode.ABORTED, "the port-forward was closed"))
        self._stop.set()

    async def _writer(self, scope: anyio.CancelScope) -> None:
        try:
            await self._write()
        except TransportClosed as closed:
            self._end(_tunnel_ended(closed.reason or "the connection broke"))
            scope.cancel()

    async def _wait_stop(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()

    def _end(self, error: ExecError) -> None:
        if self.error is None:
            self.error = error
        for connection in self._connections.values():
            if connection.failure is None and not connection.ended:
                connection.failure = self.error
            connection.wake()
        self._writable.set()
        self._drained.set()
        self._sent.set()

    async def _flush(self) -> None:
        """Have what is queued sent, by the writer task: bytes taken from the session hold
        every connection's frames, so no caller's cancellation may lose them. Waits while
        more than ``_HIGH_WATER`` bytes are queued (backpressure on the senders)."""
        self._kick.set()
        while self._tunnel.session.pending_bytes > _HIGH_WATER and self.error is None:
            sent = self._sent
            await sent.wait()

    async def _write(self) -> None:
        # The one task that sends on the WebSocket: cancelled only with the tunnel.
        while True:
            kick = self._kick
            await kick.wait()
            self._kick = anyio.Event()
            data = self._tunnel.data_to_send()
            if data:
                await self._transport.send(data)
            self._sent.set()
            self._sent = anyio.Event()

    async def _read(self) -> None:
        while True:
            try:
                message = await self._transport.receive()
            except TransportClosed as closed:
                raise _tunnel_ended(closed.reason or "the server closed it") from None
            self._last_received = anyio.current_time()
            if isinstance(message, str):
                raise PortForwardProtocolError("a text message on the tunnel")
            try:
                self._tunnel.receive_data(message)
            finally:
                # Answers (pongs, window updates, a GOAWAY on an error) go out; the reader
                # never waits for the writer (that could stall both ends).
                self._kick.set()
            while (event := self._tunnel.next_event()) is not NEED_DATA:
                self._on_event(event)
            self._kick.set()
            while any(len(c.buffer) > self._max_buffered for c in self._connections.values()):
                self._drained = anyio.Event()
                await self._drained.wait()

    def _on_event(self, event: TunnelEvent) -> None:
        if isinstance(event, TunnelPong):
            self._pong.set()
            return
        if isinstance(event, ConnectionWritable):
            self._writable.set()
            self._writable = anyio.Event()
            return
        request_id = getattr(event, "request_id", None)
        connection = self._connections.get(request_id) if isinstance(request_id, str) else None
        if connection is None:
            return
        if isinstance(event, ConnectionReady):
            connection.ready = True
        elif isinstance(event, ConnectionData):
            connection.buffer += event.data
            connection.bytes_received += len(event.data)
        elif isinstance(event, ConnectionEOF):
            connection.eof = True
        elif isinstance(event, ConnectionFailed):
            connection.failure = ExecError(ExecErrorCode.FAILED, event.message)
            connection.error_stream_ended = True
        elif isinstance(event, ConnectionErrorStreamEnded):
            connection.error_stream_ended = True
        elif isinstance(event, ConnectionEnded):
            connection.ended = True
            if event.reset and connection.failure is None and not connection.eof:
                connection.failure = ExecError(
                    ExecErrorCode.FAILED,
                    f"the server reset the connection to port {connection.port}",
                )
            del self._connections[connection.request_id]
            if self._retired and not self._connections:
                self.stop()
        connection.wake()

    async def _keepalive(self, scope: anyio.CancelScope) -> None:
        if self._ping_interval is None:
            return
        while True:
            await anyio.sleep(self._ping_interval)
            self._pong = anyio.Event()
            try:
                self._tunnel.ping()
            except ExecError:
                return  # the reader sees the same end and reports it
            self._kick.set()
            sent_at = anyio.current_time()
            with anyio.move_on_after(self._pong_timeout):
                await self._pong.wait()
            # Anything from the peer proves it alive: a pong may wait behind a lot of data.
            if not self._pong.is_set() and self._last_received < sent_at:
                self._end(
                    ExecError(
                        ExecErrorCode.FAILED,
                        f"the tunnel to pod {self.pod} did not answer a ping within "
                        f"{self._pong_timeout:g} s",
                    )
                )
                scope.cancel()
                return

    async def open(self, port: int) -> TunnelStream:
        """A new connection to ``port`` of the pod, once the server accepted it.

        Raises:
            ExecError: ``EXEC_INVALID`` for a port outside 1..65535; ``EXEC_FAILED`` when the
                tunnel has ended or the server refused the connection.
        """
        if self.error is not None:
            raise self.error
        if self._retired:
            raise ExecError(ExecErrorCode.FAILED, f"the tunnel to pod {self.pod} is retired")
        request_id = self._tunnel.open_connection(port)
        connection = _Connection(request_id, port)
        self._connections[request_id] = connection
        stream = TunnelStream(self, connection)
        try:
            await self._flush()
            while not connection.ready:
                if connection.failure is not None:
                    raise connection.failure
                if connection.ended:
                    raise ExecError(ExecErrorCode.FAILED, f"the connection to port {port} ended")
                await connection.changed.wait()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            raise
        return stream

    # -- what a TunnelStream calls --------------------------------------------------------------

    async def _receive(self, connection: _Connection, max_bytes: int) -> bytes:
        while not connection.buffer:
            # A failure reported on the error stream wins over the data stream's end.
            if connection.failure is not None:
                raise connection.failure
            if connection.ended:
                raise anyio.EndOfStream
            if connection.eof:
                # A kubelet may close the data stream before it writes the failure on the
                # error stream: give that a moment (a clean end closes it at once too).
                if not connection.error_stream_ended:
                    with anyio.move_on_after(_ERROR_GRACE):
                        while not (connection.error_stream_ended or connection.ended):
                            await connection.changed.wait()
                if connection.failure is not None:
                    raise connection.failure
                raise anyio.EndOfStream
            await connection.changed.wait()
        data = bytes(connection.buffer[:max_bytes])
        del connection.buffer[:max_bytes]
        self._drained.set()
        if not self.closed:
            self._tunnel.consumed(connection.request_id, len(data))
            # Never wait for the senders' backpressure here: a reader held behind a blocked
            # writer, whose peer waits for us to read, would stall both ends.
            self._kick.set()
        return data

    async def _send(self, connection: _Connection, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if connection.failure is not None:
                raise connection.failure
            if connection.ended or self.error is not None:
                raise anyio.ClosedResourceError
            window = self._tunnel.send_window(connection.request_id)
            if window == 0:
                writable = self._writable
                await writable.wait()
                continue
            limit = _SEND_CHUNK if window is None else min(window, _SEND_CHUNK)
            taken = self._tunnel.send(connection.request_id, bytes(view[:limit]))
            connection.bytes_sent += taken
            view = view[taken:]
            await self._flush()

    async def _send_eof(self, connection: _Connection) -> None:
        if self.error is None:
            self._tunnel.close_write(connection.request_id)
            await self._flush()

    async def _close(self, connection: _Connection) -> None:
        self._connections.pop(connection.request_id, None)
        connection.ended = True
        if self.error is None:
            self._tunnel.reset(connection.request_id)
            with contextlib.suppress(TransportClosed):
                await self._flush()
        self._drained.set()
        if self._retired and not self._connections:
            self.stop()


def _tunnel_ended(reason: str) -> ExecError:
    return ExecError(ExecErrorCode.FAILED, f"the port-forward tunnel ended: {reason}")


class TunnelStream(anyio.abc.ByteStream):
    """One forwarded TCP connection on a tunnel: an anyio byte stream with half-close.

    ``receive`` raises ``anyio.EndOfStream`` after the pod's side half-closed, and an
    ``ExecError`` (``EXEC_FAILED``) with the server's message when the connection failed (nothing
    listening, the pod gone, the tunnel ended). ``send_eof`` half-closes our side; ``aclose``
    ends the connection (both streams reset) and is idempotent.
    """

    #: ``send_eof`` reaches the pod as a TCP half-close.
    half_close = True

    def __init__(self, tunnel: TunnelConnection, connection: _Connection) -> None:
        self._tunnel = tunnel
        self._connection = connection
        self._closed = False

    @property
    def port(self) -> int:
        return self._connection.port

    @property
    def pod(self) -> str:
        return self._tunnel.pod

    @property
    def bytes_received(self) -> int:
        return self._connection.bytes_received

    @property
    def bytes_sent(self) -> int:
        return self._connection.bytes_sent

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        return await self._tunnel._receive(self._connection, max_bytes)

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._tunnel._send(self._connection, item)

    async def send_eof(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._tunnel._send_eof(self._connection)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._tunnel._close(self._connection)
