"""The seed's ``resolveTarget``: ownership checks, pod filtering and ranking, as data tables and
as properties over generated deployments with pods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    EXEC_MANAGED_BY_LABEL,
    EXEC_MANAGED_BY_VALUE,
    EXEC_WORKSPACE_UID_LABEL,
    Deployment,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecRequest,
    FetchDeployment,
    FetchPods,
    LabelSelector,
    Pod,
    PodContainer,
    ResolvedTarget,
    TargetResolution,
    TargetResolved,
    Workspace,
)
from kuber_exec_core import testing as kt
from kuber_exec_core.kube import (
    ApiGet,
    DeploymentLookup,
    PodListing,
    TargetRefusal,
    check_deployment,
    choose_pod,
    rank_pods,
)

WS = Workspace(project="team-a", uid="ws-uid")
REQ = ExecRequest(workspace=WS, deployment="web", command=("true",))
OWNED = {EXEC_MANAGED_BY_LABEL: EXEC_MANAGED_BY_VALUE, EXEC_WORKSPACE_UID_LABEL: "ws-uid"}
SELECTOR = LabelSelector.from_labels({"app": "web"})


def deployment(**changes: Any) -> Deployment:
    base = Deployment(
        name="web", uid="dep-uid", labels=OWNED, selector=SELECTOR, containers=("app", "sidecar")
    )
    return attrs.evolve(base, **changes)


def pod(
    name: str,
    *,
    uid: str | None = None,
    owner: str | None = "dep-uid",
    phase: str | None = "Running",
    deleting: str | None = None,
    containers: Sequence[tuple[str, bool, bool | None]] = (("app", True, True),),
) -> Pod:
    return Pod(
        name=name,
        uid=f"uid-{name}" if uid is None else uid,
        deployment_uid=owner,
        phase=phase,
        deletion_timestamp=deleting,
        containers=tuple(PodContainer(name=n, running=r, ready=rd) for n, r, rd in containers),
    )


# -- checks 1-4: the Deployment ---------------------------------------------------------------

NOT_FOUND = (ExecErrorCode.TARGET_NOT_FOUND, "Deployment web was not found")
FORBIDDEN = (ExecErrorCode.TARGET_FORBIDDEN, "Deployment web is not owned by this workspace")
NO_SELECTOR = (ExecErrorCode.TARGET_NOT_READY, "Deployment web has no usable pod selector")
NO_CONTAINER = (ExecErrorCode.TARGET_NOT_READY, "Deployment web has no container")

DEPLOYMENT_CASES: list[tuple[str, ExecRequest, Deployment | None, object]] = [
    ("missing", REQ, None, NOT_FOUND),
    ("other name", REQ, deployment(name="web2"), NOT_FOUND),
    ("no labels", REQ, deployment(labels={}), FORBIDDEN),
    (
        "managed by other",
        REQ,
        deployment(labels={**OWNED, EXEC_MANAGED_BY_LABEL: "helm"}),
        FORBIDDEN,
    ),
    (
        "other workspace",
        REQ,
        deployment(labels={**OWNED, EXEC_WORKSPACE_UID_LABEL: "x"}),
        FORBIDDEN,
    ),
    ("uid label only", REQ, deployment(labels={EXEC_WORKSPACE_UID_LABEL: "ws-uid"}), FORBIDDEN),
    ("no uid", REQ, deployment(uid=""), NO_SELECTOR),
    ("empty selector", REQ, deployment(selector=LabelSelector()), NO_SELECTOR),
    ("no uid and not owned: forbidden first", REQ, deployment(uid="", labels={}), FORBIDDEN),
    ("missing beats everything", REQ, None, NOT_FOUND),
    ("no containers", REQ, deployment(containers=()), NO_CONTAINER),
    ("first container by default", REQ, deployment(), "app"),
    ("named container", attrs.evolve(REQ, container="other"), deployment(), "other"),
    (
        "named container needs no template",
        attrs.evolve(REQ, container="other"),
        deployment(containers=()),
        "other",
    ),
    (
        "selector before container",
        REQ,
        deployment(selector=LabelSelector(), containers=()),
        NO_SELECTOR,
    ),
]


@pytest.mark.parametrize(
    ("case", "req", "dep", "expected"), DEPLOYMENT_CASES, ids=[c[0] for c in DEPLOYMENT_CASES]
)
def test_check_deployment(
    case: str, req: ExecRequest, dep: Deployment | None, expected: object
) -> None:
    if isinstance(expected, str):
        assert check_deployment(req, dep) == expected
        return
    with pytest.raises(ExecError) as caught:
        check_deployment(req, dep)
    assert (caught.value.code, caught.value.message) == expected


# -- check 5: the pods --------------------------------------------------------------------------

NO_POD = (ExecErrorCode.TARGET_NOT_READY, "Deployment web has no running owned pod/container")
NO_NAMED = (
    ExecErrorCode.TARGET_NOT_FOUND,
    "Container app was not found or running in a deployment pod",
)
NAMED = attrs.evolve(REQ, container="app")

POD_CASES: list[tuple[str, ExecRequest, list[Pod], object]] = [
    ("no pods", REQ, [], NO_POD),
    ("no pods, named", NAMED, [], NO_POD),
    ("one pod", REQ, [pod("a")], "a"),
    ("pending", REQ, [pod("a", phase="Pending")], NO_POD),
    ("no phase", REQ, [pod("a", phase=None)], NO_POD),
    ("lowercase phase", REQ, [pod("a", phase="running")], NO_POD),
    ("terminating", REQ, [pod("a", deleting="2024-01-01T00:00:00Z")], NO_POD),
    ("foreign", REQ, [pod("a", owner="other-uid")], NO_POD),
    ("bare", REQ, [pod("a", owner=None)], NO_POD),
    ("no name", REQ, [pod("", uid="u")], NO_POD),
    ("no uid", REQ, [pod("a", uid="")], NO_POD),
    ("container missing", REQ, [pod("a", containers=[("sidecar", True, True)])], NO_POD),
    ("container not running", REQ, [pod("a", containers=[("app", False, True)])], NO_POD),
    # Named container: an owned running pod exists, so "not found", not "not ready".
    ("named, container missing", NAMED, [pod("a", containers=[])], NO_NAMED),
    (
        "named, container not running",
        NAMED,
        [pod("a", containers=[("app", False, None)])],
        NO_NAMED,
    ),
    ("named, only foreign", NAMED, [pod("a", owner="x", containers=[])], NO_POD),
    ("named, only terminating", NAMED, [pod("a", deleting="t", containers=[])], NO_POD),
    ("named, only pending", NAMED, [pod("a", phase="Pending", containers=[])], NO_POD),
    ("named, no-name pod counts as owned", NAMED, [pod("", uid="u")], NO_NAMED),
    # Ranking: ready first, then name.
    (
        "ready beats name",
        REQ,
        [pod("a", containers=[("app", True, False)]), pod("b")],
        "b",
    ),
    ("name breaks ties", REQ, [pod("c"), pod("b"), pod("d")], "b"),
    (
        "ready None is not ready",
        REQ,
        [pod("a", containers=[("app", True, None)]), pod("z")],
        "z",
    ),
    (
        "not ready candidates by name",
        REQ,
        [pod("b", containers=[("app", True, False)]), pod("a", containers=[("app", True, None)])],
        "a",
    ),
    (
        "readiness of the requested container only",
        REQ,
        [
            pod("a", containers=[("app", True, False), ("sidecar", True, True)]),
            pod("b", containers=[("app", True, True), ("sidecar", True, False)]),
        ],
        "b",
    ),
    (
        "first container of that name decides readiness",
        REQ,
        [pod("a", containers=[("app", True, False), ("app", True, True)]), pod("b")],
        "b",
    ),
    (
        "any running container of that name qualifies",
        REQ,
        [pod("a", containers=[("app", False, False), ("app", True, False)])],
        "a",
    ),
    ("code-point name order", REQ, [pod("a.b"), pod("a-b"), pod("a0")], "a-b"),
    (
        "skips ineligible better-named pods",
        REQ,
        [pod("a", owner="x"), pod("b", phase="Failed"), pod("c", deleting="t"), pod("d")],
        "d",
    ),
]


@pytest.mark.parametrize(
    ("case", "req", "pods", "expected"), POD_CASES, ids=[c[0] for c in POD_CASES]
)
def test_choose_pod(case: str, req: ExecRequest, pods: list[Pod], expected: object) -> None:
    dep = deployment()
    if isinstance(expected, str):
        target = choose_pod(req, dep, "app", pods)
        chosen = next(p for p in pods if p.name == expected)
        assert target == ResolvedTarget(
            namespace="team-a",
            deployment="web",
            deployment_uid="dep-uid",
            pod=expected,
            pod_uid=chosen.uid,
            container="app",
        )
        return
    with pytest.raises(ExecError) as caught:
        choose_pod(req, dep, "app", pods)
    assert (caught.value.code, caught.value.message) == expected


def test_rank_pods_orders_every_candidate() -> None:
    pods = [
        pod("d", containers=[("app", True, False)]),
        pod("c"),
        pod("x", owner=None),
        pod("a", containers=[("app", True, None)]),
        pod("b"),
    ]
    assert [p.name for p in rank_pods(pods, deployment(), "app")] == ["b", "c", "a", "d"]


# -- the whole plan -----------------------------------------------------------------------------


def resolve(scenario: kt.DeploymentScenario) -> tuple[ResolvedTarget, list[ApiGet]]:
    """Drive TargetResolution with the REST plans against the scenario's fake API server."""
    gets: list[ApiGet] = []
    plan = TargetResolution(scenario.request, ExecLimits())
    while True:
        step = plan.next_event()
        match step:
            case FetchDeployment(namespace=ns, name=name):
                assert (ns, name) == (scenario.namespace, scenario.request.deployment)
                lookup = DeploymentLookup(ns, name)
                while (get := lookup.next_event()) is not None:
                    gets.append(get)
                    lookup.response_received(scenario.respond(get))
                plan.deployment_received(lookup.result())
            case FetchPods(namespace=ns, selector=selector):
                listing = PodListing(ns, selector)
                while (get := listing.next_event()) is not None:
                    gets.append(get)
                    listing.response_received(scenario.respond(get))
                plan.pods_received(listing.result())
            case TargetResolved(target=target):
                return target, gets


