"""The seam under the exec WebSocket: what a runtime's WebSocket library must provide.

Everything about an exec connection that does not depend on the WebSocket library is written
once, here and in ``_connection``: checking the negotiated subprotocol, keepalive pings, telling a
dead peer from our own backpressure, a bounded close. A runtime binding (``kuber_exec_trio`` and
``kuber_exec_asyncio``, both on ``websockets``' sans-IO protocol) only implements
:class:`WebSocketTransport` and a :data:`TransportOpener`: open the upgrade, move whole messages,
ping, close, abort, and map its library's exceptions at that boundary.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import attrs

from kuber_exec_core.channels import Message
from kuber_exec_core.transport import (
    CLOSE_MESSAGE_TOO_BIG,
    MAX_SERVER_MESSAGE_BYTES,
    describe_error,
    message_too_big,
)

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "MAX_SERVER_MESSAGE_BYTES",
    "NoDebugLogger",
    "TransportClosed",
    "TransportOpener",
    "TransportOptions",
    "WebSocketTransport",
    "describe_error",
    "message_too_big",
]


class TransportClosed(Exception):
    """The WebSocket has ended; ``clean`` when the server's Close frame arrived; ``reason``
    why, when the transport knows better than "closed" (a message over the size limit)."""

    def __init__(self, *, clean: bool, reason: str | None = None) -> None:
        super().__init__("the exec WebSocket closed" + (" cleanly" if clean else ""))
        self.clean = clean
        self.reason = reason


class NoDebugLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger for a WebSocket library that never passes DEBUG records on: ``websockets``
    logs every handshake header at DEBUG, ``Authorization`` included, and a token must never
    reach a log. Its INFO and higher records (a failed connection) still do."""

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


class WebSocketTransport(Protocol):
    """One open WebSocket, as the shared connection code drives it.

    Only one task sends at a time and only one receives at a time (the callers serialise).
    """

    @property
    def subprotocol(self) -> str | None:
        """What the server put in ``Sec-WebSocket-Protocol`` (``None`` or empty if nothing)."""
        ...

    async def send(self, message: Message) -> None:
        """Send one whole, unfragmented message (binary for bytes, text for str).

        Raises:
            TransportClosed: the connection is gone.
        """
        ...

    async def receive(self) -> Message:
        """The next whole message. Cancelling the wait loses no message.

        Raises:
            TransportClosed: the connection has ended (no more messages).
        """
        ...

    async def ping(self) -> None:
        """Send a ping and return when its pong arrives (the caller bounds the wait).

        Raises:
            TransportClosed: the connection is gone.
        """
        ...

    async def aclose(self) -> bool:
        """Send a Close frame, without waiting for the server's: ``True`` when one went out and
        the server's reply is to come, through :meth:`receive` (which raises
        ``TransportClosed`` once it has); ``False`` when there is nothing to wait for (the
        connection is already closing, or a Close cannot go out now)."""
        ...

    def abort(self) -> None:
        """Drop the TCP connection now, without a closing handshake; idempotent, never raises."""
        ...


@attrs.frozen(kw_only=True, repr=False)
class TransportOptions:
    """How to open one exec WebSocket. ``headers`` may carry credentials: never in a repr.
    ``connect_timeout`` bounds the connect (TCP, TLS) and the upgrade's answer together."""

    url: str
    subprotocols: tuple[str, ...]
    ssl_context: ssl.SSLContext | None
    headers: tuple[tuple[str, str], ...]
    connect_timeout: float
    max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.headers)
        return (
            f"TransportOptions(url={self.url!r}, subprotocols={self.subprotocols}, "
            f"headers=[{names}])"
        )


#: Opens the upgrade described by the options; leaving the context aborts whatever is left.
#: Raises (on entry) ``ExecError``: the seed's mapping of a refused upgrade, or ``EXEC_FAILED``.
TransportOpener = Callable[[TransportOptions], AbstractAsyncContextManager[WebSocketTransport]]
