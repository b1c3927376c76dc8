"""Discovery documents: ``/version``, ``/api``, ``/apis`` (plain and aggregated), resource lists.

Every document is rendered from one table, :data:`SERVED`: each resource the sandbox serves, its
group, scope, verbs and subresources. kubectl resolves every name through discovery (``get
leases``, ``auth can-i create pods/portforward``), so a route the table leaves out is a resource
kubectl says the server does not have; ``tests/sandbox/test_discovery.py`` probes the server to
keep the table and the routes equal.

kubectl 1.30+ asks ``/api`` and ``/apis`` for the aggregated form (``apidiscovery.k8s.io/v2``)
first and only falls back to the per-group lists when the answer is not aggregated; both are
served, so any client version finds what it looks for.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "AGGREGATED_CONTENT_TYPE",
    "SERVED",
    "Resource",
    "Subresource",
    "aggregated_apis",
    "aggregated_core",
    "api_group_list",
    "api_versions",
    "group_of",
    "resource_list",
    "version_info",
    "wants_aggregated",
]

JSON = dict[str, Any]

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@attrs.frozen
class Subresource:
    """``{resource}/{name}``: the kind its requests carry, and its verbs."""

    name: str
    kind: str
    verbs: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Resource:
    """One served resource (a row of :data:`SERVED`)."""

    group: str
    version: str = "v1"
    name: str
    singular: str
    kind: str
    namespaced: bool = True
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()
    #: ``kubectl get all`` lists the resources in category ``all``.
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()

    @property
    def group_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version


_READ = ("get", "list", "watch")
_UPGRADE = ("create", "get")  # exec, attach, port-forward: a GET (or POST) that upgrades

#: Everything the sandbox serves, in the order the API server lists it.
SERVED: tuple[Resource, ...] = (
    Resource(
        group="",
        name="namespaces",
        singular="namespace",
        kind="Namespace",
        namespaced=False,
        verbs=("get", "list"),
        short_names=("ns",),
    ),
    Resource(
        group="",
        name="pods",
        singular="pod",
        kind="Pod",
        verbs=_READ,
        short_names=("po",),
        categories=("all",),
        subresources=(
            Subresource("attach", "PodAttachOptions", _UPGRADE),
            Subresource("ephemeralcontainers", "Pod", ("get", "patch")),
            Subresource("exec", "PodExecOptions", _UPGRADE),
            Subresource("log", "Pod", ("get",)),
            Subresource("portforward", "PodPortForwardOptions", _UPGRADE),
        ),
    ),
    Resource(
        group="apps",
        name="deployments",
        singular="deployment",
        kind="Deployment",
        verbs=_READ,
        short_names=("deploy",),
        categories=("all",),
    ),
    Resource(
        group="apps",
        name="replicasets",
        singular="replicaset",
        kind="ReplicaSet",
        verbs=_READ,
        short_names=("rs",),
        categories=("all",),
    ),
    Resource(
        group="authorization.k8s.io",
        name="selfsubjectaccessreviews",
        singular="selfsubjectaccessreview",
        kind="SelfSubjectAccessReview",
        namespaced=False,
        verbs=("create",),
    ),
    Resource(
        group="authorization.k8s.io",
        name="selfsubjectrulesreviews",
        singular="selfsubjectrulesreview",
        kind="SelfSubjectRulesReview",
        namespaced=False,
        verbs=("create",),
    ),
    Resource(
        group="coordination.k8s.io",
        name="leases",
        singular="lease",
        kind="Lease",
        verbs=("create", "delete", "get", "list", "update"),
    ),
)


def _groups() -> list[str]:
    """The named groups, in table order (each once)."""
    return list(dict.fromkeys(r.group for r in SERVED if r.group))


def group_of(resource: str) -> str | None:
    """The API group serving ``resource`` (``""``: core), ``None`` when none does."""
    return next((r.group for r in SERVED if r.name == resource), None)


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
    groups = []
    for name in _groups():
        version = {"groupVersion": f"{name}/v1", "version": "v1"}
        groups.append({"name": name, "versions": [version], "preferredVersion": version})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(group_version: str) -> JSON | None:
    """``/api/v1`` or ``/apis/{group}/{version}``; ``None`` for a group version not served."""
    rows = [r for r in SERVED if r.group_version == group_version]
    if not rows:
        return None
    resources: list[JSON] = []
    for row in rows:
        resources.append(
            {
                "name": row.name,
                "singularName": row.singular,
                "namespaced": row.namespaced,
                "kind": row.kind,
                "verbs": list(row.verbs),
                **({"shortNames": list(row.short_names)} if row.short_names else {}),
                **({"categories": list(row.categories)} if row.categories else {}),
            }
        )
        for sub in row.subresources:
            resources.append(
                {
                    "name": f"{row.name}/{sub.name}",
                    "singularName": "",
                    "namespaced": row.namespaced,
                    "kind": sub.kind,
                    "verbs": list(sub.verbs),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _aggregated_group(group: str) -> JSON:
    resources = []
    for row in (r for r in SERVED if r.group == group):
        entry: JSON = {
            "resource": row.name,
            "responseKind": {"group": group, "version": row.version, "kind": row.kind},
            "scope": "Namespaced" if row.namespaced else "Cluster",
            "singularResource": row.singular,
            "verbs": list(row.verbs),
        }
        if row.short_names:
            entry["shortNames"] = list(row.short_names)
        if row.categories:
            entry["categories"] = list(row.categories)
        if row.subresources:
            entry["subresources"] = [
                {
                    "subresource": sub.name,
                    "responseKind": {"group": "", "version": "v1", "kind": sub.kind},
                    "verbs": list(sub.verbs),
                }
                for sub in row.subresources
            ]
        resources.append(entry)
    metadata: JSON = {"creationTimestamp": None}
    if group:
        metadata["name"] = group
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
    return _aggregated([_aggregated_group("")])


def aggregated_apis() -> JSON:
    """``/apis`` in aggregated form (every named group)."""
    return _aggregated([_aggregated_group(group) for group in _groups()])
