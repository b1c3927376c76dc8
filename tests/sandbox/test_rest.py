"""The sandbox's REST API over real HTTP: discovery, objects, lists, selectors, errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kuber_exec_core import ExecRequest, Workspace
from kuber_exec_core.kube import (
    ApiResponse,
    DeploymentLookup,
    PodListing,
    check_deployment,
    choose_pod,
    parse_deployment,
    parse_pod,
    parse_replica_set,
)
from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, demo_cluster, run_sandbox_in_thread
from support.sandbox import ready_web_pod

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    with (
        run_sandbox_in_thread(demo_cluster()) as sandbox,
        httpx.Client(base_url=sandbox.url) as http,
    ):
        yield sandbox, http


def get(http: httpx.Client, path: str, **params: Any) -> Any:
    response = http.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_version_and_legacy_discovery(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    assert get(http, "/version")["minor"] == "32"
    assert get(http, "/version/") == get(http, "/version")  # kr8s's spelling
    assert get(http, "/api")["versions"] == ["v1"]
    groups = get(http, "/apis")["groups"]
    assert [g["name"] for g in groups] == ["apps", "authorization.k8s.io", "coordination.k8s.io"]
    core = {r["name"] for r in get(http, "/api/v1")["resources"]}
    assert {"pods", "pods/exec", "pods/portforward", "pods/log", "namespaces"} <= core
    apps = {r["name"]: r for r in get(http, "/apis/apps/v1")["resources"]}
    assert apps["deployments"]["shortNames"] == ["deploy"]
    leases = get(http, "/apis/coordination.k8s.io/v1")["resources"]
    assert [(r["name"], r["kind"]) for r in leases] == [("leases", "Lease")]


@pytest.mark.parametrize("path", ["/api", "/apis"])
def test_aggregated_discovery(served: tuple[Sandbox, httpx.Client], path: str) -> None:
    _, http = served
    # What kubectl 1.32 sends.
    accept = ",".join(
        [
            AGGREGATED,
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            "application/json",
        ]
    )
    response = http.get(path, headers={"Accept": accept})
    assert response.headers["content-type"] == AGGREGATED
    body = response.json()
    assert body["kind"] == "APIGroupDiscoveryList"
    resources = {
        r["resource"] for item in body["items"] for v in item["versions"] for r in v["resources"]
    }
    assert resources & {"pods", "deployments"}


def test_objects_parse_with_the_core_and_resolve_the_ready_pod(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    # Drive the core's own REST plans against the sandbox: the JSON must be what they expect.
    lookup = DeploymentLookup("demo", "web")
    while (request := lookup.next_event()) is not None:
        response = http.get(request.target)
        lookup.response_received(ApiResponse(status=response.status_code, body=response.content))
    deployment = lookup.result()
    assert deployment is not None
    exec_request = ExecRequest(
        workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=("true",)
    )
    container = check_deployment(exec_request, deployment)
    listing = PodListing("demo", deployment.selector)
    while (request := listing.next_event()) is not None:
        response = http.get(request.target)
        listing.response_received(ApiResponse(status=response.status_code, body=response.content))
    target = choose_pod(exec_request, deployment, container, listing.result())
    assert target.pod == ready_web_pod(sandbox.cluster)
    assert target.deployment_uid == sandbox.cluster.deployment("demo", "web").uid  # type: ignore[union-attr]


def test_object_shapes(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    pod_name = ready_web_pod(sandbox.cluster)
    pod = get(http, f"/api/v1/namespaces/demo/pods/{pod_name}")
    assert (pod["kind"], pod["apiVersion"]) == ("Pod", "v1")
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner["controller"] is True
    assert owner["kind"] == "ReplicaSet"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]
    record = parse_pod(pod)
    assert record.phase == "Running"
    assert record.containers[0].ready
    rs = parse_replica_set(get(http, f"/apis/apps/v1/namespaces/demo/replicasets/{owner['name']}"))
    assert rs.uid == owner["uid"]
    deployment = parse_deployment(get(http, "/apis/apps/v1/namespaces/demo/deployments/web"))
    assert rs.controller is not None
    assert rs.controller.uid == deployment.uid
    assert deployment.labels["kuber.dev/workspace-uid"] == "demo-uid"


@pytest.mark.parametrize(
    ("path", "code", "reason", "message"),
    [
        ("/api/v1/namespaces/demo/pods/nope", 404, "NotFound", 'pods "nope" not found'),
        (
            "/apis/apps/v1/namespaces/demo/deployments/nope",
            404,
            "NotFound",
            'deployments.apps "nope" not found',
        ),
        ("/api/v1/namespaces/nope", 404, "NotFound", 'namespaces "nope" not found'),
        ("/no/such/path", 404, "NotFound", "the server could not find the requested resource"),
        ("/api/v1/namespaces/demo/pods?labelSelector=a+in+(", 400, "BadRequest", None),
        ("/api/v1/namespaces/demo/pods?limit=-1", 400, "BadRequest", None),
        (
            "/api/v1/namespaces/demo/pods?continue=%%%",
            400,
            "BadRequest",
            "continue key is not valid",
        ),
    ],
)
def test_errors_are_status_objects(
    served: tuple[Sandbox, httpx.Client], path: str, code: int, reason: str, message: str | None
) -> None:
    _, http = served
    response = http.get(path)
    assert response.status_code == code
    status = response.json()
    assert (status["kind"], status["status"], status["reason"], status["code"]) == (
        "Status",
        "Failure",
        reason,
        code,
    )
    if message is not None:
        assert status["message"] == message


def test_write_verbs_are_405(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    response = http.delete("/api/v1/namespaces/demo/pods/x")
    assert response.status_code == 405
    assert response.json()["reason"] == "MethodNotAllowed"


def test_listing_pages_with_continue(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    names: list[str] = []
    params: dict[str, Any] = {"limit": 1}
    while True:
        page = get(http, "/api/v1/namespaces/demo/pods", **params)
        assert len(page["items"]) <= 1
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        params = {"limit": 1, "continue": token}
    assert names == sorted(sandbox.cluster.namespaces["demo"].pods)


def test_foreign_objects_are_listed_but_not_owned() -> None:
    cluster = Cluster()
    mine = cluster.add_deployment("p", "web", workspace_uid="me", pods=[PodSpec(ready=True)])
    other = cluster.add_deployment("p", "other", workspace_uid="them", pods=[])
    bare = cluster.add_pod("p", "bare", labels={"app": "web"})
    old = cluster.add_replica_set(
        "p", "web-old", owner=other.owner_ref(), labels={"app": "web"}, pods=[PodSpec(name="old-1")]
    )
    with run_sandbox_in_thread(cluster) as sandbox, httpx.Client(base_url=sandbox.url) as http:
        listed = get(http, "/api/v1/namespaces/p/pods", labelSelector="app=web")["items"]
    names = {item["metadata"]["name"] for item in listed}
    assert {"bare", "old-1"} <= names
    assert {p.name for p in cluster.pods_of(mine)} | {"bare", "old-1"} == names
    assert bare.owner is None
    assert old.owner is not None
    assert old.owner.uid == other.uid
