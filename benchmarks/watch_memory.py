"""Memory of the watch cache: 10,000 pods in 1,000 namespaces, measured with tracemalloc.

Each namespace holds one Deployment, one ReplicaSet and ten pods shaped like a Deployment's
(template labels plus the pod-template-hash, two containers, a controller reference), fed to the
store's reflectors as LIST pages, then as a watch of ten MODIFIED events per namespace so the
figure includes what the watch path keeps. Only the store is counted: the JSON bodies are freed
before the measurement.

    python benchmarks/watch_memory.py [--namespaces 1000] [--pods 10]
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
import uuid
from typing import Any

from kuber_exec_core._kube_api import ApiResponse
from kuber_exec_core._store import WatchStore
from kuber_exec_core.testing import deployment_object, pod_object, replica_set_object

MANAGED = {"app.kubernetes.io/managed-by": "kuber", "kuber.dev/workspace-uid": "ws"}


def _page(items: list[dict[str, Any]], version: int) -> ApiResponse:
    body = {"kind": "List", "metadata": {"resourceVersion": str(version)}, "items": items}
    return ApiResponse(status=200, body=json.dumps(body).encode())


def _namespace_objects(
    namespace: str, pods: int, version: int
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    deployment_uid, rs_uid = str(uuid.uuid4()), str(uuid.uuid4())
    template = {"app.kubernetes.io/name": "web", "pod-template-hash": "5d8f7c9b6"}
    deployment = deployment_object(
        namespace=namespace,
        name="web",
        uid=deployment_uid,
        labels=MANAGED,
        match_labels=template,
        containers=["app", "sidecar"],
    )
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": deployment_uid}
    replica_set = replica_set_object(
        namespace=namespace,
        name="web-5d8f7c9b6",
        uid=rs_uid,
        owner={**owner, "controller": True},
    )
    rs_owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web-5d8f7c9b6",
        "uid": rs_uid,
        "controller": True,
    }
    pod_list = []
    for index in range(pods):
        pod = pod_object(
            namespace=namespace,
            name=f"web-5d8f7c9b6-{index:05d}",
            uid=str(uuid.uuid4()),
            labels=template,
            owners=[rs_owner],
            containers=[("app", "running", True), ("sidecar", "running", True)],
        )
        pod["metadata"]["resourceVersion"] = str(version)
        pod_list.append(pod)
    for value in (deployment, replica_set):
        value["metadata"]["resourceVersion"] = str(version)
    return deployment, replica_set, pod_list


def build(namespaces: int, pods: int) -> WatchStore:
    """A synced store over ``namespaces`` namespaces of ``pods`` pods each."""
    store = WatchStore()
    version = 1000
    for n in range(namespaces):
        namespace = f"ws-{n:04d}"
        deployment, replica_set, pod_list = _namespace_objects(namespace, pods, version)
        watch = store.watch(namespace)
        watch.deployments.list_received(_page([deployment], version))
        watch.replica_sets.list_received(_page([replica_set], version))
        watch.pods.list_received(_page(pod_list, version))
        # Every pod changes once over the watch: the snapshot kept is the watch's, not the LIST's.
        events = []
        for pod in pod_list:
            version += 1
            pod["metadata"]["resourceVersion"] = str(version)
            pod["status"]["containerStatuses"][1]["ready"] = False
            events.append(json.dumps({"type": "MODIFIED", "object": pod}).encode() + b"\n")
        assert watch.pods.watch_data(b"".join(events))
        assert watch.synced
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10)
    arguments = parser.parse_args()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    store = build(arguments.namespaces, arguments.pods)
    gc.collect()
    after = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    size = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    total_pods = arguments.namespaces * arguments.pods
    objects = arguments.namespaces * (arguments.pods + 2)
    print(f"namespaces: {arguments.namespaces}, pods: {total_pods}, objects: {objects}")
    print(f"store: {size / 2**20:.1f} MiB ({size / total_pods:.0f} bytes per pod, all kinds)")
    print(f"peak while building: {peak / 2**20:.1f} MiB (current {current / 2**20:.1f} MiB)")
    top = after.compare_to(before, "lineno")[:8]
    for stat in top:
        print(f"  {stat.size_diff / 2**20:7.2f} MiB  {stat.traceback}")
    assert len(store) == arguments.namespaces


if __name__ == "__main__":
    main()
