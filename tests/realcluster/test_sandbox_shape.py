"""The sandbox answers the reads resolution makes in the shape the real apiserver does.

Runs in the main suite (no cluster needed): it compares the sandbox with what a real v1.20.2
apiserver answered, recorded in real_apiserver_answers.json by test_record.py (marked
``realcluster``), for the same kinds of objects: a Deployment whose selector has matchLabels and
matchExpressions, the ReplicaSets and pods of its selector, 404 Status bodies, ``labelSelector``
parsing and matching of set-based expressions, and the 400s of malformed selectors.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread

from . import answers

NS = "kx-target"
RECORDED = answers.load()


def sandbox_cluster() -> Cluster:
    cluster = Cluster()
    cluster.add_deployment(
        NS,
        "shell",
        workspace_uid="ws-main-0001",
        containers=("main",),
        match_labels={"app": "shell"},
        match_expressions=[{"key": "tier", "operator": "In", "values": ["exec", "debug"]}],
        pods=[PodSpec(labels={"tier": "exec"})],
    )
    # One Deployment per label set the real namespace's pods had, in another namespace.
    for i, labels in enumerate(RECORDED["selectors"]["label_sets"]):
        own = {k: v for k, v in labels.items() if k != "pod-template-hash"}
        cluster.add_deployment(
            "selectors", f"set{i}", workspace_uid=None, managed_by=None, match_labels=own
        )
    return cluster


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(sandbox_cluster()) as running:
        yield running


def get(sandbox: Sandbox, path: str, **query: str) -> tuple[int, Any]:
    url = sandbox.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


@pytest.mark.parametrize("release", [r for r in answers.RELEASES if r != "1.20"])
def test_every_release_recorded_answers_as_1_20_did(release: str) -> None:
    # The sandbox is compared with 1.20's answers below; every other recorded release gave the
    # same shapes, statuses and selector matches, so the comparison holds for it too.
    def comparable(recorded: dict[str, Any]) -> dict[str, Any]:
        errors = {
            name: {k: v for k, v in entry.items() if k != "body"}
            for name, entry in recorded["errors"].items()
        }
        return {**recorded, "server": None, "errors": errors}

    assert comparable(answers.load(release)) == comparable(RECORDED)


def test_the_objects_resolution_reads_have_the_real_shape(sandbox: Sandbox) -> None:
    code, deployment = get(sandbox, f"/apis/apps/v1/namespaces/{NS}/deployments/shell")
    assert code == 200
    assert answers.shape("Deployment", deployment) == RECORDED["deployment"]
    code, pods = get(sandbox, f"/api/v1/namespaces/{NS}/pods", labelSelector=answers.SELECTOR)
    assert code == 200
    assert answers.shape("PodList", pods) == RECORDED["pods"]
    (owner,) = [o for o in pods["items"][0]["metadata"]["ownerReferences"] if o.get("controller")]
    code, replicaset = get(sandbox, f"/apis/apps/v1/namespaces/{NS}/replicasets/{owner['name']}")
    assert code == 200
    assert answers.shape("ReplicaSet", replicaset) == RECORDED["replicaset"]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("deployment_not_found", f"/apis/apps/v1/namespaces/{NS}/deployments/nope"),
        ("pod_not_found", f"/api/v1/namespaces/{NS}/pods/nope"),
    ],
)
def test_not_found_status_bodies_are_the_real_ones(sandbox: Sandbox, name: str, path: str) -> None:
    real = RECORDED["errors"][name]
    code, body = get(sandbox, path)
    assert code == real["http"] == 404
    assert body == real["body"]


@pytest.mark.parametrize("name", ["deployment_forbidden", "pods_list_forbidden"])
def test_the_real_403_status_has_the_schema_the_sandbox_uses_for_its_errors(
    sandbox: Sandbox, name: str
) -> None:
    # The sandbox has no authorization (it never answers 403 on REST): check that the real 403
    # bodies, which clients quote, have the fields and nesting of the sandbox's Status bodies.
    real = RECORDED["errors"][name]
    assert real["http"] == 403
    code, body = get(sandbox, f"/apis/apps/v1/namespaces/{NS}/deployments/nope")
    assert code == 404
    ours = answers.status_shape(body)
    assert real["status"]["keys"] == ours["keys"]
    assert set(real["status"]["details_keys"]) <= {"name", "group", "kind"}
    assert {k: real["status"][k] for k in ("kind", "apiVersion", "status", "metadata")} == {
        k: ours[k] for k in ("kind", "apiVersion", "status", "metadata")
    }
    assert (real["status"]["reason"], real["status"]["code"]) == ("Forbidden", 403)


@pytest.mark.parametrize("selector", answers.SELECTOR_QUERIES)
def test_set_based_selectors_match_what_the_real_server_matches(
    sandbox: Sandbox, selector: str
) -> None:
    label_sets = RECORDED["selectors"]["label_sets"]
    code, body = get(sandbox, "/api/v1/namespaces/selectors/pods", labelSelector=selector)
    assert code == 200, body
    found = set()
    for pod in body["items"]:
        labels = {
            k: ("HASH" if k == "pod-template-hash" else v)
            for k, v in sorted(pod["metadata"]["labels"].items())
        }
        found.add(label_sets.index(labels))
    assert sorted(found) == RECORDED["selectors"]["matches"][selector]


@pytest.mark.parametrize("selector", answers.BAD_SELECTORS)
def test_malformed_selectors_are_a_400_bad_request(sandbox: Sandbox, selector: str) -> None:
    real = RECORDED["errors"][f"bad_selector {selector}"]
    code, body = get(sandbox, f"/api/v1/namespaces/{NS}/pods", labelSelector=selector)
    assert code == real["http"] == 400
    ours = answers.status_shape(body)
    for key in ("kind", "apiVersion", "status", "reason", "code", "metadata"):
        assert ours[key] == real["status"][key], key


@pytest.mark.parametrize("selector", answers.BAD_SELECTORS)
def test_malformed_selector_status_keys_are_the_real_ones(sandbox: Sandbox, selector: str) -> None:
    real = RECORDED["errors"][f"bad_selector {selector}"]
    _, body = get(sandbox, f"/api/v1/namespaces/{NS}/pods", labelSelector=selector)
    assert answers.status_shape(body)["keys"] == real["status"]["keys"]
