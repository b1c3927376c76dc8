"""The exec WebSocket on trio: a ``WebSocketTransport`` on the ``websockets`` sans-IO protocol.

``open_trio_transport`` opens its own TCP/TLS stream, runs the upgrade through ``websockets``'
sans-IO ``ClientProtocol``, reports a refused upgrade with the seed's errors, and hands the shared
connection code (``kuber_exec_anyio.transport``) whole messages, pings and closes.

No task of its own: the task that awaits :meth:`TrioWebSocketTransport.receive` reads the socket
and feeds the parser, so a message reaches the session's reader without a hand-over between
tasks, and nothing reads the socket while nobody receives (that is the backpressure). The
library (trio-websocket until issue 19) cost twice the instructions per 32 KiB message of this
loop: a reader task and a channel per message, and a pure-Python parser (wsproto) where
``websockets`` parses with C speedups (docs/benchmarks.md, "trio: where the time goes").
"""

from __future__ import annotations

import itertools
import logging
import ssl
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidState, InvalidStatus, PayloadTooBig
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol as WebSocketSubprotocol
from websockets.uri import parse_uri

from kuber_exec_anyio.transport import (
    CLOSE_MESSAGE_TOO_BIG,
    MAX_SERVER_MESSAGE_BYTES,
    NoDebugLogger,
    TransportClosed,
    TransportOptions,
    describe_error,
    message_too_big,
)
from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_core.kube import exec_upgrade_error

__all__ = ["TrioWebSocketTransport", "open_trio_transport"]

# One read takes what the kernel has, up to this: a syscall per 4 KiB (trio-websocket's default)
# was most of a transfer's cost; 256 KiB is asyncio's own read size.
_RECEIVE_BYTES = 256 * 1024
_CLOSE_NORMAL = 1000
_CLOSE_INVALID_DATA = 1007

_Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
# websockets logs every handshake header at DEBUG, Authorization included: never passed on.
_PROTOCOL_LOGGER = NoDebugLogger(logging.getLogger("kuber_exec.trio.transport"))


