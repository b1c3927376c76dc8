"""``KubernetesBackend``: the backend that talks to a real API server, on trio.

REST reads go through the core's plans over a pooled httpx client (``kuber_exec_kube``); the exec
goes over trio-websocket, offering ``v5.channel.k8s.io, v4.channel.k8s.io`` by default, one
unfragmented message per client frame, TLS verified by default, with keepalive pings.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from urllib.parse import urlsplit

import httpx
import trio
import trio_websocket

from kuber_exec_core import (
    Deployment,
    DeploymentLookup,
    ExecError,
    ExecErrorCode,
    ExecStreams,
    LabelSelector,
    Pod,
    PodListing,
    ResolvedTarget,
    Subprotocol,
    accept_subprotocol,
    exec_path,
    exec_upgrade_error,
    single_exception,
)
from kuber_exec_kube import ClusterConfig, RestClient

from ._connection import TrioWebSocketExecConnection

__all__ = ["KubernetesBackend"]

logger = logging.getLogger("kuber_exec.trio.kubernetes")

#: client-go pings every 5 s; a pong deadline well under its ~61 s give-up keeps hangs short.
DEFAULT_PING_INTERVAL = 5.0
DEFAULT_PONG_TIMEOUT = 30.0
#: Real servers send ≤ 32 KiB per message and kill sessions over 32 MiB; accept up to that.
MAX_SERVER_MESSAGE_BYTES = 32 * 1024 * 1024
# trio-websocket's default 4 KiB socket reads cost a syscall per 4 KiB of output.
_RECEIVE_BUFFER_BYTES = 256 * 1024

_Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


class KubernetesBackend:
    """A :class:`~kuber_exec_trio.Backend` for a real API server.

    Use it as an async context manager (it owns a pooled HTTP client)::

        async with KubernetesBackend.from_kubeconfig() as backend:
            service = ExecService(backend)

    Args:
        config: where the API server is and how to authenticate.
        request_timeout: seconds for each REST read and for the WebSocket connect.
        ping_interval, pong_timeout: keepalive; ``ping_interval=None`` disables it.
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        request_timeout: float = 30.0,
        ping_interval: float | None = DEFAULT_PING_INTERVAL,
        pong_timeout: float = DEFAULT_PONG_TIMEOUT,
    ) -> None:
        self.config = config
        self._request_timeout = request_timeout
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._http: httpx.AsyncClient | None = None
        self._rest: RestClient | None = None

    def __repr__(self) -> str:
        return f"KubernetesBackend({self.config!r})"

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, **options: float | None
    ) -> KubernetesBackend:
        """A backend for a kubeconfig context (loaded now; exec plugins may run)."""
        return cls(ClusterConfig.from_kubeconfig(path, context), **options)  # type: ignore[arg-type]

    @classmethod
    def in_cluster(cls, **options: float | None) -> KubernetesBackend:
        """A backend for the pod's own service account."""
        return cls(ClusterConfig.in_cluster(), **options)  # type: ignore[arg-type]

    async def __aenter__(self) -> KubernetesBackend:
        self._http = RestClient.open_http_client(self.config, timeout=self._request_timeout)
        self._rest = RestClient(self.config, self._http)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        http, self._http, self._rest = self._http, None, None
        if http is not None:
            with trio.CancelScope(shield=True):
                await http.aclose()

    def _client(self) -> RestClient:
        if self._rest is None:
            raise ExecError(
                ExecErrorCode.FAILED, "KubernetesBackend must be used as an async context manager"
            )
        return self._rest

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        return await self._client().run(DeploymentLookup(namespace, name))

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        return await self._client().run(PodListing(namespace, selector))

    @asynccontextmanager
    async def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AsyncIterator[TrioWebSocketExecConnection]:
        offer = tuple(subprotocols)
        resource = exec_path(target, command, streams)
        headers = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in await self._client().auth_headers()
        ]
        # The TCP/TLS stream is ours, not trio-websocket's: after a server-initiated close
        # trio-websocket's client never closes its stream, and an unclosed socket leaks.
        stream = await self._connect(target)
        opened = False
        try:
            with single_exception():
                async with trio.open_nursery() as nursery:
                    websocket = await self._handshake(nursery, stream, resource, headers, offer)
                    opened = True
                    connection = TrioWebSocketExecConnection(
                        websocket, accept_subprotocol(offer, websocket.subprotocol)
                    )
                    logger.debug(
                        "exec connection to %s/%s uses %s",
                        target.namespace,
                        target.pod,
                        connection.subprotocol.value,
                    )
                    if self._ping_interval is not None:
                        nursery.start_soon(
                            connection.keepalive, self._ping_interval, self._pong_timeout
                        )
                    try:
                        yield connection
                    finally:
                        with trio.move_on_after(min(self._pong_timeout, 5.0)) as closing:
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
        except (trio_websocket.HandshakeError, OSError) as error:
            if opened:
                raise
            raise ExecError(
                ExecErrorCode.FAILED, f"The exec upgrade failed: {type(error).__name__}"
            ) from None
        finally:
            await trio.aclose_forcefully(stream)

    async def _connect(self, target: ResolvedTarget) -> _Stream:
        parts = urlsplit(self.config.server)
        host = parts.hostname or ""
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        try:
            with trio.fail_after(self._request_timeout):
                tcp = await trio.open_tcp_stream(host, port)
                if not secure:
                    return tcp
                context = self.config.ssl_context or ssl.create_default_context()
                tls = trio.SSLStream(tcp, context, server_hostname=host, https_compatible=True)
                try:
                    await tls.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(tls)
                    raise
                return tls
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as error:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"Could not open the exec connection to {target.pod}: {type(error).__name__}",
            ) from None

    async def _handshake(
        self,
        nursery: trio.Nursery,
        stream: _Stream,
        resource: str,
        headers: list[tuple[bytes, bytes]],
        offer: tuple[Subprotocol, ...],
    ) -> trio_websocket.WebSocketConnection:
        host = urlsplit(self.config.server).netloc
        try:
            with trio.fail_after(self._request_timeout):
                return await trio_websocket.wrap_client_stream(
                    nursery,
                    stream,
                    host,
                    resource,
                    subprotocols=[protocol.value for protocol in offer],
                    extra_headers=headers,
                    message_queue_size=1,
                    max_message_size=MAX_SERVER_MESSAGE_BYTES,
                    receive_buffer_size=_RECEIVE_BUFFER_BYTES,
                )
        except trio_websocket.ConnectionRejected as rejected:
            raise exec_upgrade_error(
                rejected.status_code, rejected.body or b"", tuple(p.value for p in offer)
            ) from None
        except (trio_websocket.HandshakeError, trio.TooSlowError, OSError) as error:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"The exec upgrade failed: {type(error).__name__}",
            ) from None
