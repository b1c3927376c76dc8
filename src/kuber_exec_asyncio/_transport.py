"""The exec WebSocket on asyncio: a ``WebSocketTransport`` over ``websockets``.

``open_asyncio_transport`` opens the upgrade with the ``websockets`` library's asyncio client,
reports a refused upgrade with the seed's errors, and hands the shared connection code
(``kuber_exec_anyio.transport``) whole messages, pings and closes. Only the ``websockets``
library's idioms live here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

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

__all__ = ["AsyncioWebSocketTransport", "open_asyncio_transport"]

# Frames websockets buffers before it pauses reading the socket (backpressure).
_MAX_QUEUED_FRAMES = 4


# websockets logs every handshake header at DEBUG, Authorization included: never passed on.
_TRANSPORT_LOGGER = NoDebugLogger(logging.getLogger("kuber_exec.asyncio.transport"))


class AsyncioWebSocketTransport:
    """A ``websockets`` client connection as a
    :class:`~kuber_exec_anyio.transport.WebSocketTransport`."""

    def __init__(
        self, websocket: ClientConnection, max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES
    ) -> None:
        self._websocket = websocket
        self._max_message_bytes = max_message_bytes

    @property
    def subprotocol(self) -> str | None:
        return self._websocket.subprotocol

    @property
    def closing_handshake_done(self) -> bool:
        """Whether the server's Close frame arrived and ours went out: ``websockets`` replies
        to the server's Close as it parses it, so nothing is left to wait for before the abort
        (read by the shared close, ``kuber_exec_anyio._connection``)."""
        protocol = self._websocket.protocol
        return protocol.close_rcvd is not None and protocol.close_sent is not None

    def _gone(self) -> bool:
        transport = self._websocket.transport
        return transport is None or transport.is_closing()

    async def send(self, message: Message) -> None:
        if self._websocket.state is not State.OPEN:
            raise TransportClosed(clean=False)
        try:
            await self._websocket.send(message)
        except ConnectionClosed:
            raise TransportClosed(clean=False) from None
        except AttributeError:
            # websockets aborts the asyncio transport when a send fails, and asyncio's abort of
            # a transport it has already torn down raises AttributeError ('NoneType' object
            # has no attribute 'call_soon'): the connection is gone, nothing else.
            if self._gone():
                raise TransportClosed(clean=False) from None
            raise

    async def receive(self) -> Message:
        try:
            message: Message = await self._websocket.recv()
        except ConnectionClosed as closed:
            codes = {frame.code for frame in (closed.sent, closed.rcvd) if frame is not None}
            reason = (
                message_too_big(self._max_message_bytes) if CLOSE_MESSAGE_TOO_BIG in codes else None
            )
            raise TransportClosed(clean=closed.rcvd is not None, reason=reason) from None
        return message

    async def ping(self) -> None:
        if self._websocket.state is not State.OPEN:
            raise TransportClosed(clean=False)
        try:
            pong = await self._websocket.ping()
            await pong
        except ConnectionClosed:
            raise TransportClosed(clean=False) from None
        except AttributeError:  # as in send
            if self._gone():
                raise TransportClosed(clean=False) from None
            raise

    async def aclose(self) -> None:
        websocket = self._websocket
        if websocket.state is not State.OPEN or self._gone():
            return  # Already closing or closed: only the abort that follows is left.
        if websocket.transport.get_write_buffer_size() > 0:
            # Unsent bytes: the peer is not reading, a Close frame would wait in drain().
            return
        try:
            await websocket.close()
        except AttributeError:  # as in send: the transport went away under websockets
            if not self._gone():
                raise

    def abort(self) -> None:
        # Aborting a transport that asyncio has already torn down raises from inside asyncio.
        if not self._gone():
            self._websocket.transport.abort()


@asynccontextmanager
async def open_asyncio_transport(
    options: TransportOptions,
) -> AsyncIterator[AsyncioWebSocketTransport]:
    """Open the exec WebSocket described by ``options`` on asyncio.

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    url = options.url
    if url.startswith(("http://", "https://")):
        url = "ws" + url[len("http") :]
    try:
        websocket = await connect(
            url,
            # wss without a context: the default one (verifying); ws must have none at all.
            ssl=(options.ssl_context or True) if url.startswith("wss://") else None,
            subprotocols=list(options.subprotocols),  # type: ignore[arg-type]
            additional_headers=list(options.headers),
            compression=None,  # real servers never negotiate extensions
            proxy=None,
            open_timeout=options.connect_timeout,
            ping_interval=None,  # the shared keepalive tells a dead peer from backpressure
            close_timeout=None,  # the shared code bounds the close
            max_size=options.max_message_bytes,
            max_queue=_MAX_QUEUED_FRAMES,
            logger=_TRANSPORT_LOGGER,
        )
    except InvalidStatus as rejected:
        response = rejected.response
        raise exec_upgrade_error(
            response.status_code, bytes(response.body or b""), options.subprotocols
        ) from None
    except (InvalidHandshake, OSError, TimeoutError) as error:
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
    transport = AsyncioWebSocketTransport(websocket, options.max_message_bytes)
    try:
        yield transport
    finally:
        transport.abort()
