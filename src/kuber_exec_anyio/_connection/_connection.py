"""One exec WebSocket as an :class:`~kuber_exec_anyio.ExecConnection`, over any transport.

``open_exec_connection`` is what each runtime's public ``connect_exec`` is: it opens the upgrade
through the runtime's :data:`TransportOpener`, checks the negotiated subprotocol against the
offer, pings for keepalive, and on the way out closes the WebSocket within a bound (then aborts
the TCP connection), whatever the caller left blocked.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypedDict, Unpack

import anyio

from kuber_exec_core import ExecError, ExecErrorCode, Subprotocol
from kuber_exec_core.channels import Message, accept_subprotocol

from .._backend import ConnectionEnd
from .._groups import single_exception
from ._keepalive import Activity, SharedKeepalive, Turn
from ._transport import TransportClosed, TransportOpener, TransportOptions, WebSocketTransport

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_PING_INTERVAL",
    "DEFAULT_PONG_TIMEOUT",
    "ConnectOptions",
    "ExecConnector",
    "WebSocketExecConnection",
    "open_exec_connection",
]

#: client-go pings every 5 s; a pong deadline well under its ~61 s give-up keeps hangs short.
DEFAULT_PING_INTERVAL = 5.0
DEFAULT_PONG_TIMEOUT = 30.0
#: How long leaving waits for the server's Close reply before dropping the TCP connection. The
#: reply takes one round trip; the closing handshake is skipped (the TCP connection dropped at
#: once) whenever it could not complete: a send in progress or interrupted, a cancelled caller.
DEFAULT_CLOSE_TIMEOUT = 1.0


class ConnectOptions(TypedDict, total=False):
    """The keyword arguments of every runtime's ``connect_exec``."""

    ssl_context: ssl.SSLContext | None
    headers: Sequence[tuple[str, str]]
    connect_timeout: float
    ping_interval: float | None
    pong_timeout: float
    close_timeout: float


class WebSocketExecConnection(ConnectionEnd):
    """An :class:`ExecConnection` over a :class:`WebSocketTransport`, with keepalive.

    Keepalive (servers never ping; load balancers drop idle connections): :meth:`keepalive`
    pings every ``interval`` seconds, but only a connection that is idle: this side waits for
    data and no message came since the last turn. A connection whose output flows, or whose
    consumer is behind, is not pinged: the server is alive, and may be blocked writing to us.
    A server blocked so cannot answer (the kubelet's reader stops at the pong it cannot write),
    so later client bytes stay unread in its socket; when the command ends, closing a socket
    with unread bytes sends a TCP reset, which throws away the output still queued behind it
    (seen on a busy 1.37 cluster: a 10,000-file download lost its tail or its exit status).

    The peer is dead when its pong does not come within ``pong_timeout``, this side is waiting
    for data, and no message came since the ping: the pending ``receive_message`` then returns
    ``None`` with that reason. A late pong is not fatal otherwise: while the consumer is slow
    the socket is not read behind unread messages, so the pong cannot be seen (our own
    backpressure), and a pong queued behind output arrives after it, as messages that prove the
    peer alive.
    """

    def __init__(self, transport: WebSocketTransport, subprotocol: Subprotocol) -> None:
        super().__init__(subprotocol)
        self._transport = transport
        self._receiving = False
        # A message that arrives between keepalive turns, or while a ping waits, proves the
        # peer alive (see the class).
        self._activity = Activity()
        # Sends in progress, and whether one was interrupted (cancelled or failed): then the
        # WebSocket cannot take a Close frame (its socket is full, or a frame is half written).
        self._sending = 0
        self._send_interrupted = False

    @property
    def can_close_gracefully(self) -> bool:
        """Whether a Close frame can go out now: no send in progress or left unfinished."""
        return self._sending == 0 and not self._send_interrupted

    async def send_message(self, message: Message) -> None:
        self._sending += 1
        finished = False
        try:
            await self._transport.send(message)
            finished = True
        except TransportClosed:
            raise ExecError(
                ExecErrorCode.FAILED, "The exec connection closed while sending"
            ) from None
        finally:
            self._sending -= 1
            if not finished:
                self._send_interrupted = True

    async def receive_message(self) -> Message | None:
        if self._closed:
            return None
        self._receiving = True
        try:
            message = await self._transport.receive()
            self._activity.arrived()
            return message
        except TransportClosed as closed:
            # A no-op when keepalive already ended the connection with its own reason.
            self._end(clean=closed.clean, reason=closed.reason)
            return None
        finally:
            self._receiving = False

    async def keepalive(self, interval: float, pong_timeout: float) -> None:
        """Ping until cancelled; end the connection when the peer stops answering."""
        while not self._closed:
            await anyio.sleep(interval)
            if not await self.ping_once(pong_timeout):
                return

    async def ping_once(self, pong_timeout: float) -> bool:
        """One keepalive turn: a ping when the connection is idle; ``False`` once it is over:
        closed, or declared dead now (no pong within ``pong_timeout`` while waiting for data,
        and no message meanwhile; see the class)."""
        if self._closed:
            return False
        turn = await self._activity.turn(self._transport, lambda: self._receiving, pong_timeout)
        if turn is Turn.DEAD:
            self._abort(f"no pong from the server within {pong_timeout:g} s")
        return turn is Turn.ALIVE

    def keepalive_failed(self, error: Exception) -> None:
        """End the connection because pinging it raised ``error`` (``SharedKeepalive``)."""
        self._abort(f"the keepalive failed: {type(error).__name__}")

    def _abort(self, reason: str) -> None:
        self._end(clean=False, reason=reason)
        # Dropping the TCP connection wakes the pending receive (TransportClosed), so receiving
        # needs no cancel scope of its own on the hot path.
        self._transport.abort()


