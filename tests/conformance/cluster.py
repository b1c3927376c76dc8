"""The cluster the conformance suite runs against: one namespace per scenario."""

from __future__ import annotations

from kuber_exec_sandbox import Cluster, OwnerRef, PodSpec, demo_cluster

WORKSPACE_UID = "demo-uid"


def conformance_cluster() -> Cluster:
    """The demo cluster plus the targeting scenarios of the seed's ``resolveTarget``."""
    cluster = demo_cluster()
    # An image without a shell (distroless): the cleanup's prologue cannot run there.
    cluster.add_deployment(
        "demo", "distroless", workspace_uid=WORKSPACE_UID, pods=[PodSpec(shell=False)]
    )
    # Ranking: ready first, then by name; foreign pods with matching labels sort first by name
    # and are ready, so choosing one would show.
    ranked = cluster.add_deployment(
        "rank",
        "ranked",
        workspace_uid=WORKSPACE_UID,
        pods=[
            PodSpec(name="b-ready", ready=True),
            PodSpec(name="a-not-ready", ready=False),
            PodSpec(name="c-ready", ready=True),
            PodSpec(name="0-terminating", ready=True, terminating=True),
            PodSpec(name="0-pending", ready=True, phase="Pending", running=False),
        ],
    )
    cluster.add_pod("rank", "0-bare", labels=dict(ranked.match_labels), spec=PodSpec(ready=True))
    foreign = cluster.add_deployment(
        "rank", "foreign", workspace_uid=WORKSPACE_UID, pods=[], match_labels={"app": "foreign"}
    )
    cluster.add_replica_set(
        "rank",
        "0-foreign-rs",
        owner=foreign.owner_ref(),
        labels=dict(ranked.match_labels),
        pods=[PodSpec(name="0-foreign", ready=True)],
    )
    # A ReplicaSet whose controller is not a Deployment at all.
    cluster.add_replica_set(
        "rank",
        "0-orphan-rs",
        owner=OwnerRef(api_version="v1", kind="Other", name="x", uid="x-uid"),
        labels=dict(ranked.match_labels),
        pods=[PodSpec(name="0-orphan", ready=True)],
    )
    cluster.add_deployment(
        "targets", "pending", workspace_uid=WORKSPACE_UID, pods=[PodSpec(phase="Pending")]
    )
    cluster.add_deployment("targets", "empty", workspace_uid=WORKSPACE_UID, pods=[])
    cluster.add_deployment(
        "targets", "noselector", workspace_uid=WORKSPACE_UID, match_labels={}, pods=[]
    )
    cluster.add_deployment(
        "targets", "nocontainer", workspace_uid=WORKSPACE_UID, containers=(), pods=[]
    )
    cluster.add_deployment(
        "targets", "unmanaged", workspace_uid=WORKSPACE_UID, managed_by=None, pods=[]
    )
    cluster.add_deployment(
        "targets",
        "multi",
        workspace_uid=WORKSPACE_UID,
        containers=("app", "sidecar"),
        pods=[PodSpec(ready=True)],
    )
    cluster.add_deployment(
        "targets",
        "stopped",
        workspace_uid=WORKSPACE_UID,
        pods=[PodSpec(ready=False, running=False)],
    )
    cluster.add_deployment(
        "targets",
        "expressions",
        workspace_uid=WORKSPACE_UID,
        match_labels={"app": "expressions"},
        match_expressions=[{"key": "tier", "operator": "NotIn", "values": ["db"]}],
        pods=[PodSpec(name="expressions-web", labels={"tier": "web"})],
    )
    return cluster
