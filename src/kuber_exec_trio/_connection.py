"""An :class:`ExecConnection` over a trio-websocket connection, with keepalive pings."""

from __future__ import annotations

import trio
import trio_websocket

from kuber_exec_core import ExecError, ExecErrorCode, Message, Subprotocol

__all__ = ["TrioWebSocketExecConnection"]

_ABNORMAL_CLOSURE = 1006


class TrioWebSocketExecConnection:
    """Wraps a ``trio_websocket.WebSocketConnection``; see :class:`ExecConnection`.

    Keepalive (protocol.md §7: servers never ping, load balancers drop idle connections): the
    ``keepalive`` task pings every ``interval`` seconds. A pong that does not come within
    ``timeout`` while this side is waiting for data means the peer is dead: the pending
    ``receive_message`` returns ``None`` with that reason. While the consumer is slow (not
    waiting for data), trio-websocket's reader is blocked behind unread messages and cannot see
    the pong, so a late pong then is our own backpressure, not a dead peer, and is not fatal.
    """

    def __init__(self, websocket: trio_websocket.WebSocketConnection, subprotocol: Subprotocol):
        self._websocket = websocket
        self._subprotocol = subprotocol
        self._receiving = False
        self._receive_scope: trio.CancelScope | None = None
        self._closed = False
        self._clean = False
        self._reason: str | None = None

    def __repr__(self) -> str:
        return f"<TrioWebSocketExecConnection {self._subprotocol.value} closed={self._closed}>"

    @property
    def subprotocol(self) -> Subprotocol:
        return self._subprotocol

    @property
    def closed_cleanly(self) -> bool:
        return self._clean

    @property
    def close_reason(self) -> str | None:
        return self._reason

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

    def _end(self, *, clean: bool, reason: str | None) -> None:
        if not self._closed:
            self._closed = True
            self._clean = clean
            self._reason = reason

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