@given(kt.deployment_scenarios())
def test_resolution_matches_the_seed(scenario: kt.DeploymentScenario) -> None:
    if scenario.expected_refusal is not None:
        with pytest.raises(ExecError) as caught:
            resolve(scenario)
        assert caught.value.code == scenario.expected_refusal.code
        assert TargetRefusal.of(caught.value, scenario.request) is scenario.expected_refusal
        return
    target, gets = resolve(scenario)
    assert target == scenario.expected_target
    # Every pod page was read, and no ReplicaSet twice.
    rs_gets = [g.path for g in gets if "/replicasets/" in g.path]
    assert len(rs_gets) == len(set(rs_gets))


@given(kt.deployment_scenarios(issues=False))
def test_chosen_pod_is_eligible_and_best(scenario: kt.DeploymentScenario) -> None:
    if kt.PodRole.CANDIDATE not in scenario.roles:
        with pytest.raises(ExecError) as caught:
            resolve(scenario)
        assert caught.value.code in (ExecErrorCode.TARGET_NOT_READY, ExecErrorCode.TARGET_NOT_FOUND)
        return
    target, _ = resolve(scenario)
    index = next(i for i, p in enumerate(scenario.pods) if p["metadata"]["name"] == target.pod)
    chosen = scenario.pods[index]
    # Running, not terminating, owned through the ReplicaSet chain, container running.
    assert scenario.roles[index] is kt.PodRole.CANDIDATE
    assert chosen["status"]["phase"] == "Running"
    assert "deletionTimestamp" not in chosen["metadata"]
    (owner,) = chosen["metadata"]["ownerReferences"]
    assert owner["controller"] is True
    assert owner["kind"] == "ReplicaSet"
    rs = scenario.replica_sets[owner["name"]]
    assert rs["metadata"]["uid"] == owner["uid"]
    (rs_owner,) = rs["metadata"]["ownerReferences"]
    assert scenario.deployment is not None
    assert rs_owner["uid"] == scenario.deployment["metadata"]["uid"] == target.deployment_uid
    statuses = {s["name"]: s for s in chosen["status"]["containerStatuses"]}
    assert "running" in statuses[target.container]["state"]
    # Ready whenever any candidate is ready.
    if any(
        r and role is kt.PodRole.CANDIDATE
        for r, role in zip(scenario.ready, scenario.roles, strict=True)
    ):
        assert scenario.ready[index]


