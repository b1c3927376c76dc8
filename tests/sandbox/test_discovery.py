"""Discovery and the routes are one: every resource and verb the sandbox answers is listed in
its discovery (so kubectl can name it), and every one listed is answered.

The table (``kuber_exec_sandbox._discovery.SERVED``) renders every discovery document; this
probes the running server with each verb's request on every resource of the table and on
resources and subresources a real cluster has and the sandbox does not, and compares what it
answers with what the table says. A request is *not served* when the answer is the API server's
404 for an unknown path ("the server could not find the requested resource") or a 405; any other
answer (200, 201, a 4xx about the request or the object) means the route exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread
from kuber_exec_sandbox._discovery import SERVED, Resource
from support.sandbox import ready_web_pod

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_UNKNOWN_PATH = "the server could not find the requested resource"

# What a real cluster has besides: probed so that a route added without its discovery row fails.
_GROUP_VERSIONS = sorted(
    {r.group_version for r in SERVED} | {"batch/v1", "rbac.authorization.k8s.io/v1"}
)
_RESOURCES = sorted(
    {r.name for r in SERVED}
    | {"configmaps", "secrets", "services", "events", "nodes", "statefulsets", "jobs"}
    | {"subjectaccessreviews", "localsubjectaccessreviews", "roles", "tokenreviews"}
)
_TABLE_NAMES = {r.name for r in SERVED}
_SUBRESOURCES = sorted(
    {s.name for r in SERVED for s in r.subresources}
    | {"status", "scale", "binding", "eviction", "proxy", "resize", "token"}
)
# (verb, method, on an object (not the collection), query)
_COLLECTION_VERBS = [
    ("list", "GET", {}),
    ("watch", "GET", {"watch": "1", "timeoutSeconds": "1"}),
    ("create", "POST", {}),
    ("deletecollection", "DELETE", {}),
]
_OBJECT_VERBS = [("get", "GET"), ("update", "PUT"), ("patch", "PATCH"), ("delete", "DELETE")]
_SUBRESOURCE_VERBS = [("get", "GET"), ("create", "POST"), ("update", "PUT"), ("patch", "PATCH")]
_BODY_TYPE = {"POST": "application/json", "PUT": "application/json"}
_BODY_TYPE["PATCH"] = "application/merge-patch+json"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    with (
        run_sandbox_in_thread(demo_cluster()) as sandbox,
        httpx.Client(base_url=sandbox.url, timeout=10) as http,
    ):
        yield sandbox, http


def answered(http: httpx.Client, method: str, path: str, query: dict[str, str]) -> bool:
    """Whether the server has a route for this request (see the module docstring)."""
    content = b"{}" if method in _BODY_TYPE else None
    headers = {"Content-Type": _BODY_TYPE[method]} if method in _BODY_TYPE else {}
    # Streamed: a watch or a log answers a body that may stay open; only its status counts.
    with http.stream(method, path, params=query, content=content, headers=headers) as answer:
        if answer.status_code == 405:
            return False
        if answer.status_code != 404:
            return True
        body = answer.read()
    message: Any = httpx.Response(404, content=body).json().get("message")
    return bool(message != _UNKNOWN_PATH)


def base(group_version: str) -> str:
    return "/api/v1" if group_version == "v1" else f"/apis/{group_version}"


def row(group_version: str, name: str) -> Resource | None:
    return next((r for r in SERVED if r.group_version == group_version and r.name == name), None)


def test_every_route_is_in_discovery_and_every_entry_is_served(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    pod = ready_web_pod(sandbox.cluster)
    listed: set[tuple[str, ...]] = set()
    answers: set[tuple[str, ...]] = set()
    for group_version in _GROUP_VERSIONS:
        for name in _RESOURCES:
            entry = row(group_version, name)
            if entry is not None:
                listed |= {(group_version, name, "", verb) for verb in entry.verbs}
                listed |= {
                    (group_version, name, s.name, verb)
                    for s in entry.subresources
                    for verb in s.verbs
                }
            # Each resource at its canonical place: in a namespace unless the table says it is
            # cluster-scoped (a resource not in the table is probed both ways).
            scopes = [entry.namespaced] if entry is not None else [True, False]
            for namespaced in scopes:
                collection = base(group_version) + ("/namespaces/demo" if namespaced else "")
                collection += f"/{name}"
                item = f"{collection}/{pod if name == 'pods' else 'probe'}"
                for verb, method, query in _COLLECTION_VERBS:
                    if answered(http, method, collection, query):
                        answers.add((group_version, name, "", verb))
                for verb, method in _OBJECT_VERBS:
                    if answered(http, method, item, {}):
                        answers.add((group_version, name, "", verb))
                # Subresources of the resources served (of others, none is plausible).
                for sub in _SUBRESOURCES if name in _TABLE_NAMES else ():
                    for verb, method in _SUBRESOURCE_VERBS:
                        if answered(http, method, f"{item}/{sub}", {}):
                            answers.add((group_version, name, sub, verb))
    assert sorted(answers - listed) == [], "served but missing from discovery"
    assert sorted(listed - answers) == [], "in discovery but not served"


def test_legacy_and_aggregated_discovery_list_the_same(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    _, http = served
    legacy: set[tuple[str, str, tuple[str, ...]]] = set()
    versions = ["v1"] + [
        g["versions"][0]["groupVersion"] for g in http.get("/apis").json()["groups"]
    ]
    for group_version in versions:
        resources = http.get(base(group_version)).json()["resources"]
        legacy |= {(group_version, r["name"], tuple(r["verbs"])) for r in resources}
    aggregated: set[tuple[str, str, tuple[str, ...]]] = set()
    for path in ("/api", "/apis"):
        answer = http.get(path, headers={"Accept": AGGREGATED})
        assert answer.headers["content-type"] == AGGREGATED
        for item in answer.json()["items"]:
            group = item["metadata"].get("name", "")
            for version in item["versions"]:
                group_version = f"{group}/{version['version']}" if group else version["version"]
                for r in version["resources"]:
                    aggregated.add((group_version, r["resource"], tuple(r["verbs"])))
                    aggregated |= {
                        (group_version, f"{r['resource']}/{s['subresource']}", tuple(s["verbs"]))
                        for s in r.get("subresources", [])
                    }
    assert legacy == aggregated
    assert {(gv, name) for gv, name, _ in legacy} >= {
        ("v1", "pods/portforward"),
        ("coordination.k8s.io/v1", "leases"),
        ("authorization.k8s.io/v1", "selfsubjectaccessreviews"),
    }


def test_an_unserved_group_version_is_not_found(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    answer = http.get("/apis/batch/v1")
    assert (answer.status_code, answer.json()["message"]) == (404, _UNKNOWN_PATH)
