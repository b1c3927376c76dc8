"""The REST side of the sandbox: discovery, and GET/LIST of Pods, Deployments and ReplicaSets.

A pure function of the cluster and one request (no I/O), so every answer is testable without a
socket. Errors are ``metav1.Status`` bodies with the API server's reasons and messages: an
unknown path is 404 ``NotFound`` ("the server could not find the requested resource"), a
missing object 404 ``pods "x" not found``, a bad query 400 ``BadRequest``, a write verb 405.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

from kuber_exec_core import ExecError, LabelSelector

from . import _discovery, _render
from ._cluster import Cluster
from ._journal import journal_of

__all__ = [
    "RestResponse",
    "collection_route",
    "handle_rest",
    "is_watch",
    "json_response",
    "status_response",
]

JSON = dict[str, Any]
_NAME = r"([^/]+)"
_ROUTES = [
    (re.compile(rf"/api/v1/namespaces/{_NAME}/pods(?:/{_NAME})?"), "pods"),
    (re.compile(rf"/apis/apps/v1/namespaces/{_NAME}/deployments(?:/{_NAME})?"), "deployments"),
    (re.compile(rf"/apis/apps/v1/namespaces/{_NAME}/replicasets(?:/{_NAME})?"), "replicasets"),
    (re.compile(r"/api/v1/pods()()"), "pods"),
    (re.compile(r"/apis/apps/v1/deployments()()"), "deployments"),
    (re.compile(r"/apis/apps/v1/replicasets()()"), "replicasets"),
]
_NAMESPACES = re.compile(rf"/api/v1/namespaces(?:/{_NAME})?")
_GROUP = {"pods": "", "deployments": "apps", "replicasets": "apps"}
_TABLE_CONTENT_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@attrs.frozen
class RestResponse:
    """An HTTP answer: status, body, content type."""

    status: int
    body: bytes
    content_type: str = "application/json"


def json_response(
    value: JSON, status: int = 200, content_type: str = "application/json"
) -> RestResponse:
    """``value`` as a JSON response."""
    return RestResponse(status, json.dumps(value).encode("utf-8"), content_type)


def status_response(
    code: int, reason: str, message: str, details: JSON | None = None
) -> RestResponse:
    """A ``metav1.Status`` error response."""
    return json_response(_render.status_error(code, reason, message, details), code)


def _not_found_path() -> RestResponse:
    return status_response(404, "NotFound", "the server could not find the requested resource")


def _query(pairs: Sequence[tuple[str, str]], key: str) -> str | None:
    return next((v for k, v in pairs if k == key), None)


def handle_rest(
    cluster: Cluster,
    method: str,
    path: str,
    query: Sequence[tuple[str, str]],
    *,
    accept: str,
    offer_v5: bool,
    server_address: str,
) -> RestResponse:
    """Answer one non-exec request."""
    discovery = _discovery_answer(path, accept, offer_v5, server_address)
    namespace_match = _NAMESPACES.fullmatch(path)
    if namespace_match is not None and method in ("GET", "HEAD"):
        if is_watch(query):
            # Not in discovery's verbs for namespaces: refused, not answered with a list.
            return status_response(
                405, "MethodNotAllowed", "the kuber-exec sandbox does not watch namespaces"
            )
        return _namespaces(cluster, namespace_match.group(1))
    route = next(((m, r) for p, r in _ROUTES if (m := p.fullmatch(path))), None)
    if discovery is None and route is None:
        return _not_found_path()
    if method not in ("GET", "HEAD"):
        return status_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    if discovery is not None:
        return discovery
    assert route is not None
    match, resource = route
    namespace, name = match.group(1) or None, match.group(2) or None
    if name is not None:
        assert namespace is not None
        return _get_one(cluster, resource, namespace, name)
    if is_watch(query):
        # Namespaced watches are streamed by the connection (._watch); this is the rest.
        return status_response(
            405,
            "MethodNotAllowed",
            "the kuber-exec sandbox watches Pods, Deployments and ReplicaSets of one namespace",
        )
    return _list(cluster, resource, namespace, query, accept)


def is_watch(query: Sequence[tuple[str, str]]) -> bool:
    """Whether the query asks for a watch (``watch=1``/``true``)."""
    return _query(query, "watch") not in (None, "", "0", "false")


def collection_route(path: str) -> tuple[str, str, str | None] | None:
    """``(resource, namespace, name)`` for a namespaced Pod, Deployment or ReplicaSet path."""
    for pattern, resource in _ROUTES[:3]:
        if (match := pattern.fullmatch(path)) is not None:
            return resource, match.group(1), match.group(2) or None
    return None


def _discovery_answer(path: str, accept: str, offer_v5: bool, address: str) -> RestResponse | None:
    aggregated = _discovery.wants_aggregated(accept)
    # kr8s asks "/version/"; the apiserver answers both spellings.
    if path in ("/version", "/version/"):
        return json_response(_discovery.version_info(offer_v5))
    if path == "/api":
        if aggregated:
            return json_response(
                _discovery.aggregated_core(), content_type=_discovery.AGGREGATED_CONTENT_TYPE
            )
        return json_response(_discovery.api_versions(address))
    if path == "/apis":
        if aggregated:
            return json_response(
                _discovery.aggregated_apis(), content_type=_discovery.AGGREGATED_CONTENT_TYPE
            )
        return json_response(_discovery.api_group_list())
    if path == "/api/v1" or (path.startswith("/apis/") and path.count("/") == 3):
        listed = _discovery.resource_list(path.removeprefix("/api/").removeprefix("/apis/"))
        return None if listed is None else json_response(listed)
    return None


def _namespaces(cluster: Cluster, name: str | None) -> RestResponse:
    """``v1`` Namespaces: kubectl reads one to explain a NotFound."""
    if name is None:
        items = [_render.namespace_json(n) for n in sorted(cluster.namespaces)]
        return json_response(
            _render.object_list("NamespaceList", "v1", items, cluster.resource_version, "")
        )
    if name not in cluster.namespaces:
        details: JSON = {"name": name, "kind": "namespaces"}
        return status_response(404, "NotFound", f'namespaces "{name}" not found', details)
    return json_response(_render.namespace_json(name))


def _objects(cluster: Cluster, resource: str, namespace: str | None) -> tuple[list[JSON], int]:
    """The objects (by namespace, then name) as of now, and the resourceVersion of that state.

    The journal renders the namespace first (under the model's lock), so each object carries
    the resourceVersion of its last change and a watch from the returned version misses nothing.
    """
    with cluster.lock:
        journal = journal_of(cluster)
        if namespace is None:
            journal.sync_all()
            names = sorted(cluster.namespaces)
        else:
            journal.sync(namespace)
            names = [namespace] if namespace in cluster.namespaces else []
        items = [item for n in names for item in journal.items(resource, n)]
        return items, cluster.resource_version


def _get_one(cluster: Cluster, resource: str, namespace: str, name: str) -> RestResponse:
    for item in _objects(cluster, resource, namespace)[0]:
        if item["metadata"]["name"] == name:
            return json_response(item)
    details: JSON = {"name": name, "kind": resource}
    if _GROUP[resource]:
        details["group"] = _GROUP[resource]
    qualified = f"{resource}.{_GROUP[resource]}" if _GROUP[resource] else resource
    return status_response(404, "NotFound", f'{qualified} "{name}" not found', details)


def _list(
    cluster: Cluster,
    resource: str,
    namespace: str | None,
    query: Sequence[tuple[str, str]],
    accept: str,
) -> RestResponse:
    try:
        selector = LabelSelector.parse(_query(query, "labelSelector") or "")
    except ExecError as error:
        return status_response(400, "BadRequest", f"unable to parse requirement: {error.message}")
    limit_text = _query(query, "limit") or "0"
    if not limit_text.isdigit():
        return status_response(400, "BadRequest", f"limit: Invalid value: {limit_text!r}")
    limit = int(limit_text)
    # The continue token is the key ("namespace/name") of the last object sent, like etcd's:
    # the next page starts after it, so objects deleted in between shift nothing.
    after: tuple[str, str] | None = None
    token = _query(query, "continue")
    if token:
        try:
            key = base64.urlsafe_b64decode(token.encode("ascii")).decode("utf-8")
        except (binascii.Error, ValueError, UnicodeError):
            key = ""
        ns_part, slash, name_part = key.partition("/")
        if not slash or not name_part:
            return status_response(400, "BadRequest", "continue key is not valid")
        after = (ns_part, name_part)
    listed, version = _objects(cluster, resource, namespace)
    items = [
        i
        for i in listed
        if selector.matches(i["metadata"]["labels"]) and (after is None or _key(i) > after)
    ]
    more = ""
    page = items[:limit] if limit else items
    if limit and limit < len(items):
        last = "/".join(_key(page[-1]))
        more = base64.urlsafe_b64encode(last.encode("utf-8")).decode("ascii")
    kind = {"pods": "Pod", "deployments": "Deployment", "replicasets": "ReplicaSet"}[resource]
    if "as=Table" in accept:
        return json_response(_render.table(kind, page, version), content_type=_TABLE_CONTENT_TYPE)
    api_version = "v1" if resource == "pods" else "apps/v1"
    return json_response(_render.object_list(f"{kind}List", api_version, page, version, more))


def _key(item: JSON) -> tuple[str, str]:
    metadata = item["metadata"]
    return metadata["namespace"], metadata["name"]
