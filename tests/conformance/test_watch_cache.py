"""The target cache (``KubernetesBackend.watch``) against the sandbox's watches, both adapters.

Every answer from the cache is compared with a REST resolution of the same state by a second
backend without a cache. Waits are on conditions (``TargetCache.wait_until`` is woken by every
event the cache applies), each bounded by ``anyio.fail_after``; no sleep synchronises anything.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from types import ModuleType
from typing import Any

import anyio
import pytest

from kuber_exec_anyio._kubernetes import _rest
from kuber_exec_anyio.transport import TransportOptions, WebSocketTransport
from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecRequest,
    ResolvedTarget,
    Workspace,
)
from kuber_exec_core.kube import exec_upgrade_error
from kuber_exec_core.watch import WatchStore
from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread

from .cluster import WORKSPACE_UID, conformance_cluster

pytestmark = pytest.mark.anyio

UID = "cache-uid"
WAIT = 10.0  # seconds any condition may take before the test fails
Outcome = ResolvedTarget | tuple[ExecErrorCode, str]


def cache_cluster() -> Cluster:
    cluster = Cluster()
    cluster.add_deployment(
        "cache", "web", workspace_uid=UID, pods=[PodSpec(name="web-a"), PodSpec(name="web-b")]
    )
    cluster.add_deployment("cache", "other", workspace_uid="someone-else")
    return cluster


def run(
    deployment: str = "web", *command: str, project: str = "cache", uid: str = UID
) -> ExecRequest:
    return ExecRequest(
        workspace=Workspace(project=project, uid=uid),
        deployment=deployment,
        command=list(command or ("true",)),
    )


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    # Fresh per test: the tests change the cluster. Bookmarks often, so resumes are quick.
    with run_sandbox_in_thread(cache_cluster(), bookmark_interval=0.05) as running:
        yield running


def backend(adapter: ModuleType, sandbox: Sandbox, transport: Any = None) -> Any:
    return adapter.KubernetesBackend(
        adapter.ClusterConfig(sandbox.url), request_timeout=10.0, transport=transport
    )


async def outcome_of(resolve: Any) -> Outcome:
    try:
        target: ResolvedTarget = await resolve
    except ExecError as error:
        return (error.code, error.message)
    return target


def cached_outcome(store: WatchStore, request: ExecRequest) -> Outcome | None:
    try:
        return store.resolve_target(request, ExecLimits())
    except ExecError as error:
        return (error.code, error.message)


async def converge(cache: Any, request: ExecRequest, rest: Any) -> Outcome:
    """Wait until the cache answers ``request`` as REST does now; return that answer."""
    expected = await outcome_of(rest.resolve_target(request))
    with anyio.fail_after(WAIT):
        await cache.wait_until(lambda store: cached_outcome(store, request) == expected)
    return expected


class CountingGets:
    """Counts the REST GETs every backend sends (the cache's own LISTs included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = _rest.RestClient.get

        async def get(client: Any, request: Any) -> Any:
            self.count += 1
            return await original(client, request)

        monkeypatch.setattr(_rest.RestClient, "get", get)


class Transports:
    """Wraps the adapter's WebSocket transport: counts opens, and can refuse or drop them.

    ``refusal`` (with ``refusals`` left, ``None`` for every open) is raised instead of opening.
    """

    def __init__(self, adapter: ModuleType) -> None:
        self._inner = adapter.KubernetesBackend.default_transport
        self.opens = 0
        self.urls: list[str] = []
        self.refuse_with_404 = False
        self.refusal: ExecError | None = None
        self.refusals: int | None = None
        self.drop_after_open = False

    def __call__(
        self, options: TransportOptions
    ) -> AbstractAsyncContextManager[WebSocketTransport]:
        return self._open(options)

    @asynccontextmanager
    async def _open(self, options: TransportOptions) -> AsyncIterator[WebSocketTransport]:
        self.opens += 1
        self.urls.append(options.url)
        if self.refusal is not None and self.refusals != 0:
            if self.refusals is not None:
                self.refusals -= 1
            raise self.refusal
        if self.refuse_with_404:
            body = b'{"kind":"Status","code":404,"message":"pods \\"x\\" not found"}'
            raise exec_upgrade_error(404, body, options.subprotocols)
        async with self._inner(options) as transport:
            if self.drop_after_open:
                self.drop_after_open = False  # once: the cleanup's exec gets through
                transport.abort()  # The upgrade succeeded: the command may have started.
            yield transport


@asynccontextmanager
async def cached_service(
    adapter: ModuleType, sandbox: Sandbox, namespaces: list[str], transport: Any = None
) -> AsyncIterator[tuple[Any, Any, Any]]:
    """(service with a warm cache, the cache, a REST-only service)."""
    async with (
        backend(adapter, sandbox, transport) as cached,
        backend(adapter, sandbox) as plain,
        cached.watch(namespaces) as cache,
    ):
        with anyio.fail_after(WAIT):
            await cache.wait_synced()
        yield adapter.ExecService(cached), cache, adapter.ExecService(plain)


# -- the same answers as REST ---------------------------------------------------------------------

SCENARIOS = [
    run("web", project="demo", uid=WORKSPACE_UID),
    run("other", project="demo", uid=WORKSPACE_UID),
    run("web", project="demo", uid="someone-else"),
    run("nope", project="demo", uid=WORKSPACE_UID),
    run("ranked", project="rank", uid=WORKSPACE_UID),
    *(
        run(name, project="targets", uid=WORKSPACE_UID)
        for name in (
            "pending",
            "empty",
            "noselector",
            "nocontainer",
            "unmanaged",
            "multi",
            "stopped",
            "expressions",
        )
    ),
    run("Web", project="demo", uid=WORKSPACE_UID),
]


@pytest.fixture
def scenarios() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(conformance_cluster()) as running:
        yield running


async def test_a_warm_cache_answers_every_scenario_as_rest_without_a_request(
    adapter: ModuleType, scenarios: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = scenarios
    async with cached_service(adapter, sandbox, ["demo", "rank", "targets"]) as (
        service,
        cache,
        rest,
    ):
        gets = CountingGets(monkeypatch)
        answers = [await outcome_of(service.resolve_target(r)) for r in SCENARIOS]
        assert gets.count == 0  # every answer came from memory
        assert answers == [await outcome_of(rest.resolve_target(r)) for r in SCENARIOS]
        assert repr(cache) == "<TargetCache 3/3 namespaces synced>"


async def test_an_unwatched_or_unsynced_namespace_reads_over_rest(
    adapter: ModuleType, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    with sandbox.cluster.changing():
        sandbox.cluster.add_deployment("elsewhere", "web", workspace_uid=UID)
    async with backend(adapter, sandbox) as cached, cached.watch(["cache"]) as cache:
        gets = CountingGets(monkeypatch)
        assert not cache.synced("cache")  # nothing has run yet
        target = await adapter.ExecService(cached).resolve_target(run())
        assert target.pod == "web-a"
        with anyio.fail_after(WAIT):
            await cache.wait_synced()
        before = gets.count
        target = await adapter.ExecService(cached).resolve_target(run(project="elsewhere"))
        assert target.namespace == "elsewhere"
        assert gets.count > before  # not watched: REST


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_the_cache_and_rest_ignore_proxy_variables(
    adapter: ModuleType, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kubeconfig alone says how to reach the server: a proxy from the environment (here one
    # that refuses every connection) is used neither by REST nor by the watches.
    proxy = f"http://127.0.0.1:{closed_port()}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with backend(adapter, sandbox) as cached, cached.watch(["cache"]) as cache:
        target = await adapter.ExecService(cached).resolve_target(run())  # REST
        with anyio.fail_after(WAIT):
            await cache.wait_synced()
        assert cached_outcome(cache.store, run()) == target


async def test_the_cache_follows_changes_as_rest_sees_them(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    cluster = sandbox.cluster
    async with cached_service(adapter, sandbox, ["cache"]) as (service, cache, rest):
        assert isinstance(await converge(cache, run(), rest), ResolvedTarget)
        # The chosen pod is deleted: the other one.
        cluster.delete_pod("cache", "web-a")
        answer = await converge(cache, run(), rest)
        assert isinstance(answer, ResolvedTarget)
        assert answer.pod == "web-b"
        # web-b stops being ready and a new ready pod comes: the new one.
        with cluster.changing():
            pod = cluster.pod("cache", "web-b")
            assert pod is not None
            pod.containers[0].ready = False
        new = {p.name for p in cluster.scale_deployment("cache", "web", 2)} - {"web-b"}
        answer = await converge(cache, run(), rest)
        assert isinstance(answer, ResolvedTarget)
        assert {answer.pod} == new
        assert await service.resolve_target(run()) == answer
        # Relabelled to another workspace: forbidden.
        with cluster.changing():
            deployment = cluster.deployment("cache", "web")
            assert deployment is not None
            deployment.labels["kuber.dev/workspace-uid"] = "someone-else"
        forbidden = await converge(cache, run(), rest)
        assert forbidden == (
            ExecErrorCode.TARGET_FORBIDDEN,
            "Deployment web is not owned by this workspace",
        )
        assert await outcome_of(service.resolve_target(run())) == forbidden
        # Back to this workspace, then scaled to zero: not ready.
        with cluster.changing():
            deployment.labels["kuber.dev/workspace-uid"] = UID
        cluster.scale_deployment("cache", "web", 0)
        empty = await converge(cache, run(), rest)
        assert empty == (
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment web has no running owned pod/container",
        )
        assert await outcome_of(service.resolve_target(run())) == empty


# -- watches that break --------------------------------------------------------------------------


def lists(cache: Any) -> int:
    watch = cache.store.namespace("cache")
    return sum(reflector.lists_completed for reflector in watch.reflectors)


async def watches_open(sandbox: Sandbox, cache: Any) -> None:
    """Return once the pods watch is streaming (synced only says its LIST is done)."""
    with sandbox.cluster.changing():
        pod = sandbox.cluster.pod("cache", "web-b")
        assert pod is not None
        pod.labels["seen"] = "yes"

    def seen(store: WatchStore) -> bool:
        watch = store.namespace("cache")
        return watch is not None and watch.pods.items["web-b"].labels.get("seen") == "yes"

    with anyio.fail_after(WAIT):
        await cache.wait_until(seen)


async def test_a_forced_410_relists(adapter: ModuleType, sandbox: Sandbox) -> None:
    async with cached_service(adapter, sandbox, ["cache"]) as (_service, cache, rest):
        await watches_open(sandbox, cache)
        listed = lists(cache)
        sandbox.cluster.compact()
        with anyio.fail_after(WAIT):
            # Each kind's open watch gets an ERROR 410 and lists again.
            await cache.wait_until(lambda store: lists(cache) >= listed + 3 and cache.synced())
        sandbox.cluster.delete_pod("cache", "web-a")
        answer = await converge(cache, run(), rest)
        assert isinstance(answer, ResolvedTarget)
        assert answer.pod == "web-b"


async def test_a_watch_answered_410_gone_relists(adapter: ModuleType, sandbox: Sandbox) -> None:
    async with cached_service(adapter, sandbox, ["cache"]) as (_service, cache, rest):
        await watches_open(sandbox, cache)
        listed = lists(cache)
        # Under the model's lock, so the server sees both at once: the watches drop (no ERROR
        # event), and resuming from their resourceVersion is answered HTTP 410.
        with sandbox.cluster.lock:
            sandbox.cluster.drop_watches()
            sandbox.cluster.compact()
        with anyio.fail_after(WAIT):
            await cache.wait_until(lambda store: lists(cache) >= listed + 3 and cache.synced())
        sandbox.cluster.delete_pod("cache", "web-a")
        answer = await converge(cache, run(), rest)
        assert isinstance(answer, ResolvedTarget)
        assert answer.pod == "web-b"


async def test_a_dropped_watch_resumes_without_a_relist(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    async with cached_service(adapter, sandbox, ["cache"]) as (_service, cache, rest):
        await watches_open(sandbox, cache)
        listed = lists(cache)
        sandbox.cluster.drop_watches()
        sandbox.cluster.delete_pod("cache", "web-a")
        answer = await converge(cache, run(), rest)
        assert isinstance(answer, ResolvedTarget)
        assert answer.pod == "web-b"
        assert lists(cache) == listed  # resumed from its resourceVersion: no LIST


async def test_watch_failures_are_logged_and_never_raised(
    adapter: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kuber_exec")
    stack = ExitStack()
    # Started and stopped from a worker thread: stopping waits for the server's thread.
    sandbox = await anyio.to_thread.run_sync(
        stack.enter_context, run_sandbox_in_thread(cache_cluster())
    )
    try:
        async with (
            backend(adapter, sandbox) as cached,
            cached.watch(["cache"], backoff_initial=0.01, backoff_cap=0.02) as cache,
        ):
            with anyio.fail_after(WAIT):
                await cache.wait_synced()
            await anyio.to_thread.run_sync(stack.close)  # the API server goes away
            with anyio.fail_after(WAIT):
                while len(delays(caplog)) < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # the log is the condition: nothing to wait on
            # The last state answers on: nothing of the watch's failure reaches the caller.
            target = await adapter.ExecService(cached).resolve_target(run())
            assert target.pod == "web-a"
    finally:
        await anyio.to_thread.run_sync(stack.close)
    warnings = [r for r in caplog.records if "watch cache" in r.getMessage()]
    assert warnings
    assert all(r.levelno == logging.WARNING for r in warnings)
    # Exponential, capped, no jitter (the dropped stream itself resumed at once, unlogged).
    assert delays(caplog)[:4] == [0.01, 0.02, 0.02, 0.02]


def delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The pods watch's logged retry delays, in order."""
    found = (
        re.search(r"of Pods in cache failed \(retrying in ([0-9.]+) s\)", r.getMessage())
        for r in caplog.records
    )
    return [float(match.group(1)) for match in found if match]


async def test_watch_refuses_bad_namespaces_and_a_second_watch(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    async with backend(adapter, sandbox) as cached:
        for bad in (["Bad"], "cache", [""]):
            with pytest.raises(ExecError) as caught:
                async with cached.watch(bad):
                    pass
            assert caught.value.code is ExecErrorCode.INVALID
        async with cached.watch(["cache"]):
            with pytest.raises(ExecError) as caught:
                async with cached.watch(["cache"]):
                    pass
            assert caught.value.code is ExecErrorCode.FAILED
        async with cached.watch(["cache"]):  # usable again after the first ended
            pass


# -- the one retry of a stale cached pod -----------------------------------------------------------


def delete_quietly(sandbox: Sandbox, pod: str) -> None:
    # Gone from the server without the watches hearing of it: the cache is stale.
    with sandbox.cluster.changing(quiet=True):
        del sandbox.cluster.namespaces["cache"].pods[pod]


async def test_a_pod_gone_at_the_upgrade_is_resolved_again_and_retried_once(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    transports = Transports(adapter)
    events: list[Any] = []
    async with cached_service(adapter, sandbox, ["cache"], transports) as (service, cache, _):
        service = adapter.ExecService(service.backend, audit=events.append)
        assert cached_outcome(cache.store, run()).pod == "web-a"  # type: ignore[union-attr]
        delete_quietly(sandbox, "web-a")
        # The sandbox refuses the upgrade as an API server does (a NotFound Status, HTTP 404),
        # through the adapter's own WebSocket library.
        result = await service.execute(run("web", "printenv", "HOSTNAME"))
        assert (result.exit_code, result.stdout) == (0, b"web-b\n")
        assert transports.opens == 2
        assert events[-1].pod == "web-b"


async def test_an_interactive_session_gets_the_same_retry(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    transports = Transports(adapter)
    async with cached_service(adapter, sandbox, ["cache"], transports) as (service, _cache, _):
        delete_quietly(sandbox, "web-a")
        request = run("web", "printenv", "HOSTNAME")
        async with service.open_interactive(request, tty=False, stdin=False) as session:
            assert session.target.pod == "web-b"
            frames = [frame async for frame in session]
        assert frames[0] == adapter.Stdout(b"web-b\n")
        assert transports.opens == 2


async def test_the_retry_keys_on_the_status_not_the_wording(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    transports = Transports(adapter)
    async with cached_service(adapter, sandbox, ["cache"], transports) as (service, _cache, _):
        # A 404 at the upgrade worded like nothing kuber-exec says: still the stale pod.
        transports.refusal = ExecError(
            ExecErrorCode.FAILED, "the pod left before we got there", http_status=404
        )
        transports.refusals = 1
        result = await service.execute(run("web", "printenv", "HOSTNAME"))
        assert result.exit_code == 0
        assert transports.opens == 2


@pytest.mark.parametrize(
    "refusal",
    [
        # Worded as the 404 refusal once was, but the server said 500: no retry.
        ExecError(
            ExecErrorCode.FAILED,
            "Kubernetes API GET pods/exec failed with HTTP 404: not really",
            http_status=500,
        ),
        # The same wording without any HTTP status (not an answer of the server at all).
        ExecError(ExecErrorCode.FAILED, "Kubernetes API GET pods/exec failed with HTTP 404"),
        # A 404 that is not EXEC_FAILED.
        ExecError(ExecErrorCode.INVALID, "refused", http_status=404),
    ],
    ids=["http-500", "no-status", "not-failed"],
)
async def test_no_retry_for_anything_but_a_failed_404(
    adapter: ModuleType, sandbox: Sandbox, refusal: ExecError
) -> None:
    transports = Transports(adapter)
    async with cached_service(adapter, sandbox, ["cache"], transports) as (service, _cache, _):
        transports.refusal = refusal
        with pytest.raises(ExecError) as caught:
            await service.execute(run())
        assert caught.value is refusal
        assert transports.opens == 1


async def test_the_retry_happens_once_only(adapter: ModuleType, sandbox: Sandbox) -> None:
    transports = Transports(adapter)
    async with cached_service(adapter, sandbox, ["cache"], transports) as (service, _cache, _):
        transports.refuse_with_404 = True
        with pytest.raises(ExecError) as caught:
            await service.execute(run())
        assert caught.value.code is ExecErrorCode.FAILED
        assert caught.value.http_status == 404
        assert transports.opens == 2


async def test_no_retry_once_the_connection_opened(adapter: ModuleType, sandbox: Sandbox) -> None:
    transports = Transports(adapter)
    async with cached_service(adapter, sandbox, ["cache"], transports) as (service, _cache, _):
        transports.drop_after_open = True
        with pytest.raises(ExecError) as caught:
            # A command still running when the connection drops: `true` could have sent its
            # status into the WebSocket library's buffer before the abort.
            await service.execute(run("web", "sleep", "30"))
        assert caught.value.code is ExecErrorCode.FAILED
        # The command's exec, then the cleanup's (which ends the sleep): no retry.
        assert transports.opens == 2
        assert "kuber-exec-cleanup" in transports.urls[1]


async def test_no_retry_without_the_cache(adapter: ModuleType, sandbox: Sandbox) -> None:
    transports = Transports(adapter)
    async with backend(adapter, sandbox, transports) as plain:
        transports.refuse_with_404 = True
        with pytest.raises(ExecError) as caught:
            await adapter.ExecService(plain).execute(run())
        assert caught.value.http_status == 404
        assert transports.opens == 1


async def test_an_exception_in_the_block_comes_out_as_itself(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    async with backend(adapter, sandbox) as cached:
        with pytest.raises(LookupError, match="mine"):
            async with cached.watch(["cache"]):
                raise LookupError("mine")
