"""The exec WebSocket on asyncio: a ``WebSocketTransport`` on the ``websockets`` sans-IO protocol.

``open_asyncio_transport`` opens its own TCP/TLS connection with an ``asyncio.Protocol``, runs
the upgrade through ``websockets``' sans-IO ``ClientProtocol``, reports a refused upgrade with the
seed's errors, and hands the shared connection code (``kuber_exec_anyio.transport``) whole
messages, pings and closes. The parsing of the server's frames, the upgrade's answer and what a
send, a ping or a close may do are shared with the trio binding (``kuber_exec_websocket``);
only asyncio's I/O lives here: the protocol callbacks, flow control both ways, the connect and
the upgrade's deadline.

The event loop's ``data_received`` feeds the parser and writes its replies (a pong, the Close
echo) at once; the task that awaits :meth:`AsyncioWebSocketTransport.receive` takes whole
messages, with no message assembler between them: ``websockets``' own asyncio client's (a queue
of frames, a join per message, a future per wait) costs more per 32 KiB message than all of
kuber-exec's own work (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from contextlib import AbstractAsyncContextManager
from types import TracebackType

from websockets.client import ClientProtocol

from kuber_exec_anyio.transport import (
    NoDebugLogger,
    TransportClosed,
    TransportOptions,
    describe_error,
)
from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_websocket import (
    DROPPED,
    ClientConnection,
    UpgradeAnswer,
    open_protocol,
    upgrade_failed,
)

__all__ = ["AsyncioWebSocketTransport", "open_asyncio_transport"]

#: Messages parsed and not taken before reading pauses (backpressure): with 256 KiB reads and
#: 32 KiB messages, one read's worth. Reading resumes when the receiver has taken them all.
_MAX_QUEUED_MESSAGES = 8


class AsyncioWebSocketTransport(asyncio.Protocol):
    """One exec WebSocket on an asyncio transport: the upgrade through ``websockets``'
    ``ClientProtocol``, which also writes every client frame; the server's frames parsed by
    ``kuber_exec_websocket.ReceivedFrames``.

    It is its connection's ``asyncio.Protocol`` too: the loop calls ``data_received``, which
    parses, writes the replies (a pong, the Close echo) and wakes the receiver. Writes are
    synchronous in asyncio (``transport.write`` buffers), so nothing needs a lock; a send waits
    only while the write buffer is over its high-water mark.
    """

    def __init__(self, protocol: ClientProtocol, options: TransportOptions) -> None:
        self._protocol = protocol
        self._connection = ClientConnection(protocol, options.max_message_bytes)
        self._received = self._connection.received
        self._transport: asyncio.Transport | None = None
        # Until the upgrade's answer is whole, reads go to it; then the opener is woken.
        self._answer: UpgradeAnswer | None = UpgradeAnswer(protocol, options.subprotocols)
        self._refusal: ExecError | None = None
        self._handshake_read = asyncio.Event()
        self._data_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._lost = False

    # -- the WebSocketTransport seam -----------------------------------------------------------

    @property
    def subprotocol(self) -> str | None:
        return self._connection.subprotocol

    @property
    def closing_handshake_done(self) -> bool:
        """Whether the server's Close frame arrived and ours went out: the reply is written as
        the Close is parsed, so nothing is left to wait for before the abort (read by the
        shared close, ``kuber_exec_anyio._connection._connection``)."""
        return self._received.closing_handshake_done

    async def send(self, message: Message) -> None:
        if self._lost or not self._connection.queue_message(message):
            raise TransportClosed(clean=False)
        self._write_pending()
        if self._writing_paused:
            await self._drain()

    async def receive(self) -> Message:
        received = self._received
        while True:
            message = received.next_message()
            if message is not None:
                return message
            end = received.end
            if end is not None:
                # A Close the protocol queued as it failed the connection goes out first.
                self._write_pending()
                raise TransportClosed(clean=end.clean, reason=end.reason)
            await self._wait_for_data()

    async def ping(self) -> None:
        pong = asyncio.Event()
        payload = self._connection.queue_ping(pong)
        if payload is None:
            raise TransportClosed(clean=False)
        try:
            self._write_pending()
            await pong.wait()
        finally:
            answered = self._connection.ping_answered(payload)
        if not answered:
            raise TransportClosed(clean=False)

    async def aclose(self) -> bool:
        transport = self._transport
        if transport is None or transport.get_write_buffer_size() > 0:
            # Unsent bytes: the peer is not reading, and a Close frame would wait behind them.
            return False
        if not self._connection.queue_close():
            return False  # already closing or closed: only the abort that follows is left
        self._write_pending()
        # The server's Close reply comes through receive(), as the end of the messages.
        return True

    def abort(self) -> None:
        if self._transport is not None and not self._lost:
            self._transport.abort()  # connection_lost follows on the next loop iteration
        self._received.ended(DROPPED)
        self._wake_all()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._answer is not None:
            self._answered(data)
            return
        received = self._received
        received.receive_data(data)
        if len(received.messages) > _MAX_QUEUED_MESSAGES and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        self._wake(self._data_waiter)
        self._write_pending()

    def eof_received(self) -> bool | None:
        if self._answer is not None:
            self._answered(None)
        else:
            self._received.receive_eof()
            self._wake(self._data_waiter)
        return None  # asyncio closes the transport: nothing more can come

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._answer is not None:
            self._answered(None)
        self._received.ended(DROPPED)
        self._wake_all()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake(self._drain_waiter)

    # -- internals -----------------------------------------------------------------------------

    def _answered(self, data: bytes | None) -> None:
        # A read (None: the end of the stream) while the upgrade's answer is not whole. The
        # opener is woken once it is, or once it is a refusal; frames behind an accepted
        # answer are parsed now, before any later read.
        assert self._answer is not None
        try:
            if data is None:
                self._answer.receive_eof()  # raises
            first = self._answer.receive_data(data)
        except ExecError as refusal:
            self._refusal = refusal
            first = b""
        if first is None:
            return
        self._answer = None
        if first:
            self._received.receive_data(first)
        self._handshake_read.set()

    async def _wait_for_data(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        waiter = self._data_waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._data_waiter = None

    async def _drain(self) -> None:
        waiter = self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._drain_waiter = None
        if self._lost:
            raise TransportClosed(clean=False)

    def _write_pending(self) -> None:
        chunks = self._protocol.data_to_send()
        transport = self._transport
        if chunks and transport is not None and not self._lost and not transport.is_closing():
            # b"" asks for a half-close: the abort that follows drops the connection anyway.
            transport.write(b"".join(chunks))

    def _wake_all(self) -> None:
        self._wake(self._data_waiter)
        self._wake(self._drain_waiter)

    @staticmethod
    def _wake(waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def upgrade(self) -> None:
        """Send the upgrade request (queued by ``kuber_exec_websocket.open_protocol``), read
        its answer and judge it; frames that came right behind it go to the receiver, and the
        protocol's answers to them are written. Unbounded: the opener's deadline bounds it.

        Raises:
            ExecError: as :func:`open_asyncio_transport`.
        """
        self._write_pending()
        await self._handshake_read.wait()
        if self._refusal is not None:
            raise self._refusal
        self._write_pending()  # the answers to frames that came with the response


def open_asyncio_transport(
    options: TransportOptions,
) -> AbstractAsyncContextManager[AsyncioWebSocketTransport]:
    """Open the exec WebSocket described by ``options`` on asyncio: connect, upgrade (within
    ``options.connect_timeout`` together) and yield the transport; leaving the block aborts it.

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    return _OpenedTransport(options)


