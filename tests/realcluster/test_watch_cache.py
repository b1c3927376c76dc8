"""The watch cache against the real API server: synced, answering as REST does, and a real
``410 Gone`` (a resume point the server no longer keeps) followed by a relist.

After etcd is compacted (the API server does it every 5 minutes; the test does it at once), a
WATCH resumed from before the compaction answers ``200`` with one ``ERROR`` event holding a
``Status`` of ``code: 410, reason: Expired``, not an HTTP 410, on both releases; the core's
``Reflector`` must relist on it. (A resource with a watch cache, such as pods, is answered from
the API server's memory instead: a young cluster's cache replays from its start, a 1.37 cache
that has dropped events answers the same 410 with "too old resource version".)
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any
from urllib.parse import urlencode

import anyio
import pytest

from kuber_exec_core.kube import ApiGet, ApiResponse
from kuber_exec_core.watch import PODS, Reflector, ReflectorState, WatchRequest

from .kube import WS_MAIN, Cluster, RestClient, compact_etcd, deployment, kubectl, service_for

pytestmark = pytest.mark.anyio


def request(adapter: ModuleType) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=["sh", "-c", "echo $WHO"],
    )


async def test_the_cache_syncs_and_resolves_as_rest_does(
    adapter: ModuleType, cluster: Cluster, workloads: Any
) -> None:
    async with service_for(adapter, cluster, "admin") as rest_service:
        by_rest = await rest_service.resolve_target(request(adapter))
    async with (
        service_for(adapter, cluster, "admin") as service,
        service.backend.watch([cluster.main_ns]) as cache,
    ):
        with anyio.fail_after(60):
            await cache.wait_synced()
        assert cache.synced(cluster.main_ns)
        by_cache = await service.resolve_target(request(adapter))
        result = await service.execute(request(adapter))
    assert by_cache == by_rest
    assert (result.stdout, result.exit_code, result.target) == (b"shell\n", 0, by_rest)


def _list_until_watching(reflector: Reflector[Any], admin: RestClient) -> WatchRequest:
    while isinstance(step := reflector.next_event(), ApiGet):
        status, body = admin.get_raw(f"{step.path}?{urlencode(step.query)}")
        reflector.list_received(ApiResponse(status=status, body=body))
    assert isinstance(step, WatchRequest)
    return step


def test_a_real_410_after_compaction_relists(cluster: Cluster, workloads: Any) -> None:
    admin = RestClient(cluster)
    reflector: Reflector[Any] = Reflector(PODS, cluster.main_ns, watch_timeout_seconds=5)
    _list_until_watching(reflector, admin)
    assert reflector.synced
    pods = set(reflector.items)
    lists = reflector.lists_completed
    # etcd compacted up to now (the API server does it every 5 minutes), then a watch resumed
    # from resourceVersion 1. Events have no watch cache (etcd answers at once); pods' watch
    # cache would replay from its own memory until it has dropped an event.
    compact_etcd()
    stale = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": "1"}
    status, body = admin.get_raw(f"/api/v1/namespaces/{cluster.main_ns}/events?{urlencode(stale)}")
    assert status == 200
    (line,) = body.splitlines()
    event = json.loads(line)
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    assert "too old" in event["object"]["message"]
    # The server's ERROR event, fed to the reflector's watch: it asks to close the watch and
    # relists (its snapshot still answering meanwhile).
    assert reflector.watch_data(body) is False
    assert reflector.state is ReflectorState.LISTING
    assert reflector.synced
    _list_until_watching(reflector, admin)
    assert reflector.lists_completed == lists + 1
    # The relisted snapshot is the server's state at the relist's resourceVersion, read back
    # exactly (other tests' Deployments come and go in this namespace meanwhile, so the set
    # from before the compaction is no fixed point).
    version = reflector.resource_version
    assert version is not None
    exact = {"resourceVersion": version, "resourceVersionMatch": "Exact"}
    status, body = admin.get_raw(f"/api/v1/namespaces/{cluster.main_ns}/pods?{urlencode(exact)}")
    assert status == 200, body
    assert set(reflector.items) == {item["metadata"]["name"] for item in json.loads(body)["items"]}
    assert any(name.startswith("shell-") for name in pods & set(reflector.items))


async def test_execs_through_a_rollout_restart_all_run(
    anyio_backend: str, adapter: ModuleType, cluster: Cluster, workloads: Any
) -> None:
    # A Deployment of its own (one replica, quick to stop), restarted while execs go through the
    # warm cache: each exec runs, on the old pod or the new one. A cached target whose pod is
    # already gone is refused with 404 before the command starts and retried once over REST.
    name = f"restart-{anyio_backend}"
    manifest = deployment(name, namespace=cluster.main_ns, image=cluster.image, workspace=WS_MAIN)
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest).encode())
    kubectl(cluster, "rollout", "status", f"deployment/{name}", "-n", cluster.main_ns,
            "--timeout=120s", timeout=130)  # fmt: skip
    exec_request = adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment=name,
        command=["sh", "-c", "echo $HOSTNAME"],
    )
    pods_seen: set[str] = set()
    async with (
        service_for(adapter, cluster, "admin") as service,
        service.backend.watch([cluster.main_ns]) as cache,
    ):
        with anyio.fail_after(60):
            await cache.wait_synced()
        first = await service.execute(exec_request)
        pods_seen.add(first.target.pod)
        kubectl(cluster, "rollout", "restart", f"deployment/{name}", "-n", cluster.main_ns)
        with anyio.fail_after(120):
            while len(pods_seen) < 2:
                result = await service.execute(exec_request)
                assert result.exit_code == 0, result
                pods_seen.add(result.target.pod)
    kubectl(cluster, "delete", "deployment", name, "-n", cluster.main_ns, "--wait=false")
    assert len(pods_seen) == 2


def test_a_real_bookmark_advances_the_reflector(
    cluster: Cluster, workloads: Any, server_minor: int
) -> None:
    # A watch that streams the initial state (1.27+ "watch list", on by default in 1.37's
    # client-go) ends that state with a BOOKMARK at once: the server's own bookmark event, fed
    # to the core's reflector as part of its watch, moves its resourceVersion without touching
    # its snapshot. 1.20 knows no such request: it refuses it as invalid (422).
    admin = RestClient(cluster)
    reflector: Reflector[Any] = Reflector(PODS, cluster.main_ns, watch_timeout_seconds=5)
    watch = _list_until_watching(reflector, admin)
    pods, version = set(reflector.items), reflector.resource_version
    streaming = {
        "watch": "1",
        "allowWatchBookmarks": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "resourceVersion": "",
        "timeoutSeconds": "2",
    }
    status, body = admin.get_raw(f"{watch.path}?{urlencode(streaming)}")
    if server_minor < 27:
        # No streaming lists yet: a watch with resourceVersionMatch is refused as invalid.
        assert status == 422
        assert json.loads(body)["reason"] == "Invalid"
        return
    assert status == 200
    events = [json.loads(line) for line in body.splitlines() if line.strip()]
    # The end of the initial state (more bookmarks may follow before the timeout).
    bookmark = next(e for e in events if e["type"] == "BOOKMARK")
    annotations = bookmark["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}
    line = json.dumps(bookmark).encode() + b"\n"
    assert reflector.watch_data(line) is True
    bookmarked = bookmark["object"]["metadata"]["resourceVersion"]
    assert reflector.resource_version == bookmarked
    assert int(bookmarked) >= int(version or 0)
    assert (reflector.synced, set(reflector.items)) == (True, pods)
