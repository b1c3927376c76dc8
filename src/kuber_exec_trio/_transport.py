"""The exec WebSocket on trio: a ``WebSocketTransport`` on the ``websockets`` sans-IO protocol.

``open_trio_transport`` opens its own TCP/TLS stream, runs the upgrade through ``websockets``'
sans-IO ``ClientProtocol``, reports a refused upgrade with the seed's errors, and hands the shared
connection code (``kuber_exec_anyio.transport``) whole messages, pings and closes. The parsing
of the server's frames, the upgrade's answer and what a send, a ping or a close may do are
shared with the asyncio binding (``kuber_exec_websocket``); only trio's I/O lives here: the
reads, the writes under one lock, the connect and the upgrade's deadline.

No task of its own: the task that awaits :meth:`TrioWebSocketTransport.receive` reads the socket
and feeds the parser, so a message reaches the session's reader without a hand-over between
tasks, and nothing reads the socket while nobody receives (that is the backpressure). A reader
task and a channel per message, as a WebSocket library would have, cost twice the instructions
per 32 KiB message of this loop (docs/benchmarks.md, "trio: where the time goes").
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from websockets.client import ClientProtocol

from kuber_exec_anyio.transport import (
    MAX_SERVER_MESSAGE_BYTES,
    NoDebugLogger,
    TransportClosed,
    TransportOptions,
    describe_error,
)
from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_websocket import (
    DROPPED,
    RECEIVE_BYTES,
    ClientConnection,
    UpgradeAnswer,
    open_protocol,
    upgrade_failed,
)

__all__ = ["TrioWebSocketTransport", "open_trio_transport"]

_Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]
_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


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
        self._connection = ClientConnection(protocol, max_message_bytes)
        self._received = self._connection.received
        self._write_lock = trio.Lock()
        self._aborted = False

    @property
    def subprotocol(self) -> str | None:
        return self._connection.subprotocol

    @property
    def closing_handshake_done(self) -> bool:
        """Whether the server's Close frame arrived and our reply has been written, so the
        shared close has nothing left to wait for (``kuber_exec_anyio._connection._connection``)."""
        return (
            self._received.closing_handshake_done
            and not self._write_lock.locked()
            and not self._aborted
        )

    async def send(self, message: Message) -> None:
        async with self._write_lock:
            if not self._connection.queue_message(message):
                raise TransportClosed(clean=False)
            await self._write_pending()

    async def receive(self) -> Message:
        received = self._received
        while True:
            message = received.next_message()
            if message is not None:
                return message
            end = received.end
            if end is not None:
                # A Close the protocol queued as it failed the connection goes out first.
                await self._write_replies()
                raise TransportClosed(clean=end.clean, reason=end.reason)
            await self._read()

    async def ping(self) -> None:
        pong = trio.Event()
        payload: bytes | None = None
        try:
            async with self._write_lock:
                payload = self._connection.queue_ping(pong)
                if payload is None:
                    raise TransportClosed(clean=False)
                await self._write_pending()
            await pong.wait()
        finally:
            answered = payload is not None and self._connection.ping_answered(payload)
        if not answered:
            raise TransportClosed(clean=False)

    async def aclose(self) -> bool:
        if not self._connection.open:
            # Already closing or closed: only the abort that follows is left. Decided before
            # the lock, which a send blocked on a full socket may hold.
            return False
        async with self._write_lock:
            if not self._connection.queue_close():
                return False
            try:
                await self._write_pending()
            except TransportClosed:
                return False  # the connection broke (a reset): no reply can come
        # The server's Close reply comes through receive(), as the end of the messages.
        return True

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
        self._received.ended(DROPPED)

    # -- the receive path ----------------------------------------------------------------------

    async def _read(self) -> None:
        """One socket read into the parser, then the replies it produced."""
        try:
            data = await self._stream.receive_some(RECEIVE_BYTES)
        except _STREAM_ERRORS:
            self._received.ended(DROPPED)
            return
        if data:
            self._received.receive_data(data)
        else:
            self._received.receive_eof()
        await self._write_replies()

    async def receive_first(self, data: bytes) -> None:
        """Parse the bytes that came in the same read as the upgrade's response (frames, even
        a protocol failure) and write the answers to them (a pong, a Close echo), as a
        receive does after its read."""
        if data:
            self._received.receive_data(data)
        await self._write_replies()

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

    async def _write_pending(self) -> None:
        """Write what the protocol has queued (the lock is held)."""
        while chunks := self._protocol.data_to_send():
            for chunk in chunks:
                if chunk:  # b"" asks for a half-close: the abort that follows drops it all
                    try:
                        await self._stream.send_all(chunk)
                    except _STREAM_ERRORS:
                        self._received.ended(DROPPED)
                        raise TransportClosed(clean=False) from None


@asynccontextmanager
async def open_trio_transport(options: TransportOptions) -> AsyncIterator[TrioWebSocketTransport]:
    """Open the exec WebSocket described by ``options`` on trio.

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    protocol, uri = open_protocol(
        options.url,
        subprotocols=options.subprotocols,
        headers=options.headers,
        logger=NoDebugLogger(logging.getLogger("kuber_exec.trio.transport")),
        max_message_bytes=options.max_message_bytes,
    )
    # One deadline for the connect and the upgrade's answer, as on asyncio.
    deadline = trio.current_time() + options.connect_timeout
    stream = await _connect(uri.host, uri.port, uri.secure, options.ssl_context, deadline)
    try:
        with trio.move_on_at(deadline) as upgrading:
            first = await _upgrade(protocol, stream, options)
        if upgrading.cancelled_caught:
            raise upgrade_failed(f"no answer within {options.connect_timeout:g} s")
        transport = TrioWebSocketTransport(protocol, stream, options.max_message_bytes)
        await transport.receive_first(first)
        try:
            yield transport
        finally:
            transport.abort()
    finally:
        await trio.aclose_forcefully(stream)


async def _upgrade(protocol: ClientProtocol, stream: _Stream, options: TransportOptions) -> bytes:
    """Send the upgrade request and read its answer; return the bytes that came behind it."""
    answer = UpgradeAnswer(protocol, options.subprotocols)
    try:
        for chunk in protocol.data_to_send():
            await stream.send_all(chunk)
        while True:
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                answer.receive_eof()  # raises
            first = answer.receive_data(data)
            if first is not None:
                return first
    except _STREAM_ERRORS as error:
        raise upgrade_failed(describe_error(error)) from None


async def _connect(
    host: str, port: int | None, secure: bool, context: ssl.SSLContext | None, deadline: float
) -> _Stream:
    try:
        with trio.fail_at(deadline):
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
