"""The target cache of ``KubernetesBackend.watch()``: the core's reflectors driven over HTTP.

One task per watched namespace and kind (Deployments, ReplicaSets, Pods) runs the driver loop of
:mod:`kuber_exec_core.watch`: LIST pages through the REST client, then a streaming GET of the
watch whose body is fed to the reflector as it arrives. The reflector decides what comes next
(resume after a dropped or timed-out watch, relist after ``410 Gone``); this module adds what the
core leaves to the driver: the HTTP, the clock and the failures.

Failures (an unreachable server, a refused LIST or WATCH, a malformed event, a dropped stream that
had sent nothing) are logged at WARNING on the ``kuber_exec`` logger and retried after an
exponential backoff: ``backoff_initial`` seconds, doubling up to ``backoff_cap`` (no jitter), back
to the start after a LIST completes or a watch delivers data. They never reach an exec call: while
a namespace is not synced, ``get_deployment`` and ``list_pods`` answer over REST, as without the
cache, and REST reports its own errors.

Watches hold one HTTP connection each (three per namespace), on an HTTP client of their own with no
connection limit, so they never take the pooled REST client's connections from exec calls.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
)
from kuber_exec_core.kube import ApiGet, ApiResponse
from kuber_exec_core.transport import describe_error
from kuber_exec_core.watch import Reflector, WatchRequest, WatchStore

from .._groups import single_exception
from ._config import ClusterConfig
from ._http import HttpClient, HttpError
from ._rest import RestClient, open_http_client

__all__ = [
    "DEFAULT_BACKOFF_CAP",
    "DEFAULT_BACKOFF_INITIAL",
    "DEFAULT_WATCH_TIMEOUT_SECONDS",
    "TargetCache",
    "is_gone_refusal",
    "run_target_cache",
]

logger = logging.getLogger("kuber_exec")

#: Seconds before the first retry of a failed LIST or WATCH; doubles per failure in a row.
DEFAULT_BACKOFF_INITIAL = 0.2
#: The longest wait between retries.
DEFAULT_BACKOFF_CAP = 30.0
#: ``timeoutSeconds`` of each watch: the server ends it then and the reflector resumes (client-go
#: picks 5 to 10 minutes); the client's read timeout is this plus the request timeout.
DEFAULT_WATCH_TIMEOUT_SECONDS = 300
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")


def is_gone_refusal(error: ExecError) -> bool:
    """Whether ``error``, raised on entry to the exec connection, is the upgrade refused with HTTP
    ``404`` (the pod is gone; the command never started).

    Decided on ``code`` and ``http_status`` only: the message's wording cannot change it.
    """
    return error.code is ExecErrorCode.FAILED and error.http_status == 404


class TargetCache:
    """The watch cache ``KubernetesBackend.watch()`` yields: its store and whether it is synced.

    Nothing here needs calling for the cache to work (the backend consults it by itself); the
    waits are for callers that want a warm cache before they start (and for tests).
    """

    def __init__(self, namespaces: Sequence[str]) -> None:
        #: The watched namespaces, in the order given (duplicates dropped).
        self.namespaces: tuple[str, ...] = tuple(dict.fromkeys(namespaces))
        #: The reflectors and snapshots (owned by the watch tasks' event loop).
        self.store = WatchStore()
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        synced = sum(1 for namespace in self.namespaces if self.store.synced(namespace))
        return f"<TargetCache {synced}/{len(self.namespaces)} namespaces synced>"

    def synced(self, namespace: str | None = None) -> bool:
        """Whether ``namespace`` (default: every watched one) answers from the cache."""
        names = self.namespaces if namespace is None else (namespace,)
        return all(self.store.synced(name) for name in names)

    async def wait_synced(self) -> None:
        """Return once every watched namespace is synced (bound it with a timeout: a server
        that refuses the LISTs keeps it waiting)."""
        await self.wait_until(lambda store: self.synced())

    async def wait_until(self, predicate: Callable[[WatchStore], bool]) -> None:
        """Return once ``predicate(store)`` holds, checked now and after every LIST page or
        watch read the cache applies."""
        while not predicate(self.store):
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


def _check_namespaces(namespaces: Iterable[str]) -> list[str]:
    if isinstance(namespaces, str):
        raise ExecError(ExecErrorCode.INVALID, "namespaces must be a list of names, not a str")
    names = list(namespaces)
    for name in names:
        if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            raise ExecError(ExecErrorCode.INVALID, f"{name!r} is not a valid namespace name")
    return names


@asynccontextmanager
async def run_target_cache(
    config: ClusterConfig,
    namespaces: Iterable[str],
    *,
    request_timeout: float,
    backoff_initial: float = DEFAULT_BACKOFF_INITIAL,
    backoff_cap: float = DEFAULT_BACKOFF_CAP,
    watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
) -> AsyncIterator[TargetCache]:
    """Watch ``namespaces`` until the block ends; yields the :class:`TargetCache` at once
    (unsynced: the LISTs run in the background).

    Raises (on entry):
        ExecError: ``EXEC_INVALID`` for a namespace that is not a DNS label, or a non-positive
            backoff or watch timeout.
    """
    names = _check_namespaces(namespaces)
    if not backoff_initial > 0 or not backoff_cap >= backoff_initial:
        raise ExecError(ExecErrorCode.INVALID, "backoff_initial must be > 0 and <= backoff_cap")
    cache = TargetCache(names)
    # A watch reads for up to timeoutSeconds; each keeps its connection (no keep-alive cap).
    http = open_http_client(
        config,
        timeout=request_timeout,
        read_timeout=watch_timeout_seconds + request_timeout,
        keepalive_connections=None,
    )
    rest = RestClient(config, http)
    try:
        # The driver tasks never raise: anything from the group is the caller's own exception.
        with single_exception():
            async with anyio.create_task_group() as tasks:
                for namespace in cache.namespaces:
                    watch = cache.store.watch(
                        namespace, watch_timeout_seconds=watch_timeout_seconds
                    )
                    for reflector in watch.reflectors:
                        driver = _Driver(reflector, rest, http, cache, backoff_initial, backoff_cap)
                        tasks.start_soon(driver.run)
                try:
                    yield cache
                finally:
                    tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await http.aclose()


class _Driver:
    """Runs one reflector: the loop of :mod:`kuber_exec_core.watch`'s module docstring."""

    def __init__(
        self,
        reflector: Reflector[Any],
        rest: RestClient,
        http: HttpClient,
        cache: TargetCache,
        backoff_initial: float,
        backoff_cap: float,
    ) -> None:
        self._reflector = reflector
        self._rest = rest
        self._http = http
        self._cache = cache
        self._initial = backoff_initial
        self._cap = backoff_cap
        self._delay = backoff_initial

    def __repr__(self) -> str:
        return f"<watch driver {self._reflector.kind.kind} in {self._reflector.namespace}>"

    async def run(self) -> None:
        """Until cancelled; never raises anything else."""
        while True:
            try:
                progressed = await self._step()
            except ExecError as error:
                progressed = False
                logger.warning(
                    "the watch cache of %ss in %s failed (retrying in %g s): %s",
                    self._reflector.kind.kind,
                    self._reflector.namespace,
                    self._delay,
                    error.message,
                )
            except Exception as error:  # A bug must not end the cache silently nor reach execs.
                progressed = False
                logger.warning(
                    "the watch cache of %ss in %s failed unexpectedly (retrying in %g s): %s",
                    self._reflector.kind.kind,
                    self._reflector.namespace,
                    self._delay,
                    describe_error(error),
                    exc_info=True,
                )
            self._cache._notify()
            if progressed:
                self._delay = self._initial
            else:
                await anyio.sleep(self._delay)
                self._delay = min(self._delay * 2, self._cap)

    async def _step(self) -> bool:
        # True when the server answered usefully (no backoff before the next request).
        request = self._reflector.next_event()
        if isinstance(request, ApiGet):
            self._reflector.list_received(await self._rest.get(request))
            return True
        return await self._follow(request)

    async def _follow(self, request: WatchRequest) -> bool:
        headers = await self._rest.auth_headers()
        received = False
        try:
            async with self._http.stream("GET", request.target, headers=headers) as response:
                if response.status != 200:
                    body = await response.aread()
                    # 410 relists and returns; any other status raises (then a backoff). A
                    # relist goes after a backoff too: a server answering 410 to every watch of a
                    # fresh LIST must not be hammered.
                    self._reflector.watch_failed(ApiResponse(status=response.status, body=body))
                    return False
                # Leaving the body early (the reflector wants a relist, or an event was bad) goes
                # by cancellation, which ends a read already waiting on the socket; the
                # connection, its answer unfinished, is then closed rather than pooled.
                failure: ExecError | None = None
                stopped = False
                with anyio.CancelScope() as reading:
                    async for chunk in response.chunks():
                        if stopped:
                            continue  # Already buffered: dropped until the cancellation lands.
                        received = True
                        try:
                            stopped = not self._reflector.watch_data(chunk)
                        except ExecError as error:
                            failure, stopped = error, True
                        self._cache._notify()
                        if stopped:
                            reading.cancel()
                if failure is not None:
                    raise failure  # The reflector has moved on (a relist or the same watch).
                if stopped:
                    return True  # An ERROR 410: the reflector relists.
        except HttpError as error:
            if self._reflector.next_event() is request:
                self._reflector.watch_ended()
            if received:
                return True  # It was working: resume at once from the last resourceVersion.
            raise ExecError(
                ExecErrorCode.FAILED,
                f"Kubernetes API WATCH {request.path} failed: {describe_error(error)}",
            ) from None
        self._reflector.watch_ended()
        if not received:
            # Ended before sending anything (not even a bookmark): do not hammer the server.
            raise ExecError(
                ExecErrorCode.FAILED, f"Kubernetes API WATCH {request.path} ended without events"
            )
        return True
