"""Targeting against objects the real controllers made: ReplicaSets with controller owner
references, pods of another workspace matching the selector, crash loops, rolling updates."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import anyio
import pytest

from .kube import WS_MAIN, WS_OTHER, Cluster, get_json, kubectl, pods_of

pytestmark = pytest.mark.anyio


def request(
    adapter: ModuleType,
    deployment: str,
    *,
    project: str = "kx-target",
    uid: str = WS_MAIN,
    container: str | None = None,
    command: list[str] | None = None,
) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project=project, uid=uid),
        deployment=deployment,
        command=command or ["true"],
        container=container,
    )


async def expect_error(service: Any, exec_request: Any) -> Any:
    with pytest.raises(Exception) as caught:  # noqa: PT011  (checked below: an ExecError)
        await service.resolve_target(exec_request)
    return caught.value


async def test_the_workspace_pod_is_chosen_and_matches_the_controllers_objects(
    adapter: ModuleType, cluster: Cluster, workloads: Any, admin_service: Any
) -> None:
    target = await admin_service.resolve_target(request(adapter, "shell"))
    deployment = get_json(cluster, "deployment", "shell", "-n", cluster.main_ns)
    pod = get_json(cluster, "pod", target.pod, "-n", cluster.main_ns)
    assert target.namespace == cluster.main_ns
    assert target.deployment == "shell"
    assert target.deployment_uid == deployment["metadata"]["uid"]
    assert target.pod_uid == pod["metadata"]["uid"]
    assert target.container == "main"
    # The pod is owned by a ReplicaSet the Deployment controls (controller references).
    (owner,) = [o for o in pod["metadata"]["ownerReferences"] if o.get("controller")]
    assert owner["kind"] == "ReplicaSet"
    replicaset = get_json(cluster, "replicaset", owner["name"], "-n", cluster.main_ns)
    (rs_owner,) = [o for o in replicaset["metadata"]["ownerReferences"] if o.get("controller")]
    assert rs_owner["uid"] == deployment["metadata"]["uid"]


async def test_another_workspaces_look_alike_pods_are_never_chosen(
    adapter: ModuleType, cluster: Cluster, workloads: Any, admin_service: Any
) -> None:
    # The impostor's pods match shell's selector (matchLabels and matchExpressions) and sort
    # first by name: a selector-only pick (what kubectl does) could land there.
    selector = "app=shell,tier in (exec,debug)"
    names = sorted(p["metadata"]["name"] for p in pods_of(cluster, cluster.main_ns, selector))
    assert any(n.startswith("impostor-") for n in names)
    assert names[0].startswith("impostor-")
    for _ in range(5):
        target = await admin_service.resolve_target(request(adapter, "shell"))
        assert target.pod.startswith("shell-")
    result = await admin_service.execute(
        request(adapter, "shell", command=["sh", "-c", "echo $WHO"])
    )
    assert result.stdout == b"shell\n"
    # And the impostor is its own workspace's target, not ours.
    error = await expect_error(admin_service, request(adapter, "impostor"))
    assert error.code is adapter.ExecErrorCode.TARGET_FORBIDDEN
    theirs = await admin_service.resolve_target(request(adapter, "impostor", uid=WS_OTHER))
    assert theirs.pod.startswith("impostor-")


async def test_a_deployment_without_the_ownership_labels_is_forbidden(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    error = await expect_error(admin_service, request(adapter, "unlabelled"))
    assert isinstance(error, adapter.ExecError)
    assert error.code is adapter.ExecErrorCode.TARGET_FORBIDDEN
    assert "unlabelled" in error.message


async def test_a_missing_deployment_is_not_found(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    error = await expect_error(admin_service, request(adapter, "no-such-deployment"))
    assert isinstance(error, adapter.ExecError)
    assert error.code is adapter.ExecErrorCode.TARGET_NOT_FOUND
    assert "no-such-deployment" in error.message


async def test_scaled_to_zero_is_not_ready(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    error = await expect_error(admin_service, request(adapter, "zero"))
    assert isinstance(error, adapter.ExecError)
    assert error.code is adapter.ExecErrorCode.TARGET_NOT_READY


async def test_a_crash_looping_container_is_never_chosen(
    adapter: ModuleType, cluster: Cluster, workloads: Any, admin_service: Any
) -> None:
    (pod,) = pods_of(cluster, cluster.main_ns, "app=crashy")
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert statuses["crash"]["restartCount"] >= 1
    # The default container is the first one, ``crash``: it is not running, so no pod qualifies.
    error = await expect_error(admin_service, request(adapter, "crashy"))
    assert isinstance(error, adapter.ExecError)
    assert error.code is adapter.ExecErrorCode.TARGET_NOT_READY, error
    assert "crashy" in error.message
    # Asked for by name, the crash-looping container is not found (not running in any pod).
    error = await expect_error(admin_service, request(adapter, "crashy", container="crash"))
    assert isinstance(error, adapter.ExecError)
    assert error.code is adapter.ExecErrorCode.TARGET_NOT_FOUND, error
    assert "crash" in error.message
    # Its running sibling is reachable by name in the same (not ready) pod.
    target = await admin_service.resolve_target(request(adapter, "crashy", container="main"))
    assert target.pod == pod["metadata"]["name"]
    assert target.container == "main"


def deletion_requested(pod: dict[str, Any]) -> datetime | None:
    """When ``pod``'s deletion was asked for: its ``deletionTimestamp`` is that moment plus
    the grace period (whole seconds); ``None`` while it is not terminating."""
    metadata = pod["metadata"]
    stamp = metadata.get("deletionTimestamp")
    if not stamp:
        return None
    grace = timedelta(seconds=metadata.get("deletionGracePeriodSeconds") or 0)
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) - grace


async def test_terminating_pods_of_a_rolling_update_are_never_chosen(
    anyio_backend: str, adapter: ModuleType, cluster: Cluster, workloads: Any, admin_service: Any
) -> None:
    ns = cluster.main_ns
    # One rollout per backend: a new pod template (generation) each time.
    generation = f"{anyio_backend}-{time.monotonic_ns()}"
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "main", "env": [{"name": "GENERATION", "value": generation}]}
                    ]
                }
            }
        }
    }
    kubectl(cluster, "patch", "deployment", "rolling", "-n", ns, "-p", json.dumps(patch))
    deadline = time.monotonic() + 90
    seen_terminating: set[str] = set()
    chosen: set[str] = set()
    while time.monotonic() < deadline:
        pods = pods_of(cluster, ns, "app=rolling")
        terminating = {
            p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")
        }
        seen_terminating |= terminating
        resolving_since = datetime.now(UTC)
        target = await admin_service.resolve_target(request(adapter, "rolling"))
        chosen.add(target.pod)
        # Read again after the resolution, the pod may have begun terminating since (the
        # rollout goes on): what must never happen is choosing a pod whose deletion was asked
        # for before the resolution read the pods.
        pod = get_json(cluster, "pod", target.pod, "-n", ns)
        requested = deletion_requested(pod)
        # The API server keeps whole seconds: a deletion asked for during the resolution
        # may read as up to a second before it began.
        assert requested is None or requested > resolving_since - timedelta(seconds=1), (
            target.pod,
            pod["metadata"],
        )
        assert target.pod not in seen_terminating
        replicasets = get_json(cluster, "replicasets", "-n", ns, "-l", "app=rolling")["items"]
        if terminating and len(replicasets) >= 2:
            result = await admin_service.execute(
                request(adapter, "rolling", command=["sh", "-c", "echo $GENERATION"])
            )
            if result.stdout == f"{generation}\n".encode():
                break
        await anyio.sleep(0.5)
    else:
        pytest.fail(f"no rollout observed: terminating {seen_terminating}, chosen {chosen}")
    assert seen_terminating
