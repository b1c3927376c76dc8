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

import h11
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
from kuber_exec_kube import DEFAULT_PING_INTERVAL, DEFAULT_PONG_TIMEOUT, describe_error

from ._connection import TrioWebSocketExecConnection

__all__ = ["connect_exec"]

logger = logging.getLogger("kuber_exec.trio.websocket")

#: Real servers send ≤ 32 KiB per message and kill sessions over 32 MiB; accept up to that.
MAX_SERVER_MESSAGE_BYTES = 32 * 1024 * 1024
# trio-websocket's default 4 KiB socket reads cost a syscall per 4 KiB of output.
_RECEIVE_BUFFER_BYTES = 256 * 1024
# Enough for any refusal's Status body; only the upgrade response is kept.
_MAX_REFUSAL_BYTES = 64 * 1024

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
                upgrade = _UpgradeStream(stream)
                with trio.fail_after(connect_timeout):
                    websocket = await trio_websocket.wrap_client_stream(
                        nursery,
                        # It only uses the Stream interface (its endpoints fall back to repr).
                        upgrade,  # type: ignore[arg-type]
                        parts.netloc,
                        resource,
                        subprotocols=[protocol.value for protocol in offer],
                        extra_headers=encoded,
                        message_queue_size=1,
                        max_message_size=MAX_SERVER_MESSAGE_BYTES,
                        receive_buffer_size=_RECEIVE_BUFFER_BYTES,
                    )
                upgrade.upgraded = True
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
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
    finally:
        await trio.aclose_forcefully(stream)


class _UpgradeStream(trio.abc.Stream):
    """The exec stream as trio-websocket sees it, keeping the server's answer to the upgrade.

    trio-websocket never reports a refusal whose body ends where the connection ends (no
    ``Content-Length``): the handshake waits until the connect timeout. A runtime's streaming
    server (the kubelet's code) refuses an unsupported subprotocol with exactly
    ``HTTP/1.1 403 Forbidden``, an empty header block, and a close. So at end of stream before
    the upgrade, this stream raises the refusal as ``ConnectionRejected`` in trio-websocket's
    reader task, which is how trio-websocket itself reports one (into our nursery).
    """

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self._response = bytearray()
        self.upgraded = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._stream.receive_some(max_bytes)
        if not self.upgraded:
            if data:
                self._response += data[: _MAX_REFUSAL_BYTES - len(self._response)]
            elif (refusal := _refusal(bytes(self._response))) is not None:
                raise refusal
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _refusal(response: bytes) -> trio_websocket.ConnectionRejected | None:
    """The non-101 HTTP response in ``response`` (all the server sent, then it closed)."""
    parser = h11.Connection(h11.CLIENT)
    parser.send(h11.Request(method="GET", target="/", headers=[("Host", "exec")]))
    parser.receive_data(response)
    parser.receive_data(b"")
    head: h11.Response | None = None
    body = bytearray()
    try:
        while isinstance(event := parser.next_event(), h11.Response | h11.Data):
            if isinstance(event, h11.Response):
                head = event
            else:
                body += event.data
    except h11.RemoteProtocolError:
        return None
    if head is None:
        return None
    return trio_websocket.ConnectionRejected(head.status_code, tuple(head.headers), bytes(body))


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
            f"Could not connect to {host}:{port}: {describe_error(error)}",
        ) from None
