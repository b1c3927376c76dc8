"""Discovery documents: ``/version``, ``/api``, ``/apis`` (plain and aggregated), resource lists.

kubectl 1.30+ asks ``/api`` and ``/apis`` for the aggregated form (``apidiscovery.k8s.io/v2``)
first and only falls back to the per-group lists when the answer is not aggregated; both are
served, so any client version finds what it looks for.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AGGREGATED_CONTENT_TYPE",
    "aggregated_apis",
    "aggregated_core",
    "api_group_list",
    "api_versions",
    "apps_v1_resources",
    "core_v1_resources",
    "version_info",
    "wants_aggregated",
]

JSON = dict[str, Any]

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

# (resource, singular, kind, short names, verbs, subresources)
_CORE: list[tuple[str, str, str, list[str], list[str], list[str]]] = [
    ("namespaces", "namespace", "Namespace", ["ns"], ["get", "list"], []),
    ("pods", "pod", "Pod", ["po"], ["get", "list"], ["exec"]),
]
_CLUSTER_SCOPED = {"namespaces"}
_APPS: list[tuple[str, str, str, list[str], list[str], list[str]]] = [
    ("deployments", "deployment", "Deployment", ["deploy"], ["get", "list"], []),
    ("replicasets", "replicaset", "ReplicaSet", ["rs"], ["get", "list"], []),
]
_SUBRESOURCE_KIND = {"exec": "PodExecOptions"}


def version_info(offer_v5: bool) -> JSON:
    """``/version``: 1.32 normally; 1.29 (before v5 existed) when v5 is not offered."""
    minor = "32" if offer_v5 else "29"
    return {
        "major": "1",
        "minor": minor,
        "gitVersion": f"v1.{minor}.0-kuber-exec-sandbox",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def wants_aggregated(accept: str) -> bool:
    """Whether an ``Accept`` header asks for aggregated discovery v2 (first choice or any)."""
    for part in accept.split(","):
        params = {p.strip() for p in part.split(";")[1:]}
        if {"g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"} <= params:
            return True
    return False


def api_versions(server_address: str) -> JSON:
    """``/api`` (legacy form)."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group_list() -> JSON:
    """``/apis`` (legacy form)."""
    version = {"groupVersion": "apps/v1", "version": "v1"}
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{"name": "apps", "versions": [version], "preferredVersion": version}],
    }


def _resource_list(
    group_version: str, table: list[tuple[str, str, str, list[str], list[str], list[str]]]
) -> JSON:
    resources: list[JSON] = []
    for name, singular, kind, short, verbs, subresources in table:
        resources.append(
            {
                "name": name,
                "singularName": singular,
                "namespaced": name not in _CLUSTER_SCOPED,
                "kind": kind,
                "verbs": verbs,
                "shortNames": short,
                "categories": [] if name in _CLUSTER_SCOPED else ["all"],
            }
        )
        for sub in subresources:
            resources.append(
                {
                    "name": f"{name}/{sub}",
                    "singularName": "",
                    "namespaced": True,
                    "kind": _SUBRESOURCE_KIND[sub],
                    "verbs": ["create", "get"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def core_v1_resources() -> JSON:
    """``/api/v1``."""
    return _resource_list("v1", _CORE)


def apps_v1_resources() -> JSON:
    """``/apis/apps/v1``."""
    return _resource_list("apps/v1", _APPS)


def _aggregated_group(
    name: str, group: str, table: list[tuple[str, str, str, list[str], list[str], list[str]]]
) -> JSON:
    resources = []
    for resource, singular, kind, short, verbs, subresources in table:
        resources.append(
            {
                "resource": resource,
                "responseKind": {"group": group, "version": "v1", "kind": kind},
                "scope": "Cluster" if resource in _CLUSTER_SCOPED else "Namespaced",
                "singularResource": singular,
                "verbs": verbs,
                "shortNames": short,
                "categories": [] if resource in _CLUSTER_SCOPED else ["all"],
                "subresources": [
                    {
                        "subresource": sub,
                        "responseKind": {
                            "group": "",
                            "version": "v1",
                            "kind": _SUBRESOURCE_KIND[sub],
                        },
                        "verbs": ["create", "get"],
                    }
                    for sub in subresources
                ],
            }
        )
    metadata: JSON = {"creationTimestamp": None}
    if name:
        metadata["name"] = name
    return {
        "metadata": metadata,
        "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}],
    }


def _aggregated(items: list[JSON]) -> JSON:
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def aggregated_core() -> JSON:
    """``/api`` in aggregated form (the unnamed core group)."""
    return _aggregated([_aggregated_group("", "", _CORE)])


def aggregated_apis() -> JSON:
    """``/apis`` in aggregated form."""
    return _aggregated([_aggregated_group("apps", "apps", _APPS)])