@given(
    kt.deployment_scenarios(
        issues=False,
        roles=[
            kt.PodRole.FOREIGN,
            kt.PodRole.BARE,
            kt.PodRole.OTHER_CONTROLLER,
            kt.PodRole.STALE_OWNER,
            kt.PodRole.REPLICA_SET_GONE,
        ],
    )
)
def test_foreign_and_bare_pods_are_never_chosen(scenario: kt.DeploymentScenario) -> None:
    with pytest.raises(ExecError) as caught:
        resolve(scenario)
    # Not owned pods do not even count as "an owned running pod" for the named-container error.
    assert caught.value.code is ExecErrorCode.TARGET_NOT_READY


# -- TargetResolution's own order ----------------------------------------------------------------


def test_resolution_validates_before_any_step() -> None:
    with pytest.raises(ExecError) as caught:
        TargetResolution(attrs.evolve(REQ, deployment="Bad"), ExecLimits())
    assert caught.value.code is ExecErrorCode.INVALID


def test_resolution_steps_in_order() -> None:
    plan = TargetResolution(REQ, ExecLimits())
    assert plan.next_event() == FetchDeployment(namespace="team-a", name="web")
    assert plan.next_event() == FetchDeployment(namespace="team-a", name="web")  # idempotent
    with pytest.raises(ExecError, match="out of order"):
        plan.pods_received([])
    plan.deployment_received(deployment())
    assert plan.next_event() == FetchPods(namespace="team-a", selector=SELECTOR)
    with pytest.raises(ExecError, match="out of order"):
        plan.deployment_received(deployment())
    plan.pods_received([pod("a")])
    step = plan.next_event()
    assert isinstance(step, TargetResolved)
    assert step.target.pod == "a"
    with pytest.raises(ExecError, match="out of order"):
        plan.pods_received([pod("b")])


def test_resolution_deployment_error_stops_the_plan() -> None:
    plan = TargetResolution(REQ, ExecLimits())
    with pytest.raises(ExecError) as caught:
        plan.deployment_received(deployment(labels={}))
    assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN
    # It never asks for pods of a Deployment it refused.
    assert isinstance(plan.next_event(), FetchDeployment)


def test_resolution_uses_the_named_container() -> None:
    plan = TargetResolution(attrs.evolve(REQ, container="sidecar"), ExecLimits())
    plan.deployment_received(deployment())
    plan.pods_received([pod("a", containers=[("app", True, True), ("sidecar", True, True)])])
    step = plan.next_event()
    assert isinstance(step, TargetResolved)
    assert step.target.container == "sidecar"


@given(st.data())
def test_scenario_kit_round_trip(data: st.DataObject) -> None:
    # The kit's own promise: every role it was asked for is what it generates.
    roles = data.draw(st.lists(st.sampled_from(kt.PodRole), min_size=1, unique=True))
    scenario = data.draw(kt.deployment_scenarios(issues=False, roles=roles))
    assert set(scenario.roles) <= set(roles)
    assert len(scenario.pods) == len(scenario.roles) == len(scenario.ready)
