"""Record what the real apiserver answers to the reads resolution makes, as shapes.

With ``KUBER_REALCLUSTER_RECORD=1`` the answers are written to the release's fixture
(``answers.fixture``: what test_sandbox_shape.py compares the sandbox with); otherwise the live
answers must equal the committed fixture, so a fixture that no longer describes the real server
fails here."""

from __future__ import annotations

import json
import os
from typing import Any

from . import answers
from .kube import Cluster, RestClient, workload_manifests


def _normal_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: ("HASH" if k == "pod-template-hash" else v) for k, v in sorted(labels.items())}


def _tier_apps(cluster: Cluster) -> set[str]:
    """The ``app`` labels of the tier's own workloads in the main namespace."""
    apps = set()
    for manifest in workload_manifests(cluster):
        if manifest.get("kind") != "Deployment":
            continue
        if manifest["metadata"].get("namespace", cluster.main_ns) != cluster.main_ns:
            continue
        template = manifest["spec"]["template"]["metadata"].get("labels") or {}
        if "app" in template:
            apps.add(template["app"])
    return apps


def record(cluster: Cluster) -> dict[str, Any]:
    admin = RestClient(cluster, "admin")
    stranger = RestClient(cluster, "stranger")
    ns = cluster.main_ns
    out: dict[str, Any] = {"server": cluster.info["version"]}

    code, body = admin.get(f"/apis/apps/v1/namespaces/{ns}/deployments/shell")
    assert code == 200
    out["deployment"] = answers.shape("Deployment", body)
    # Resolution LISTs pods by the selector, then GETs the ReplicaSet each pod's controller
    # reference names.
    code, body = admin.get(
        f"/api/v1/namespaces/{ns}/pods", labelSelector=answers.SELECTOR, limit="500"
    )
    assert code == 200
    out["pods"] = answers.shape("PodList", body)
    shell_pod = next(p for p in body["items"] if p["metadata"]["name"].startswith("shell-"))
    (owner,) = [o for o in shell_pod["metadata"]["ownerReferences"] if o.get("controller")]
    code, body = admin.get(f"/apis/apps/v1/namespaces/{ns}/replicasets/{owner['name']}")
    assert code == 200
    out["replicaset"] = answers.shape("ReplicaSet", body)

    errors: dict[str, Any] = {}
    for name, client, path in [
        ("deployment_not_found", admin, f"/apis/apps/v1/namespaces/{ns}/deployments/nope"),
        ("pod_not_found", admin, f"/api/v1/namespaces/{ns}/pods/nope"),
        ("deployment_forbidden", stranger, f"/apis/apps/v1/namespaces/{ns}/deployments/shell"),
        ("pods_list_forbidden", stranger, f"/api/v1/namespaces/{ns}/pods"),
    ]:
        code, body = client.get(path)
        errors[name] = {"http": code, "status": answers.status_shape(body), "body": body}
    for selector in answers.BAD_SELECTORS:
        code, body = admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)
        errors[f"bad_selector {selector}"] = {
            "http": code,
            "status": answers.status_shape(body),
            "body": body,
        }
    out["errors"] = errors

    # Set-based selector semantics: the distinct label sets of the namespace's pods, and which
    # of them each selector matches.
    # Only the tier's own workloads count: other tests add theirs to the namespace (test_debug's
    # shell-less Deployment), and which ran before this one must not change the answers.
    code, body = admin.get(f"/api/v1/namespaces/{ns}/pods")
    label_sets: list[dict[str, str]] = []
    for pod in body["items"]:
        labels = _normal_labels(pod["metadata"].get("labels") or {})
        if labels not in label_sets and labels.get("app") in _tier_apps(cluster):
            label_sets.append(labels)
    label_sets.sort(key=lambda d: json.dumps(d, sort_keys=True))
    matches: dict[str, list[int]] = {}
    for selector in answers.SELECTOR_QUERIES:
        code, body = admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)
        assert code == 200, body
        found = {
            json.dumps(_normal_labels(p["metadata"].get("labels") or {})) for p in body["items"]
        }
        matches[selector] = [
            i for i, labels in enumerate(label_sets) if json.dumps(labels) in found
        ]
    out["selectors"] = {"label_sets": label_sets, "matches": matches}
    return out


def test_the_recorded_answers_describe_this_server(
    cluster: Cluster, workloads: Any, server_minor: int
) -> None:
    live = record(cluster)
    release = f"1.{server_minor}"
    if os.environ.get("KUBER_REALCLUSTER_RECORD") == "1":
        text = json.dumps(live, indent=2, sort_keys=True) + "\n"
        answers.fixture(release).write_text(text)
    recorded = answers.load(release)
    # Messages carry names and uids of this run: compare everything but the raw bodies.
    for entry in (*live["errors"].values(), *recorded["errors"].values()):
        entry.pop("body")
    assert live == recorded
