"""``KubernetesBackend``: the backend for a real API server, written once for both runtimes.

REST reads go through the core's plans over a pooled HTTP/1.1 client (:mod:`._http`, on anyio:
trio and asyncio alike); the exec WebSocket goes through a :data:`TransportOpener`, the one
runtime-specific part, which each runtime binding (``kuber_exec_trio``, ``kuber_exec_asyncio``)
supplies.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

import anyio
import anyio.abc

from kuber_exec_core import (
    Deployment,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecRequest,
    ExecStreams,
    LabelSelector,
    Pod,
    ResolvedTarget,
    Subprotocol,
)
from kuber_exec_core.kube import ApiResponse, attach_path, exec_path

from .._backend import BackendHooks
from .._connection._connection import (
    DEFAULT_CLOSE_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    DEFAULT_PONG_TIMEOUT,
    WebSocketExecConnection,
    open_exec_connection,
)
from .._connection._delegating import DelegatingBlock
from .._connection._keepalive import SharedKeepalive
from .._connection._transport import TransportOpener, TransportOptions, WebSocketTransport
from .._drivers import resolve_target
from .._identity import current_impersonation, impersonation_headers
from ._cache import (
    DEFAULT_BACKOFF_CAP,
    DEFAULT_BACKOFF_INITIAL,
    DEFAULT_WATCH_TIMEOUT_SECONDS,
    TargetCache,
    is_gone_refusal,
    run_target_cache,
)
from ._config import ClusterConfig
from ._http import HttpClient
from ._orphans import OrphanCleanup
from ._preflight import ExecPreflight
from ._rest import MAX_CONCURRENT_REQUESTS, RestClient, Streamed, open_http_client

if TYPE_CHECKING:
    from ._lease_slots import ClusterSlots

__all__ = ["KubernetesBackend"]


class KubernetesBackend(BackendHooks):
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
        max_concurrent_requests: REST requests in flight at once (and HTTP connections kept);
            more callers wait in turn, with no deadline but each request's own timeout.
        transport: the WebSocket transport (the binding's own when ``None``).
        preflight: an :class:`ExecPreflight` to check, before each exec upgrade, that the
            requester may ``create pods/exec`` there (``None``, the default: no check).
        cluster_slots: hold ``SessionLimits.max_sessions_per_workspace`` as Leases shared by
            every replica (:class:`ClusterSlots`; ``None``, the default: counted in-process).

    While the block runs, the backend hosts work that outlives single calls
    (:meth:`background_tasks`: cleanups that continue after their caller's bound); leaving the
    block gives that work up to :attr:`background_exit_timeout` seconds, then cancels it.

    Every request of an exec acting for a user (``ExecRequest.on_behalf_of``) carries its
    impersonation headers (docs/platform.md). A ``401`` (to a REST read or to the exec upgrade,
    where the command never started) reloads the credentials once and tries once more.
    """

    #: The runtime's WebSocket transport; ``kuber_exec_trio`` and ``kuber_exec_asyncio`` bind it.
    default_transport: ClassVar[TransportOpener | None] = None
    #: Seconds leaving the ``async with`` block waits for background work (cleanups still
    #: running, docs/cleanup.md) before cancelling it; a cleanup's own run is a few seconds.
    background_exit_timeout: float = 10.0

    def __init__(
        self,
        config: ClusterConfig,
        *,
        request_timeout: float = 30.0,
        ping_interval: float | None = DEFAULT_PING_INTERVAL,
        pong_timeout: float = DEFAULT_PONG_TIMEOUT,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
        transport: TransportOpener | None = None,
        preflight: ExecPreflight | None = None,
        cluster_slots: ClusterSlots | None = None,
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
        if (
            isinstance(max_concurrent_requests, bool)
            or not isinstance(max_concurrent_requests, int)
            or max_concurrent_requests < 1
        ):
            raise ExecError(
                ExecErrorCode.INVALID, "max_concurrent_requests must be a positive integer"
            )
        self._max_concurrent_requests = max_concurrent_requests
        if preflight is not None and not isinstance(preflight, ExecPreflight):
            raise TypeError(f"preflight must be an ExecPreflight, not {type(preflight).__name__}")
        self.preflight = preflight
        if cluster_slots is not None:
            # The Lease machinery is loaded by a backend that uses it, not by every exec.
            from ._lease_slots import ClusterSlots

            if not isinstance(cluster_slots, ClusterSlots):
                raise TypeError(
                    f"cluster_slots must be a ClusterSlots, not {type(cluster_slots).__name__}"
                )
        self.cluster_slots = cluster_slots
        self._http: HttpClient | None = None
        self._rest: RestClient | None = None
        # The watch cache while ``watch()`` runs (see "Target cache" in docs/trio.md).
        self._cache: TargetCache | None = None
        # While open, with a ping interval: the one pinger of every exec connection.
        self._keepalive: SharedKeepalive | None = None
        self._keepalive_tasks: anyio.abc.TaskGroup | None = None
        # While open: the host of work that outlives its call (background_tasks()).
        self._background: anyio.abc.TaskGroup | None = None

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
        slots = self._max_concurrent_requests
        # A connection kept for every request RestClient lets in at once: a request never waits
        # for the pool (the limiter queues them instead).
        self._http = open_http_client(
            self.config, timeout=self._request_timeout, keepalive_connections=slots
        )
        self._rest = RestClient(self.config, self._http, max_concurrent_requests=slots)
        if self._ping_interval is not None:
            # One pinger for every exec connection of the backend (``SharedKeepalive``), in a
            # task group that lives as long as the ``async with`` block.
            keepalive = SharedKeepalive(self._ping_interval, self._pong_timeout)
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
            tasks.start_soon(keepalive.run)
            self._keepalive, self._keepalive_tasks = keepalive, tasks
        # Entered after the keepalive's (and left before it): background cleanups run execs,
        # which use the shared pinger and the HTTP client.
        background = anyio.create_task_group()
        await background.__aenter__()
        self._background = background
        if self.cluster_slots is not None:
            await self.cluster_slots.open(self.rest_client, OrphanCleanup(self))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # The replica's tasks (opened last) close first.
            if self.cluster_slots is not None:
                await self.cluster_slots.close()
        finally:
            await self._close_background()

    async def _close_background(self) -> None:
        background, self._background = self._background, None
        try:
            if background is not None:
                # What is still running (cleanups) gets a bounded time to finish, then is
                # cancelled (and counted as abandoned by its owner).
                background.cancel_scope.deadline = (
                    anyio.current_time() + self.background_exit_timeout
                )
                await background.__aexit__(None, None, None)
        finally:
            await self._close_keepalive_and_http()

    async def _close_keepalive_and_http(self) -> None:
        http, self._http, self._rest = self._http, None, None
        tasks, self._keepalive_tasks, self._keepalive = self._keepalive_tasks, None, None
        try:
            if tasks is not None:
                tasks.cancel_scope.cancel()
                await tasks.__aexit__(None, None, None)
        finally:
            if http is not None:
                with anyio.CancelScope(shield=True):
                    await http.aclose()

    def background_tasks(self) -> anyio.abc.TaskGroup | None:
        """The backend's task group for work that outlives its call, while the backend is open
        (``None`` before it is entered and once it is being left)."""
        return self._background

    def rest_client(self) -> RestClient:
        """The open backend's REST client (for the Lease slots).

        Raises:
            ExecError: ``EXEC_FAILED`` when the backend is not open.
        """
        return self._client()

    def _client(self) -> RestClient:
        if self._rest is None:
            raise ExecError(
                ExecErrorCode.FAILED, "KubernetesBackend must be used as an async context manager"
            )
        return self._rest

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        """GET the Deployment (``None`` on 404); from the watch cache when it has ``namespace``
        synced (:meth:`watch`)."""
        cache = self._cache
        if cache is not None and cache.store.synced(namespace):
            return cache.store.get_deployment(namespace, name)
        return await self._client().get_deployment(namespace, name)

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        """LIST pods by selector, owners resolved through their ReplicaSets; from the watch
        cache when it has ``namespace`` synced (:meth:`watch`)."""
        cache = self._cache
        if cache is not None and cache.store.synced(namespace):
            return cache.store.list_pods(namespace, selector)
        return await self._client().list_pods(namespace, selector)

    def resolve_cached(self, request: ExecRequest, limits: ExecLimits) -> ResolvedTarget | None:
        """The target from the watch cache in one step (remembered while the namespace's
        snapshots stay the same: ``WatchStore.resolve_target``), or ``None`` when the request's
        namespace is not synced (or nothing is watched): then resolve through the reads.

        Raises:
            ExecError: what resolving through :meth:`get_deployment` and :meth:`list_pods`
                raises for the same state.
        """
        cache = self._cache
        if cache is None:
            return None
        return cache.store.resolve_target(request, limits)

    @asynccontextmanager
    async def watch(
        self,
        namespaces: Iterable[str],
        *,
        backoff_initial: float = DEFAULT_BACKOFF_INITIAL,
        backoff_cap: float = DEFAULT_BACKOFF_CAP,
        watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
    ) -> AsyncIterator[TargetCache]:
        """Keep a target cache of ``namespaces`` while the block runs (opt-in; one at a time).

        Three tasks per namespace (Deployments, ReplicaSets, Pods) LIST then WATCH it; once all
        three are synced, :meth:`get_deployment` and :meth:`list_pods` answer from memory with
        exactly what REST would (no round trip before the exec WebSocket); until then, and for
        any namespace not watched, they read over REST. Watches reconnect by themselves, after
        ``backoff_initial`` seconds doubling to ``backoff_cap`` on failures in a row; failures
        are logged at WARNING on the ``kuber_exec`` logger, never raised. An exec whose upgrade
        is refused with 404 (the cached pod is gone, the command never started) is resolved
        again over REST and retried once (:meth:`retarget`). Leaving the block stops the tasks
        and closes their connections; the backend reads over REST again.

        Yields the ``TargetCache`` at once, unsynced: its ``wait_synced()`` (bound it with a
        timeout) starts warm, ``synced(namespace)`` and ``wait_until(predicate)`` watch it.

        Memory: about 1.1 KB per pod, Deployment or ReplicaSet (slim snapshots): 12.2 MiB for
        10,000 pods in 1,000 namespaces ("Target cache" in docs/trio.md).

        Raises (on entry):
            ExecError: ``EXEC_INVALID`` for a namespace that is not a DNS label or bad backoff
                values, ``EXEC_FAILED`` when the backend is not open or already watching.
        """
        self._client()
        if self._cache is not None:
            raise ExecError(ExecErrorCode.FAILED, "this KubernetesBackend is already watching")
        async with run_target_cache(
            self.config,
            namespaces,
            request_timeout=self._request_timeout,
            backoff_initial=backoff_initial,
            backoff_cap=backoff_cap,
            watch_timeout_seconds=watch_timeout_seconds,
        ) as cache:
            self._cache = cache
            try:
                yield cache
            finally:
                self._cache = None

    async def retarget(
        self, request: ExecRequest, limits: ExecLimits, target: ResolvedTarget, error: ExecError
    ) -> ResolvedTarget | None:
        """The target to retry on after the exec upgrade for ``target`` failed with ``error``.

        Only a ``404`` refusal of the upgrade (the pod is gone: the command never started) of a
        target in a namespace the watch cache has synced is retried: ``request`` is resolved
        again over REST (its errors propagate: a Deployment since relabelled is forbidden).
        ``None`` for anything else: raise ``error``. ``ExecService`` calls this at most once
        per exec, and only on entry to the exec connection, never after it opened.
        """
        cache = self._cache
        if cache is None or not cache.store.synced(target.namespace) or not is_gone_refusal(error):
            return None
        return await resolve_target(self._client(), request, limits)

    def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AbstractAsyncContextManager[WebSocketExecConnection]:
        """Open the exec WebSocket for ``command`` in ``target``, authenticated."""
        url = self.config.websocket_base + exec_path(target, command, streams)
        return DelegatingBlock(
            functools.partial(self._open_exec, target.namespace, url, subprotocols)
        )

    def attach(
        self, target: ResolvedTarget, streams: ExecStreams, subprotocols: Sequence[Subprotocol]
    ) -> AbstractAsyncContextManager[WebSocketExecConnection]:
        """Open the ``pods/attach`` WebSocket to ``target``'s container, authenticated (the
        pre-flight, when set, checks ``pods/attach``)."""
        url = self.config.websocket_base + attach_path(target, streams)
        return DelegatingBlock(
            functools.partial(self._open_exec, target.namespace, url, subprotocols, "attach")
        )

    async def api_request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> ApiResponse:
        """One request (the exec's user's), the answer whatever its status."""
        shown = path.split("?", 1)[0]
        return await self._client().send(
            method,
            path,
            content=body,
            content_type=content_type or "application/json",
            shown=shown,
        )

    def api_stream(self, path: str) -> AbstractAsyncContextManager[Streamed]:
        """A streamed GET of ``path`` (a log, a watch)."""
        return self._client().stream(path, shown=path.split("?", 1)[0])

    async def _open_exec(
        self,
        namespace: str,
        url: str,
        subprotocols: Sequence[Subprotocol],
        subresource: str = "exec",
    ) -> tuple[AbstractAsyncContextManager[Any], WebSocketExecConnection]:
        # exec()'s entry: the access preflight, the credentials (fresh ones once after a 401
        # refusal of the upgrade), then the exec connection's block, entered, and its connection.
        rest = self._client()
        if self.preflight is not None:
            await self.preflight.check(rest, namespace, current_impersonation(), subresource)
        generation = self.config.credentials_generation
        block = self._connection_block(url, subprotocols, await rest.auth_headers())
        try:
            return block, await block.__aenter__()
        except ExecError as error:
            # A 401 refused the upgrade: the command never started, so fresh credentials may
            # try once more.
            if error.http_status != 401 or not await rest.refresh_after_unauthorized(generation):
                raise
        block = self._connection_block(url, subprotocols, await rest.auth_headers())
        return block, await block.__aenter__()

    @asynccontextmanager
    async def open_upgrade(
        self,
        path: str,
        subprotocols: Sequence[str],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> AsyncIterator[WebSocketTransport]:
        """A WebSocket upgrade of ``path`` (with its query) on the API server, authenticated
        and with the running exec's impersonation headers, offering ``subprotocols``: the seam
        of port-forward (``PortForward``). With a :attr:`preflight`, ``namespace`` and
        ``subresource`` (``portforward``), the access review runs first, as for an exec.
        Leaving the block drops the connection.

        Raises (on entry):
            ExecError: as an exec's upgrade (a refused upgrade carries ``http_status``), or the
                pre-flight's ``EXEC_TARGET_FORBIDDEN``.
        """
        rest = self._client()
        if self.preflight is not None and namespace is not None and subresource is not None:
            await self.preflight.check(
                rest, namespace, current_impersonation(), subresource=subresource
            )
        options = TransportOptions(
            url=self.config.websocket_base + path,
            subprotocols=tuple(subprotocols),
            ssl_context=self.config.ssl_context,
            headers=(*await rest.auth_headers(), *impersonation_headers()),
            connect_timeout=self._request_timeout,
        )
        async with self._open_transport(options) as transport:
            yield transport

    def _connection_block(
        self, url: str, subprotocols: Sequence[Subprotocol], auth: list[tuple[str, str]]
    ) -> AbstractAsyncContextManager[WebSocketExecConnection]:
        return open_exec_connection(
            self._open_transport,
            url,
            subprotocols,
            ssl_context=self.config.ssl_context,
            headers=auth + impersonation_headers(),
            connect_timeout=self._request_timeout,
            ping_interval=self._ping_interval,
            pong_timeout=self._pong_timeout,
            close_timeout=self._close_timeout,
            shared_keepalive=self._keepalive,
        )
