"""``KubernetesBackend``: the backend for a real API server, written once for both runtimes.

REST reads go through the core's plans over a pooled httpx client (httpx runs on trio and asyncio
alike); the exec WebSocket goes through a :data:`TransportOpener`, the one runtime-specific part,
which each runtime binding (``kuber_exec_trio``, ``kuber_exec_asyncio``) supplies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, ClassVar, Self

import anyio
import httpx

from kuber_exec_core import (
    Deployment,
    ExecError,
    ExecErrorCode,
    ExecStreams,
    LabelSelector,
    Pod,
    ResolvedTarget,
    Subprotocol,
)
from kuber_exec_core.kube import DeploymentLookup, PodListing, exec_path

from ._config import ClusterConfig
from ._connection import (
    DEFAULT_CLOSE_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    DEFAULT_PONG_TIMEOUT,
    WebSocketExecConnection,
    open_exec_connection,
)
from ._rest import RestClient
from ._transport import TransportOpener

__all__ = ["KubernetesBackend"]


class KubernetesBackend:
    """A :class:`~kuber_exec_anyio.Backend` for a real API server.

    Use it as an async context manager (it owns a pooled HTTP client)::

        async with KubernetesBackend.from_kubeconfig() as backend:
            service = ExecService(backend)

    Args:
        config: where the API server is and how to authenticate.
        request_timeout: seconds for each REST read and for the WebSocket connect.
        ping_interval: seconds between keepalive pings; ``None`` disables the keepalive.
        pong_timeout: seconds to wait for each ping's pong before the peer counts as dead.
        close_timeout: seconds leaving a session waits for the server's Close reply (one round
            trip) before dropping the TCP connection; skipped when a send is blocked or was
            interrupted, or the caller was cancelled (then the connection is dropped at once).
        transport: the WebSocket transport (the binding's own when ``None``).
    """

    #: The runtime's WebSocket transport; ``kuber_exec_trio`` and ``kuber_exec_asyncio`` bind it.
    default_transport: ClassVar[TransportOpener | None] = None

    def __init__(
        self,
        config: ClusterConfig,
        *,
        request_timeout: float = 30.0,
        ping_interval: float | None = DEFAULT_PING_INTERVAL,
        pong_timeout: float = DEFAULT_PONG_TIMEOUT,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        transport: TransportOpener | None = None,
    ) -> None:
        opener = transport if transport is not None else type(self).default_transport
        if opener is None:
            raise TypeError(
                "KubernetesBackend needs a transport: use kuber_exec_trio.KubernetesBackend or "
                "kuber_exec_asyncio.KubernetesBackend, or pass transport="
            )
        self._open_transport: TransportOpener = opener
        self.config = config
        self._request_timeout = request_timeout
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._close_timeout = close_timeout
        self._http: httpx.AsyncClient | None = None
        self._rest: RestClient | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, **options: Any
    ) -> Self:
        """A backend for a kubeconfig context (loaded now: it reads files and may run an exec
        credential plugin, so call it before the event loop's hot path or in a thread)."""
        return cls(ClusterConfig.from_kubeconfig(path, context), **options)

    @classmethod
    def in_cluster(cls, **options: Any) -> Self:
        """A backend for the pod's own service account."""
        return cls(ClusterConfig.in_cluster(), **options)

    async def __aenter__(self) -> Self:
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
            with anyio.CancelScope(shield=True):
                await http.aclose()

    def _client(self) -> RestClient:
        if self._rest is None:
            raise ExecError(
                ExecErrorCode.FAILED, "KubernetesBackend must be used as an async context manager"
            )
        return self._rest

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        """GET the Deployment (``None`` on 404)."""
        return await self._client().run(DeploymentLookup(namespace, name))

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        """LIST pods by selector, owners resolved through their ReplicaSets."""
        return await self._client().run(PodListing(namespace, selector))

    def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AbstractAsyncContextManager[WebSocketExecConnection]:
        """Open the exec WebSocket for ``command`` in ``target``, authenticated."""
        url = self.config.websocket_base + exec_path(target, command, streams)
        return self._exec(url, subprotocols)

    @asynccontextmanager
    async def _exec(
        self, url: str, subprotocols: Sequence[Subprotocol]
    ) -> AsyncIterator[WebSocketExecConnection]:
        headers = await self._client().auth_headers()
        async with open_exec_connection(
            self._open_transport,
            url,
            subprotocols,
            ssl_context=self.config.ssl_context,
            headers=headers,
            connect_timeout=self._request_timeout,
            ping_interval=self._ping_interval,
            pong_timeout=self._pong_timeout,
            close_timeout=self._close_timeout,
        ) as connection:
            yield connection
