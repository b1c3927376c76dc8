"""An :class:`ExecConnection` over a trio-websocket connection, with keepalive pings."""

from __future__ import annotations

import trio
import trio_websocket

from kuber_exec_core import ConnectionEnd, ExecError, ExecErrorCode, Message, Subprotocol

__all__ = ["TrioWebSocketExecConnection"]

_ABNORMAL_CLOSURE = 1006


class TrioWebSocketExecConnection(ConnectionEnd):
    """Wraps a ``trio_websocket.WebSocketConnection``; see :class:`ExecConnection`.

    Keepalive (protocol.md §7: servers never ping, load balancers drop idle connections): the
    ``keepalive`` task pings every ``interval`` seconds. A pong that does not come within
    ``pong_timeout`` while this side is waiting for data means the peer is dead: the pending
    ``receive_message`` returns ``None`` with that reason. While the consumer is slow (not
    waiting for data), trio-websocket's reader is blocked behind unread messages and cannot see
    the pong, so a late pong then is our own backpressure, not a dead peer, and is not fatal.
    """

    def __init__(self, websocket: trio_websocket.WebSocketConnection, subprotocol: Subprotocol):
        super().__init__(subprotocol)
        self._websocket = websocket
        self._receiving = False
        self._receive_scope: trio.CancelScope | None = None

    async def send_message(self, message: Message) -> None:
        try:
            await self._websocket.send_message(message)
        except trio_websocket.ConnectionClosed:
            raise ExecError(
                ExecErrorCode.FAILED, "The exec connection closed while sending"
            ) from None

    async def receive_message(self) -> Message | None:
        if self._closed:
            return None
        self._receiving = True
        try:
            with trio.CancelScope() as scope:
                self._receive_scope = scope
                message: Message = await self._websocket.get_message()
                return message
        except trio_websocket.ConnectionClosed as closed:
            code = closed.reason.code if closed.reason is not None else _ABNORMAL_CLOSURE
            self._end(clean=code != _ABNORMAL_CLOSURE, reason=None)
            return None
        finally:
            self._receiving = False
            self._receive_scope = None
        # Reached only when keepalive cancelled the receive: the peer is gone.
        return None

    async def keepalive(self, interval: float, pong_timeout: float) -> None:
        """Ping forever (until cancelled); end the connection when the peer stops answering."""
        while not self._closed:
            await trio.sleep(interval)
            with trio.move_on_after(pong_timeout) as deadline:
                try:
                    await self._websocket.ping()
                except trio_websocket.ConnectionClosed:
                    return
            if deadline.cancelled_caught and self._receiving:
                self._end(clean=False, reason=f"no pong from the server within {pong_timeout:g} s")
                if self._receive_scope is not None:
                    self._receive_scope.cancel()
                return
