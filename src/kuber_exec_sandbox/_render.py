"""The model as the Kubernetes API's JSON: objects, lists, Tables and ``metav1.Status`` errors.

Shapes follow what a real API server returns for ``v1`` Pods and ``apps/v1`` Deployments and
ReplicaSets, with the fields kubectl and the official client read (kubectl decodes these into its
typed structs, so every field has its real type).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._cluster import (
    ContainerState,
    DeploymentObject,
    EphemeralContainer,
    OwnerRef,
    PodObject,
    ReplicaSetObject,
    stable_uid,
)

__all__ = [
    "deployment_json",
    "namespace_json",
    "object_list",
    "pod_json",
    "replica_set_json",
    "status_error",
    "table",
]

JSON = dict[str, Any]


def status_error(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    """A ``metav1.Status`` failure body, as the API server sends with 4xx/5xx answers."""
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        # The real API server omits empty details (recorded in tests/realcluster).
        body["details"] = details
    body["code"] = code
    return body


def _owner_references(owner: OwnerRef | None) -> list[JSON]:
    if owner is None:
        return []
    return [
        {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": owner.controller,
            "blockOwnerDeletion": True,
        }
    ]


def _metadata(
    namespace: str,
    name: str,
    uid: str,
    labels: dict[str, str],
    created: str,
    owner: OwnerRef | None = None,
    deletion: str | None = None,
) -> JSON:
    metadata: JSON = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": "1",
        "generation": 1,
        "creationTimestamp": created,
        "labels": dict(labels),
    }
    if owner is not None:
        metadata["ownerReferences"] = _owner_references(owner)
    if deletion is not None:
        metadata["deletionTimestamp"] = deletion
        metadata["deletionGracePeriodSeconds"] = 30
    return metadata


def _container_specs(names: Sequence[str]) -> list[JSON]:
    return [
        {"name": name, "image": "sandbox.local/shell:latest", "imagePullPolicy": "IfNotPresent"}
        for name in names
    ]


def _selector(match_labels: dict[str, str], expressions: list[dict[str, object]]) -> JSON:
    selector: JSON = {"matchLabels": dict(match_labels)}
    if expressions:
        selector["matchExpressions"] = [dict(e) for e in expressions]
    return selector


def deployment_json(deployment: DeploymentObject, ready_replicas: int, replicas: int) -> JSON:
    """An ``apps/v1`` Deployment."""
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": _metadata(
            deployment.namespace,
            deployment.name,
            deployment.uid,
            deployment.labels,
            deployment.creation_timestamp,
        ),
        "spec": {
            "replicas": replicas,
            "selector": _selector(deployment.match_labels, deployment.match_expressions),
            "template": {
                "metadata": {"labels": dict(deployment.template_labels)},
                "spec": {"containers": _container_specs(deployment.containers)},
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": ready_replicas,
            "availableReplicas": ready_replicas,
            "updatedReplicas": replicas,
        },
    }


def replica_set_json(replica_set: ReplicaSetObject, ready_replicas: int, replicas: int) -> JSON:
    """An ``apps/v1`` ReplicaSet with its controller owner reference."""
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": _metadata(
            replica_set.namespace,
            replica_set.name,
            replica_set.uid,
            replica_set.labels,
            replica_set.creation_timestamp,
            owner=replica_set.owner,
        ),
        "spec": {
            "replicas": replicas,
            "selector": _selector(replica_set.match_labels, []),
            "template": {
                "metadata": {"labels": dict(replica_set.match_labels)},
                "spec": {"containers": _container_specs(replica_set.containers)},
            },
        },
        "status": {"replicas": replicas, "readyReplicas": ready_replicas},
    }


def _container_state(container: ContainerState, started: str) -> JSON:
    if container.running:
        return {"running": {"startedAt": started}}
    if container.exit_code is not None:
        reason = "Completed" if container.exit_code == 0 else "Error"
        return {"terminated": {"exitCode": container.exit_code, "reason": reason}}
    return {"waiting": {"reason": "CrashLoopBackOff"}}


def _ephemeral_status(container: EphemeralContainer, started: str) -> JSON:
    state: JSON
    if container.state == "running":
        state = {"running": {"startedAt": started}}
    elif container.state == "terminated":
        state = {"terminated": {"exitCode": container.exit_code, "reason": container.reason}}
        if container.message:
            state["terminated"]["message"] = container.message
    else:
        state = {"waiting": {"reason": container.reason}}
        if container.message:
            state["waiting"]["message"] = container.message
    return {
        "name": container.name,
        "state": state,
        "ready": False,
        "restartCount": 0,
        "image": container.image,
        "imageID": "",
    }


def pod_json(pod: PodObject) -> JSON:
    """A ``v1`` Pod: phase, conditions, containerStatuses (running, terminated or waiting,
    ready), and its ephemeral containers with their statuses."""
    statuses = []
    for container in pod.containers:
        statuses.append(
            {
                "name": container.name,
                "state": _container_state(container, pod.creation_timestamp),
                "ready": container.ready and container.running,
                "restartCount": container.restart_count,
                "image": "sandbox.local/shell:latest",
                "imageID": "",
                "started": container.running,
            }
        )
    ready = "True" if pod.ready else "False"
    specs = _container_specs([c.name for c in pod.containers])
    for container_spec, container in zip(specs, pod.containers, strict=True):
        if container.command:
            container_spec["command"] = list(container.command)
        if container.stdin:
            container_spec["stdin"] = True
        if container.tty:
            container_spec["tty"] = True
    spec: JSON = {"containers": specs}
    if pod.ephemeral:
        spec["ephemeralContainers"] = [dict(c.spec) for c in pod.ephemeral]
    if pod.node_name:
        spec["nodeName"] = pod.node_name
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": _metadata(
            pod.namespace,
            pod.name,
            pod.uid,
            pod.labels,
            pod.creation_timestamp,
            owner=pod.owner,
            deletion=pod.deletion_timestamp,
        ),
        "spec": spec,
        "status": {
            "phase": pod.phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True" if pod.node_name else "False"},
                {"type": "Ready", "status": ready, "lastTransitionTime": pod.creation_timestamp},
                {"type": "ContainersReady", "status": ready},
            ],
            "containerStatuses": statuses,
            "startTime": pod.creation_timestamp,
            **(
                {
                    "ephemeralContainerStatuses": [
                        _ephemeral_status(c, pod.creation_timestamp) for c in pod.ephemeral
                    ]
                }
                if pod.ephemeral
                else {}
            ),
        },
    }


def namespace_json(name: str) -> JSON:
    """A ``v1`` Namespace (always Active)."""
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": stable_uid("Namespace", "", name),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def object_list(kind: str, api_version: str, items: list[JSON], version: int, more: str) -> JSON:
    """A ``<Kind>List``; ``more`` is the ``continue`` token ("" when complete)."""
    metadata: JSON = {"resourceVersion": str(version)}
    if more:
        metadata["continue"] = more
    return {"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": items}


def _column(name: str, kind: str = "string", fmt: str = "") -> JSON:
    return {"name": name, "type": kind, "format": fmt, "description": name, "priority": 0}


def table(kind: str, items: list[JSON], version: int) -> JSON:
    """A ``meta.k8s.io/v1`` Table, as ``kubectl get`` asks for (rows carry object metadata)."""
    columns = [_column("Name", fmt="name")]
    if kind == "Pod":
        columns += [_column("Ready"), _column("Status"), _column("Restarts", "integer")]
    rows = []
    for item in items:
        cells: list[object] = [item["metadata"]["name"]]
        if kind == "Pod":
            statuses = item["status"]["containerStatuses"]
            ready = sum(1 for s in statuses if s["ready"])
            cells += [
                f"{ready}/{len(statuses)}",
                "Terminating"
                if item["metadata"].get("deletionTimestamp")
                else item["status"]["phase"],
                sum(s["restartCount"] for s in statuses),
            ]
        rows.append(
            {
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": item["metadata"],
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(version)},
        "columnDefinitions": columns,
        "rows": rows,
    }
