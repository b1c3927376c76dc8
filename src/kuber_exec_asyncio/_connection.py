"""An :class:`ExecConnection` over a ``websockets`` asyncio connection, with keepalive pings."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from kuber_exec_core import ConnectionEnd, ExecError, ExecErrorCode, Message, Subprotocol

__all__ = ["AsyncioWebSocketExecConnection"]


class AsyncioWebSocketExecConnection(ConnectionEnd):
    """Wraps a ``websockets`` client connection; see :class:`ExecConnection`.

    Keepalive (protocol.md §7: servers never ping, load balancers drop idle connections): the
    ``keepalive`` task pings every ``interval`` seconds. A pong that does not come within
    ``pong_timeout`` while this side is waiting for data means the peer is dead: the pending
    ``receive_message`` returns ``None`` with that reason. While the consumer is slow (not
    waiting for data), websockets has paused reading behind unread messages and cannot see the
    pong, so a late pong then is our own backpressure, not a dead peer, and is not fatal.
    """

    def __init__(self, websocket: ClientConnection, subprotocol: Subprotocol) -> None:
        super().__init__(subprotocol)
        self._websocket = websocket
        self._receiving = False

    async def send_message(self, message: Message) -> None:
        try:
            await self._websocket.send(message)
        except ConnectionClosed:
            raise ExecError(
                ExecErrorCode.FAILED, "The exec connection closed while sending"
            ) from None

    async def receive_message(self) -> Message | None:
        if self._closed:
            return None
        self._receiving = True
        try:
            message: Message = await self._websocket.recv()
            return message
        except ConnectionClosed as closed:
            # A no-op when keepalive already ended the connection with its own reason.
            self._end(clean=closed.rcvd is not None, reason=None)
            return None
        finally:
            self._receiving = False

    async def keepalive(self, interval: float, pong_timeout: float) -> None:
        """Ping forever (until cancelled); end the connection when the peer stops answering."""
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                pong = await self._websocket.ping()
                await asyncio.wait_for(pong, pong_timeout)
            except ConnectionClosed:
                return
            except TimeoutError:
                if self._receiving:
                    self._end(
                        clean=False, reason=f"no pong from the server within {pong_timeout:g} s"
                    )
                    # Aborting the transport wakes the pending recv() with ConnectionClosed.
                    self._websocket.transport.abort()
                    return