class _OpenedTransport:
    """:func:`open_asyncio_transport`'s block. A class, not a generator context manager: it is
    entered for every exec, where a generator's frame and wrappers cost ~12 k instructions."""

    __slots__ = ("_options", "_transport")

    def __init__(self, options: TransportOptions) -> None:
        self._options = options
        self._transport: AsyncioWebSocketTransport | None = None

    async def __aenter__(self) -> AsyncioWebSocketTransport:
        options = self._options
        protocol, uri = open_protocol(
            options.url,
            subprotocols=options.subprotocols,
            headers=options.headers,
            logger=NoDebugLogger(logging.getLogger("kuber_exec.asyncio.transport")),
            max_message_bytes=options.max_message_bytes,
        )
        transport = AsyncioWebSocketTransport(protocol, options)
        try:
            await _open(transport, uri.host, uri.port, uri.secure, options)
        except BaseException:
            transport.abort()
            raise
        self._transport = transport
        return transport

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._transport is not None
        self._transport.abort()


async def _open(
    transport: AsyncioWebSocketTransport,
    host: str,
    port: int | None,
    secure: bool,
    options: TransportOptions,
) -> None:
    # One deadline for the connect and the upgrade's answer (as ``websockets``' open_timeout):
    # an asyncio.timeout costs ~35 k instructions, a fifth of a short exec's own work.
    loop = asyncio.get_running_loop()
    context = (options.ssl_context or ssl.create_default_context()) if secure else None
    port = port or (443 if secure else 80)
    connected = False
    try:
        async with asyncio.timeout(options.connect_timeout):
            await loop.create_connection(
                lambda: transport,
                host,
                port,
                ssl=context,
                server_hostname=host if secure else None,
            )
            connected = True
            await transport.upgrade()
    except OSError as error:  # TimeoutError among them
        if connected:  # the upgrade's wait ends only in its answer or the deadline
            raise upgrade_failed(f"no answer within {options.connect_timeout:g} s") from None
        raise ExecError(
            ExecErrorCode.FAILED,
            f"Could not connect to {host}:{port}: {describe_error(error)}",
        ) from None
