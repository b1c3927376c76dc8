"""Open one exec WebSocket on asyncio: the transport under ``KubernetesBackend.exec``.

``connect_exec`` takes any exec URL: the API server's ``/api/v1/.../pods/{pod}/exec?...`` (what
``KubernetesBackend`` builds) or a container runtime's streaming URL (``/exec/{token}``). It
offers the given subprotocols, maps a refused upgrade to the seed's errors, sends each client
frame as one unfragmented message, pings for keepalive, and closes everything it opened.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    Subprotocol,
    accept_subprotocol,
    exec_upgrade_error,
    single_exception,
)
from kuber_exec_kube import DEFAULT_PING_INTERVAL, DEFAULT_PONG_TIMEOUT, describe_error

from ._connection import AsyncioWebSocketExecConnection

__all__ = ["connect_exec"]

logger = logging.getLogger("kuber_exec.asyncio.websocket")

#: Real servers send ≤ 32 KiB per message and kill sessions over 32 MiB; accept up to that.
MAX_SERVER_MESSAGE_BYTES = 32 * 1024 * 1024
# Frames websockets buffers before it pauses reading the socket (backpressure).
_MAX_QUEUED_FRAMES = 4


class _NoDebugLogger(logging.LoggerAdapter[logging.Logger]):
    """websockets logs every handshake header at DEBUG, ``Authorization`` included: a token
    must never reach a log, so its debug output (headers and frames) is switched off."""

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


_TRANSPORT_LOGGER = _NoDebugLogger(logging.getLogger("kuber_exec.asyncio.transport"))


@asynccontextmanager
async def connect_exec(
    url: str,
    subprotocols: Sequence[Subprotocol],
    *,
    ssl_context: ssl.SSLContext | None = None,
    headers: Sequence[tuple[str, str]] = (),
    connect_timeout: float = 30.0,
    ping_interval: float | None = DEFAULT_PING_INTERVAL,
    pong_timeout: float = DEFAULT_PONG_TIMEOUT,
) -> AsyncIterator[AsyncioWebSocketExecConnection]:
    """Open the exec WebSocket at ``url`` (``ws``/``wss``/``http``/``https``).

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    offer = tuple(subprotocols)
    if url.startswith(("http://", "https://")):
        url = "ws" + url[len("http") :]
    context = connect(
        url,
        # wss without a context: the default one (verifying); ws must have none at all.
        ssl=(ssl_context or True) if url.startswith("wss://") else None,
        subprotocols=[protocol.value for protocol in offer],  # type: ignore[misc]
        additional_headers=list(headers),
        compression=None,  # real servers never negotiate extensions
        proxy=None,
        open_timeout=connect_timeout,
        ping_interval=None,  # our own keepalive tells a dead peer from backpressure
        close_timeout=min(pong_timeout, 5.0),
        max_size=MAX_SERVER_MESSAGE_BYTES,
        max_queue=_MAX_QUEUED_FRAMES,
        logger=_TRANSPORT_LOGGER,
    )
    opened = False
    try:
        async with context as websocket:
            opened = True
            connection = AsyncioWebSocketExecConnection(
                websocket, accept_subprotocol(offer, websocket.subprotocol)
            )
            logger.debug("exec connection uses %s", connection.subprotocol.value)
            with single_exception():
                async with asyncio.TaskGroup() as tasks:
                    keepalive = None
                    if ping_interval is not None:
                        keepalive = tasks.create_task(
                            connection.keepalive(ping_interval, pong_timeout)
                        )
                    try:
                        yield connection
                    finally:
                        if keepalive is not None:
                            keepalive.cancel()
    except InvalidStatus as rejected:
        if opened:
            raise
        response = rejected.response
        raise exec_upgrade_error(
            response.status_code, bytes(response.body or b""), tuple(p.value for p in offer)
        ) from None
    except (InvalidHandshake, OSError, TimeoutError) as error:
        if opened:
            raise
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
