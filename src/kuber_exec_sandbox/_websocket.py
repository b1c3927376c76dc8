"""The server end of one exec WebSocket, driving ``wsproto`` over a trio stream.

Why ``wsproto`` directly and not trio-websocket: a real server treats every *frame* as a whole
message and never reassembles fragments (docs/protocol.md), which a message-oriented library
cannot reproduce; the handshake answer must be exactly the real one (an empty
``Sec-WebSocket-Protocol`` header when nothing was offered; plain HTTP errors on the same port);
and the end of a session is "Close 1000, then drop TCP" without waiting for the client's Close.

One send path, under a lock: the output pumps and the reader's pong replies share it. The reader
is the only caller of :meth:`receive_message`.
"""

from __future__ import annotations

import contextlib

import trio
from wsproto import ConnectionType
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason

from kuber_exec_core.server import MAX_CLIENT_FRAME_BYTES

__all__ = ["ClientGone", "FrameTooLarge", "WebSocket"]

_RECEIVE_BYTES = 64 * 1024
#: How long the server keeps reading (and discarding) after its Close, so that closing the socket
#: with unread bytes does not turn into a TCP reset that could destroy the client's last frames.
_LINGER_SECONDS = 2.0


class ClientGone(Exception):
    """The client closed the WebSocket or the connection, or broke the framing."""


class FrameTooLarge(Exception):
    """A client frame exceeded :data:`kuber_exec_core.MAX_CLIENT_FRAME_BYTES`."""


class WebSocket:
    """An accepted WebSocket (the 101 answer has been sent)."""

    def __init__(self, stream: trio.abc.HalfCloseableStream, trailing: bytes) -> None:
        self._stream = stream
        self._ws = Connection(ConnectionType.SERVER)
        if trailing:
            self._ws.receive_data(trailing)
        self._send_lock = trio.Lock()
        self._frame: list[bytes | str] = []
        self._frame_size = 0
        self._closed = False

    async def send_message(self, message: bytes | str) -> None:
        """Send one whole, unfragmented message.

        Raises:
            ClientGone: the connection is closed or broken.
        """
        event: Event = TextMessage(message) if isinstance(message, str) else BytesMessage(message)
        await self._send(event)

    async def _send(self, event: Event) -> None:
        async with self._send_lock:
            closing = isinstance(event, CloseConnection)
            if self._closed or (self._ws.state is not ConnectionState.OPEN and not closing):
                raise ClientGone("the WebSocket is closed")
            data = self._ws.send(event)
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._closed = True
                raise ClientGone("the connection broke") from None

    async def receive_message(self) -> bytes | str:
        """The next client frame, as one message (fragments are *not* reassembled).

        Pings are answered on the way.

        Raises:
            ClientGone: the client closed, vanished, or broke the framing (answered with Close).
            FrameTooLarge: a frame over the limit (the caller ends the session).
        """
        while True:
            for event in self._ws.events():
                message = await self._handle(event)
                if message is not None:
                    return message
            if self._closed:
                raise ClientGone("the WebSocket is closed")
            try:
                data = bytes(await self._stream.receive_some(_RECEIVE_BYTES))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self._ws.receive_data(data or None)

    async def _handle(self, event: Event) -> bytes | str | None:
        if isinstance(event, Message):
            self._frame.append(event.data)
            self._frame_size += len(event.data)
            if self._frame_size > MAX_CLIENT_FRAME_BYTES:
                self._frame.clear()
                raise FrameTooLarge(f"a client frame exceeded {MAX_CLIENT_FRAME_BYTES} bytes")
            if not event.frame_finished:
                return None
            parts, self._frame, self._frame_size = self._frame, [], 0
            if isinstance(event, TextMessage):
                return "".join(p for p in parts if isinstance(p, str))
            return b"".join(p for p in parts if isinstance(p, bytes))
        if isinstance(event, Ping):
            with contextlib.suppress(ClientGone):
                await self._send(event.response())
            return None
        if isinstance(event, CloseConnection):
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                # The client's Close: answer it (RFC 6455 §5.5.1), then the session is over.
                with contextlib.suppress(ClientGone):
                    await self._send(event.response())
            elif event.code != CloseReason.ABNORMAL_CLOSURE and not self._closed:
                # wsproto rejected the client's framing: tell the client why.
                with contextlib.suppress(ClientGone):
                    await self._send(CloseConnection(code=event.code, reason=event.reason or ""))
            self._closed = True
            raise ClientGone(f"the client closed the WebSocket ({event.code})")
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send Close (if still possible), half-close TCP, drain briefly, close the socket.

        Never raises for a broken connection: closing is best effort by nature.
        """
        if not self._closed and self._ws.state is ConnectionState.OPEN:
            with contextlib.suppress(ClientGone):
                await self._send(CloseConnection(code=code, reason=reason))
        self._closed = True
        try:
            await self._linger()
        finally:
            with trio.CancelScope(shield=True):
                await self._stream.aclose()

    async def drop(self) -> None:
        """End the connection without a Close frame, as a broken network does: half-close TCP
        (the client reads what was sent, then end of stream), drain briefly, close the socket."""
        self._closed = True
        try:
            await self._linger()
        finally:
            with trio.CancelScope(shield=True):
                await self._stream.aclose()

    async def _linger(self) -> None:
        # Half-close, then read and drop until the client closes (bounded): closing a socket with
        # unread input sends a TCP reset, which can destroy the client's unread last frames.
        # The server stopping cancels this at once.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._stream.send_eof()
            with trio.move_on_after(_LINGER_SECONDS):
                while await self._stream.receive_some(_RECEIVE_BYTES):
                    pass