@asynccontextmanager
async def open_exec_connection(
    open_transport: TransportOpener,
    url: str,
    subprotocols: Sequence[Subprotocol],
    *,
    ssl_context: ssl.SSLContext | None = None,
    headers: Sequence[tuple[str, str]] = (),
    connect_timeout: float = 30.0,
    ping_interval: float | None = DEFAULT_PING_INTERVAL,
    pong_timeout: float = DEFAULT_PONG_TIMEOUT,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
    shared_keepalive: SharedKeepalive | None = None,
) -> AsyncIterator[WebSocketExecConnection]:
    """Open the exec WebSocket at ``url`` (``ws``/``wss``/``http``/``https``) through a transport.

    The connection is pinged by ``shared_keepalive`` when one is given (a backend's, for all of
    its connections: no task of its own), else by a task of its own every ``ping_interval``.

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached, the handshake fails or the
            server chose a subprotocol that was not offered; the seed's mapping of a refused
            upgrade otherwise.
    """
    offer = tuple(subprotocols)
    options = TransportOptions(
        url=url,
        subprotocols=tuple(protocol.value for protocol in offer),
        ssl_context=ssl_context,
        headers=tuple(headers),
        connect_timeout=connect_timeout,
    )
    async with open_transport(options) as transport:
        connection = WebSocketExecConnection(
            transport, accept_subprotocol(offer, transport.subprotocol)
        )
        graceful = True
        try:
            if shared_keepalive is not None:
                shared_keepalive.add(connection)
                try:
                    yield connection
                finally:
                    shared_keepalive.remove(connection)
            elif ping_interval is None:
                yield connection
            else:
                with single_exception():
                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(connection.keepalive, ping_interval, pong_timeout)
                        try:
                            yield connection
                        finally:
                            tasks.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            graceful = False
            raise
        finally:
            graceful = graceful and connection.can_close_gracefully
            await _close(transport, graceful, min(pong_timeout, close_timeout))


async def _close(transport: WebSocketTransport, graceful: bool, budget: float) -> None:
    # A cancelled caller must not wait for the server's Close reply (the cancellation is what
    # it asked for), nor can a WebSocket whose send is blocked or half done take a Close frame:
    # then the TCP connection is dropped at once. Otherwise the closing handshake gets one
    # round trip, bounded by ``budget``: our Close goes out, then whatever the server still
    # sends is read and dropped until its Close (unread messages would otherwise hide it behind
    # backpressure). Nobody else receives any more (the session's reader has stopped), so this
    # needs no task of its own. Either way the TCP connection is dropped afterwards, so nothing
    # outlives the block.
    #
    # A transport that knows the handshake is already over (the server's Close arrived and the
    # library has written its reply) says so with a true ``closing_handshake_done``: then
    # nothing is left to wait for.
    if (
        graceful
        and not getattr(transport, "closing_handshake_done", False)
        and anyio.current_effective_deadline() != -math.inf
    ):
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + budget):
            if await transport.aclose():
                await _discard_incoming(transport)
    transport.abort()


async def _discard_incoming(transport: WebSocketTransport) -> None:
    # Until the server's Close (or the end of the connection).
    try:
        while True:
            await transport.receive()
    except TransportClosed:
        return


class ExecConnector:
    """A runtime binding's ``connect_exec``: :func:`open_exec_connection` over its transport."""

    def __init__(self, open_transport: TransportOpener) -> None:
        self._open_transport = open_transport

    def __repr__(self) -> str:
        return f"ExecConnector({self._open_transport.__module__})"

    def __call__(
        self, url: str, subprotocols: Sequence[Subprotocol], **options: Unpack[ConnectOptions]
    ) -> AbstractAsyncContextManager[WebSocketExecConnection]:
        """Open one exec WebSocket at ``url`` (an API server's or a runtime's streaming URL).

        See :func:`open_exec_connection` for the options and errors.
        """
        return open_exec_connection(self._open_transport, url, subprotocols, **options)