class TrioWebSocketTransport:
    """One exec WebSocket on a trio stream, parsed by ``websockets``' ``ClientProtocol``.

    Callers serialise as the seam says (one receiver, one sender); the keepalive's ``ping``
    and the receive path's replies (a pong, the Close echo) also write, so every write goes
    through one lock, in the order the protocol produced the bytes.
    """

    def __init__(
        self,
        protocol: ClientProtocol,
        stream: _Stream,
        max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES,
    ) -> None:
        self._protocol = protocol
        self._stream = stream
        # Frames parsed and not yet taken (a read may carry many messages).
        self._events: deque[Frame] = deque()
        self._max_message_bytes = max_message_bytes
        self._write_lock = trio.Lock()
        self._fragments: list[bytes | bytearray | memoryview] = []
        self._fragmented_opcode: Opcode | None = None
        # Set once the connection is over: how it ended (raised by every later receive).
        self._end: TransportClosed | None = None
        self._aborted = False
        self._pongs: dict[bytes, trio.Event] = {}
        self._ping_numbers = itertools.count()
        self._close_received = trio.Event()

    @property
    def subprotocol(self) -> str | None:
        return self._protocol.subprotocol

    @property
    def closing_handshake_done(self) -> bool:
        """Whether the server's Close frame arrived and our reply has been written, so the
        shared close has nothing left to wait for (``kuber_exec_anyio._connection``)."""
        protocol = self._protocol
        return (
            protocol.close_rcvd is not None
            and protocol.close_sent is not None
            and not self._write_lock.locked()
            and not self._aborted
        )

    async def send(self, message: Message) -> None:
        async with self._write_lock:
            try:
                if isinstance(message, str):
                    self._protocol.send_text(message.encode())
                else:
                    self._protocol.send_binary(message)
            except InvalidState:
                raise TransportClosed(clean=False) from None
            await self._write_pending()

    async def receive(self) -> Message:
        while True:
            while self._events:
                message = self._take(self._events.popleft())
                if message is not None:
                    return message
            self.absorb([])  # a failure noted behind the frames just taken
            if self._end is not None:
                # A Close the protocol queued as it failed the connection goes out first.
                await self._write_replies()
                raise TransportClosed(clean=self._end.clean, reason=self._end.reason)
            await self._read()

    async def ping(self) -> None:
        number = next(self._ping_numbers)
        payload = number.to_bytes(8, "big")
        pong = self._pongs[payload] = trio.Event()
        try:
            async with self._write_lock:
                if self._end is not None or self._protocol.state is not State.OPEN:
                    raise TransportClosed(clean=False)
                self._protocol.send_ping(payload)
                await self._write_pending()
            await pong.wait()
            if payload in self._pongs:  # a pong takes its key off; the end leaves it
                raise TransportClosed(clean=False)
        finally:
            self._pongs.pop(payload, None)

    async def aclose(self) -> None:
        if self._end is None and self._protocol.state is State.OPEN:
            async with self._write_lock:
                try:
                    self._protocol.send_close(_CLOSE_NORMAL)
                except InvalidState:
                    return
                await self._write_pending()
        # The server's Close is read by whoever receives (the shared close keeps receiving).
        await self._close_received.wait()

    def abort(self) -> None:
        # Closing the socket is synchronous in trio and wakes a task blocked on it; for TLS,
        # dropping the transport without close_notify is the point of an abort.
        self._aborted = True
        transport = (
            self._stream.transport_stream
            if isinstance(self._stream, trio.SSLStream)
            else self._stream
        )
        transport.socket.close()
        self._ended(TransportClosed(clean=False))

    # -- the receive path ----------------------------------------------------------------------

    async def _read(self) -> None:
        """One socket read into the parser, then the replies it produced."""
        try:
            data = await self._stream.receive_some(_RECEIVE_BYTES)
        except _STREAM_ERRORS:
            self._ended(TransportClosed(clean=False))
            return
        if data:
            self._protocol.receive_data(data)
        else:
            self._protocol.receive_eof()
        self.absorb(_frames(self._protocol.events_received()), at_eof=not data)
        await self._write_replies()

    def absorb(self, frames: list[Frame], *, at_eof: bool = False) -> None:
        """Take ``frames`` (parsed from the last read, or with the upgrade's response) and
        note whether the protocol has ended the connection: a parse failure (the Close it
        queued goes out with the next write or receive) or the end of the stream."""
        self._events.extend(frames)
        protocol = self._protocol
        if self._events:
            return  # the end, if any, is noted once what came before it is taken
        if protocol.parser_exc is not None:
            too_big = isinstance(protocol.parser_exc, PayloadTooBig)
            reason = message_too_big(self._max_message_bytes) if too_big else None
            self._ended(TransportClosed(clean=False, reason=reason))
        elif at_eof:
            self._ended(TransportClosed(clean=protocol.close_rcvd is not None))

    async def _write_replies(self) -> None:
        # A pong or the Close echo, produced by parsing. When a send holds the lock, its own
        # write loop takes these bytes after its frame: waiting for the lock here could stall
        # reading behind a blocked stdin write (the process would never drain its stdin).
        if self._write_lock.locked() or self._aborted:
            return
        # Taken without a checkpoint, so a cancelled receive loses nothing before writing.
        self._write_lock.acquire_nowait()
        try:
            await self._write_pending()
        except BaseException:
            # A reply cut short may leave a half-written frame: the connection cannot go on.
            self.abort()
            raise
        finally:
            self._write_lock.release()

    def _take(self, frame: Frame) -> Message | None:
        """The whole message ``frame`` completes, if any; control frames are handled here."""
        opcode = frame.opcode
        if opcode is Opcode.BINARY or opcode is Opcode.TEXT:
            if frame.fin:
                return self._message(opcode, bytes(frame.data))
            self._fragmented_opcode = opcode
            self._fragments = [frame.data]
            return None
        if opcode is Opcode.CONT:
            self._fragments.append(frame.data)
            if not frame.fin or self._fragmented_opcode is None:
                return None
            data, self._fragments = b"".join(self._fragments), []
            fragmented, self._fragmented_opcode = self._fragmented_opcode, None
            return self._message(fragmented, data)
        if opcode is Opcode.PONG:
            self._pong(bytes(frame.data))
        elif opcode is Opcode.CLOSE:
            close = self._protocol.close_rcvd
            too_big = close is not None and close.code == CLOSE_MESSAGE_TOO_BIG
            reason = message_too_big(self._max_message_bytes) if too_big else None
            self._ended(TransportClosed(clean=True, reason=reason))
        return None

    def _message(self, opcode: Opcode, data: bytes) -> Message | None:
        if opcode is Opcode.BINARY:
            return data
        try:
            return data.decode()
        except UnicodeDecodeError:
            self._protocol.fail(_CLOSE_INVALID_DATA, "invalid UTF-8 in a text message")
            self._ended(TransportClosed(clean=False, reason="the server sent invalid UTF-8"))
            return None

    def _pong(self, payload: bytes) -> None:
        # A pong answers its ping and every earlier one (RFC 6455 5.5.3).
        for pending in [key for key in self._pongs if key <= payload]:
            event = self._pongs.pop(pending)
            event.set()

    def _ended(self, closed: TransportClosed) -> None:
        if self._end is None:
            self._end = closed
        self._close_received.set()
        for event in self._pongs.values():
            event.set()  # a waiting ping wakes, finds its key still there, and raises

    async def _write_pending(self) -> None:
        """Write what the protocol has queued (the lock is held)."""
        while chunks := self._protocol.data_to_send():
            for chunk in chunks:
                if chunk:  # b"" asks for a half-close: the abort that follows drops it all
                    try:
                        await self._stream.send_all(chunk)
                    except _STREAM_ERRORS:
                        self._ended(TransportClosed(clean=False))
                        raise TransportClosed(clean=False) from None


