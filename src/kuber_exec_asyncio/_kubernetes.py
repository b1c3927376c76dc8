"""``KubernetesBackend``: the backend that talks to a real API server, on asyncio.

REST reads go through the core's plans over a pooled httpx client (``kuber_exec_kube``); the exec
goes over the ``websockets`` library's asyncio client, offering ``v5.channel.k8s.io,
v4.channel.k8s.io`` by default, one unfragmented message per client frame, no compression, TLS
verified by default, with keepalive pings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import TracebackType

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

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

from ._connection import AsyncioWebSocketExecConnection

__all__ = ["KubernetesBackend"]

logger = logging.getLogger("kuber_exec.asyncio.kubernetes")

#: client-go pings every 5 s; a pong deadline well under its ~61 s give-up keeps hangs short.
DEFAULT_PING_INTERVAL = 5.0
DEFAULT_PONG_TIMEOUT = 30.0
#: Real servers send ≤ 32 KiB per message and kill sessions over 32 MiB; accept up to that.
MAX_SERVER_MESSAGE_BYTES = 32 * 1024 * 1024
# Frames websockets buffers before it pauses reading the socket (backpressure).
_MAX_QUEUED_FRAMES = 4


class KubernetesBackend:
    """A :class:`~kuber_exec_asyncio.Backend` for a real API server.

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
            await asyncio.shield(http.aclose())

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
    ) -> AsyncIterator[AsyncioWebSocketExecConnection]:
        offer = tuple(subprotocols)
        url = self.config.websocket_base + exec_path(target, command, streams)
        headers = await self._client().auth_headers()
        context = connect(
            url,
            ssl=self.config.ssl_context,
            subprotocols=[protocol.value for protocol in offer],  # type: ignore[misc]
            additional_headers=headers,
            compression=None,
            proxy=None,
            open_timeout=self._request_timeout,
            ping_interval=None,  # our own keepalive tells a dead peer from backpressure
            close_timeout=min(self._pong_timeout, 5.0),
            max_size=MAX_SERVER_MESSAGE_BYTES,
            max_queue=_MAX_QUEUED_FRAMES,
        )
        opened = False
        try:
            async with context as websocket:
                opened = True
                connection = AsyncioWebSocketExecConnection(
                    websocket, accept_subprotocol(offer, websocket.subprotocol)
                )
                logger.debug(
                    "exec connection to %s/%s uses %s",
                    target.namespace,
                    target.pod,
                    connection.subprotocol.value,
                )
                with single_exception():
                    async with asyncio.TaskGroup() as tasks:
                        keepalive = None
                        if self._ping_interval is not None:
                            keepalive = tasks.create_task(
                                connection.keepalive(self._ping_interval, self._pong_timeout)
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
                ExecErrorCode.FAILED,
                f"Could not open the exec connection to {target.pod}: {type(error).__name__}",
            ) from None
