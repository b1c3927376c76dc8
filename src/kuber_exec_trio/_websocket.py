"""Open one exec WebSocket on trio: the transport under ``KubernetesBackend.exec``.

``connect_exec`` takes any exec URL: the API server's ``/api/v1/.../pods/{pod}/exec?...`` (what
``KubernetesBackend`` builds) or a container runtime's streaming URL (``/exec/{token}``). It
offers the given subprotocols, maps a refused upgrade to the seed's errors, sends each client
frame as one unfragmented message, pings for keepalive, and closes everything it opened.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import trio
import trio_websocket

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    Subprotocol,
    accept_subprotocol,
    exec_upgrade_error,
    single_exception,
)
from kuber_exec_kube import DEFAULT_PING_INTERVAL, DEFAULT_PONG_TIMEOUT

from ._connection import TrioWebSocketExecConnection

__all__ = ["connect_exec"]

logger = logging.getLogger("kuber_exec.trio.websocket")

#: Real servers send ≤ 32 KiB per message and kill sessions over 32 MiB; accept up to that.
MAX_SERVER_MESSAGE_BYTES = 32 * 1024 * 1024
# trio-websocket's default 4 KiB socket reads cost a syscall per 4 KiB of output.
_RECEIVE_BUFFER_BYTES = 256 * 1024

_Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


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
) -> AsyncIterator[TrioWebSocketExecConnection]:
    """Open the exec WebSocket at ``url`` (``ws``/``wss``/``http``/``https``).

    Raises (on entry):
        ExecError: ``EXEC_FAILED`` when the server cannot be reached or the handshake fails;
            the seed's mapping of a refused upgrade (``exec_upgrade_error``) otherwise.
    """
    offer = tuple(subprotocols)
    parts = urlsplit(url)
    secure = parts.scheme in ("https", "wss")
    resource = parts.path + (f"?{parts.query}" if parts.query else "")
    encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
    # The TCP/TLS stream is ours, not trio-websocket's: after a server-initiated close
    # trio-websocket's client never closes its stream, and an unclosed socket leaks.
    stream = await _connect(parts.hostname or "", parts.port, secure, ssl_context, connect_timeout)
    opened = False
    try:
        with single_exception():
            async with trio.open_nursery() as nursery:
                with trio.fail_after(connect_timeout):
                    websocket = await trio_websocket.wrap_client_stream(
                        nursery,
                        stream,
                        parts.netloc,
                        resource,
                        subprotocols=[protocol.value for protocol in offer],
                        extra_headers=encoded,
                        message_queue_size=1,
                        max_message_size=MAX_SERVER_MESSAGE_BYTES,
                        receive_buffer_size=_RECEIVE_BUFFER_BYTES,
                    )
                opened = True
                connection = TrioWebSocketExecConnection(
                    websocket, accept_subprotocol(offer, websocket.subprotocol)
                )
                logger.debug("exec connection uses %s", connection.subprotocol.value)
                if ping_interval is not None:
                    nursery.start_soon(connection.keepalive, ping_interval, pong_timeout)
                try:
                    yield connection
                finally:
                    # When the caller is cancelled, trio-websocket's reader task (in this
                    # nursery) is cancelled too: the server's Close reply could never be read,
                    # and waiting for it would hold the cancel for the whole close timeout. The
                    # stream is closed below instead (the server sees the same client close).
                    if trio.current_effective_deadline() != -math.inf:
                        with trio.move_on_after(min(pong_timeout, 5.0)) as closing:
                            closing.shield = True
                            await websocket.aclose()
                    nursery.cancel_scope.cancel()
    except trio_websocket.ConnectionRejected as rejected:
        # trio-websocket's reader task raises the rejection into our nursery.
        if opened:
            raise
        raise exec_upgrade_error(
            rejected.status_code, rejected.body or b"", tuple(p.value for p in offer)
        ) from None
    except (trio_websocket.HandshakeError, trio.TooSlowError, OSError) as error:
        if opened:
            raise
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {type(error).__name__}"
        ) from None
    finally:
        await trio.aclose_forcefully(stream)


async def _connect(
    host: str, port: int | None, secure: bool, context: ssl.SSLContext | None, deadline: float
) -> _Stream:
    try:
        with trio.fail_after(deadline):
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
            f"Could not connect to {host}:{port}: {type(error).__name__}",
        ) from None