@asynccontextmanager
async def open_trio_transport(options: TransportOptions) -> AsyncIterator[TrioWebSocketTransport]:
    """Open the exec WebSocket described by ``options`` on trio.

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    url = options.url
    if url.startswith(("http://", "https://")):
        url = "ws" + url[len("http") :]
    try:
        uri = parse_uri(url)
    except InvalidHandshake as error:
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
    protocol = ClientProtocol(
        uri,
        subprotocols=[WebSocketSubprotocol(name) for name in options.subprotocols],
        max_size=options.max_message_bytes,
        logger=_PROTOCOL_LOGGER,
    )
    stream = await _connect(
        uri.host, uri.port, uri.secure, options.ssl_context, options.connect_timeout
    )
    try:
        with trio.move_on_after(options.connect_timeout) as deadline:
            frames = await _upgrade(protocol, stream, options)
        if deadline.cancelled_caught:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"The exec upgrade failed: no answer within {options.connect_timeout:g} s",
            )
        transport = TrioWebSocketTransport(protocol, stream, options.max_message_bytes)
        # Frames (even a parse failure) may have come in the same read as the response, and
        # the protocol may have answered them already (a pong, a Close echo): written now, as
        # a receive writes the answers to what it read.
        transport.absorb(frames)
        await transport._write_replies()
        try:
            yield transport
        finally:
            transport.abort()
    finally:
        await trio.aclose_forcefully(stream)


async def _upgrade(
    protocol: ClientProtocol, stream: _Stream, options: TransportOptions
) -> list[Frame]:
    """Send the upgrade request and read its answer; return the frames that came with it."""
    request = protocol.connect()
    for name, value in options.headers:
        request.headers[name] = value
    protocol.send_request(request)
    try:
        for chunk in protocol.data_to_send():
            await stream.send_all(chunk)
        while True:
            data = await stream.receive_some(_RECEIVE_BYTES)
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            events = protocol.events_received()
            if events or not data:
                break
    except _STREAM_ERRORS as error:
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
    failure = protocol.handshake_exc
    if isinstance(failure, InvalidStatus):
        response = failure.response
        raise exec_upgrade_error(
            response.status_code, bytes(response.body or b""), options.subprotocols
        )
    if failure is not None or not events:
        reason = describe_error(failure) if failure is not None else "the server closed"
        raise ExecError(ExecErrorCode.FAILED, f"The exec upgrade failed: {reason}")
    # The first event is the Response; frames sent right behind it came in the same read.
    return _frames(events[1:])


def _frames(events: list[Request | Response | Frame]) -> list[Frame]:
    # After the handshake the protocol produces nothing but frames.
    return [event for event in events if isinstance(event, Frame)]


async def _connect(
    host: str, port: int | None, secure: bool, context: ssl.SSLContext | None, deadline: float
) -> _Stream:
    try:
        with trio.fail_after(deadline):
            tcp = await trio.open_tcp_stream(host, port or (443 if secure else 80))
            if not secure:
                return tcp
            tls = trio.SSLStream(
                tcp,
                context or ssl.create_default_context(),
                server_hostname=host,
                https_compatible=True,
            )
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(tls)
                raise
            return tls
    except (OSError, trio.TooSlowError, trio.BrokenResourceError) as error:
        raise ExecError(
            ExecErrorCode.FAILED,
            f"Could not connect to {host}:{port}: {describe_error(error)}",
        ) from None
