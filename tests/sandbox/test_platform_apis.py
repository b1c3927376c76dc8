"""The sandbox's Leases, access reviews and impersonation, over real HTTP, with the API server's
Status bodies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kuber_exec_sandbox import AccessRule, Sandbox, demo_cluster, run_sandbox_in_thread
from support.sandbox import ready_web_pod

LEASES = "/apis/coordination.k8s.io/v1/namespaces/platform/leases"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@pytest.fixture
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    with (
        run_sandbox_in_thread(demo_cluster()) as sandbox,
        httpx.Client(base_url=sandbox.url) as http,
    ):
        yield sandbox, http


def lease(name: str, holder: str, version: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if version is not None:
        metadata["resourceVersion"] = version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def test_lease_create_get_update_delete(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    created = http.post(LEASES, json=lease("acme-0", "replica-a"))
    assert created.status_code == 201, created.text
    stored = created.json()
    assert stored["metadata"]["namespace"] == "platform"
    version = stored["metadata"]["resourceVersion"]

    again = http.post(LEASES, json=lease("acme-0", "replica-b"))
    assert again.status_code == 409
    assert again.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'leases.coordination.k8s.io "acme-0" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "acme-0", "group": "coordination.k8s.io", "kind": "leases"},
        "code": 409,
    }

    assert http.get(f"{LEASES}/acme-0").json()["spec"]["holderIdentity"] == "replica-a"
    updated = http.put(f"{LEASES}/acme-0", json=lease("acme-0", "replica-b", version))
    assert updated.status_code == 200, updated.text
    assert updated.json()["metadata"]["resourceVersion"] != version
    stale = http.put(f"{LEASES}/acme-0", json=lease("acme-0", "replica-c", version))
    assert stale.status_code == 409
    assert stale.json()["reason"] == "Conflict"
    assert stale.json()["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "acme-0": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    assert sandbox.leases.holders("platform") == {"acme-0": "replica-b"}

    listed = http.get(LEASES).json()
    assert listed["kind"] == "LeaseList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["acme-0"]

    precondition = {"preconditions": {"resourceVersion": version}}
    refused = http.request("DELETE", f"{LEASES}/acme-0", json=precondition)
    assert refused.status_code == 409
    assert "does not match the ResourceVersion in record" in refused.json()["message"]
    deleted = http.delete(f"{LEASES}/acme-0")
    assert deleted.status_code == 200
    assert deleted.json()["status"] == "Success"
    missing = http.get(f"{LEASES}/acme-0")
    assert missing.status_code == 404
    assert missing.json()["message"] == 'leases.coordination.k8s.io "acme-0" not found'
    assert http.delete(f"{LEASES}/acme-0").status_code == 404


def test_lease_bodies_are_checked(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    assert http.post(LEASES, json={"kind": "Pod"}).status_code == 400
    assert http.post(LEASES, content=b"{not json").status_code == 400
    unnamed = http.post(LEASES, json={"kind": "Lease", "metadata": {}})
    assert unnamed.status_code == 422
    bad = lease("x", "h")
    bad["spec"]["leaseDurationSeconds"] = 0
    assert http.post(LEASES, json=bad).status_code == 422
    assert http.put(f"{LEASES}/other", json=lease("x", "h")).status_code == 400
    assert http.put(f"{LEASES}/x", json=lease("x", "h")).status_code == 404
    assert http.request("PATCH", f"{LEASES}/x").status_code == 405


def review(verb: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "resource": "pods",
                "subresource": "exec",
            }
        },
    }


def test_access_reviews_follow_the_policy(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    assert http.post(REVIEWS, json=review("create", "demo")).json()["status"]["allowed"]
    sandbox.access.enforce(
        [
            AccessRule(verbs=("impersonate",), resource="users", user="kuber-exec-sandbox"),
            AccessRule(verbs=("impersonate",), resource="groups", user="kuber-exec-sandbox"),
            AccessRule(verbs=("get", "create"), resource="pods", subresource="exec", user="alice"),
            AccessRule(
                verbs=("get",), resource="pods", subresource="exec", group="ops", namespace="demo"
            ),
        ]
    )
    answer = http.post(REVIEWS, json=review("create", "demo"))
    assert answer.status_code == 201
    assert answer.json()["status"] == {"allowed": False, "reason": ""}
    as_alice = http.post(
        REVIEWS, json=review("create", "other"), headers={"Impersonate-User": "alice"}
    )
    assert as_alice.json()["status"]["allowed"] is True
    as_ops = {"Impersonate-User": "bob", "Impersonate-Group": "ops"}
    assert http.post(REVIEWS, json=review("get", "demo"), headers=as_ops).json()["status"][
        "allowed"
    ]
    assert not http.post(REVIEWS, json=review("get", "prod"), headers=as_ops).json()["status"][
        "allowed"
    ]
    assert http.post(REVIEWS, json={"kind": "SelfSubjectAccessReview"}).status_code == 422
    assert http.get(REVIEWS).status_code == 405


def test_impersonation_needs_permission(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    sandbox.access.enforce([], caller="system:serviceaccount:platform:exec")
    refused = http.get("/api/v1/namespaces/demo/pods", headers={"Impersonate-User": "alice"})
    assert refused.status_code == 403
    assert refused.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'users "alice" is forbidden: User "system:serviceaccount:platform:exec" '
        'cannot impersonate resource "users" in API group "" at the cluster scope',
        "reason": "Forbidden",
        "details": {"name": "alice", "kind": "users"},
        "code": 403,
    }
    sandbox.access.allow(AccessRule(verbs=("impersonate",), resource="users"))
    assert (
        http.get("/api/v1/namespaces/demo/pods", headers={"Impersonate-User": "alice"}).status_code
        == 200
    )
    extra = {"Impersonate-User": "alice", "Impersonate-Extra-Team": "blue"}
    denied_extra = http.get("/api/v1/namespaces/demo/pods", headers=extra)
    assert denied_extra.status_code == 403
    assert 'cannot impersonate resource "userextras/team"' in denied_extra.json()["message"]
    no_user = http.get("/api/v1/namespaces/demo/pods", headers={"Impersonate-Group": "ops"})
    assert no_user.status_code == 400


def test_exec_is_authorized_for_the_impersonated_user(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    pod = ready_web_pod(sandbox.cluster)
    sandbox.access.enforce([AccessRule(verbs=("impersonate",), resource="users")])
    upgrade = {
        "Impersonate-User": "mallory",
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Protocol": "v5.channel.k8s.io",
    }
    path = f"/api/v1/namespaces/demo/pods/{pod}/exec?command=true&stdout=1"
    denied = http.get(path, headers=upgrade)
    assert denied.status_code == 403
    # No rule at all: `get` (the upgrade's own verb, the filter's check) is refused first.
    assert denied.json()["message"] == (
        f'pods "{pod}" is forbidden: User "mallory" cannot get resource "pods/exec" in API '
        'group "" in the namespace "demo"'
    )
    assert denied.json()["details"] == {"name": pod, "kind": "pods"}
    assert sandbox.access.exec_users == []
