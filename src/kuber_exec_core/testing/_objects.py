"""The Kubernetes API's objects: Deployments, ReplicaSets and Pods, and whole Deployment
scenarios with the seed's answer, which can also answer the REST plans' GETs."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st

from .._errors import ExecErrorCode
from .._kube_api import ApiGet, ApiResponse
from .._request import ExecRequest
from .._rules import TargetRefusal
from .._target import ResolvedTarget
from ._names import dns_labels, dns_subdomains, label_maps
from ._requests import valid_exec_requests

#: The ownership labels the seed checks (spelled out here rather than imported).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
WORKSPACE_UID_LABEL = "kuber.dev/workspace-uid"


# -- API objects -----------------------------------------------------------------------------------


def _owner(kind: str, name: str, uid: str, *, controller: bool = True) -> dict[str, Any]:
    api_version = "apps/v1" if kind in ("ReplicaSet", "Deployment", "StatefulSet") else "v1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def deployment_object(
    *,
    namespace: str,
    name: str,
    uid: str,
    labels: Mapping[str, str],
    match_labels: Mapping[str, str],
    containers: Sequence[str],
    match_expressions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """An ``apps/v1`` Deployment as the API server returns it (the fields targeting reads, and
    some it ignores)."""
    selector: dict[str, Any] = {"matchLabels": dict(match_labels)}
    if match_expressions:
        selector["matchExpressions"] = [dict(e) for e in match_expressions]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if uid:
        metadata["uid"] = uid
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "selector": selector,
            "template": {
                "metadata": {"labels": dict(match_labels)},
                "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
            },
        },
        "status": {"replicas": 1},
    }


def replica_set_object(
    *, namespace: str, name: str, uid: str, owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    """An ``apps/v1`` ReplicaSet with ``owner`` (an ownerReferences entry) if given."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata}


def pod_object(
    *,
    namespace: str,
    name: str,
    uid: str,
    labels: Mapping[str, str],
    owners: Sequence[Mapping[str, Any]] = (),
    phase: str | None = "Running",
    deletion_timestamp: str | None = None,
    containers: Sequence[tuple[str, str, bool | None]] = (),
) -> dict[str, Any]:
    """A ``v1`` Pod; ``containers`` are ``(name, state, ready)`` with state ``running``,
    ``waiting``, ``terminated`` or ``none`` (no status entry), ``ready`` ``None`` for absent."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    metadata["labels"] = dict(labels)
    if owners:
        metadata["ownerReferences"] = [dict(o) for o in owners]
    if deletion_timestamp is not None:
        metadata["deletionTimestamp"] = deletion_timestamp
    statuses = []
    for container, state, ready in containers:
        if state == "none":
            continue
        details: dict[str, dict[str, Any]] = {
            "running": {"startedAt": "2024-01-01T00:00:00Z"},
            "waiting": {"reason": "CrashLoopBackOff"},
            "terminated": {"exitCode": 1, "reason": "Error"},
        }
        detail = details[state]
        entry: dict[str, Any] = {"name": container, "state": {state: detail}, "restartCount": 0}
        if ready is not None:
            entry["ready"] = ready
        statuses.append(entry)
    status: dict[str, Any] = {"containerStatuses": statuses}
    if phase is not None:
        status["phase"] = phase
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": c[0], "image": "busybox"} for c in containers]},
        "status": status,
    }


_uids = st.uuids().map(str)


@st.composite
def deployment_objects(draw: st.DrawFn) -> dict[str, Any]:
    """Arbitrary well-formed Deployments (owned by some workspace or not, any containers)."""
    labels = draw(label_maps())
    if draw(st.booleans()):
        labels[MANAGED_BY_LABEL] = "kuber"
        labels[WORKSPACE_UID_LABEL] = draw(_uids)
    return deployment_object(
        namespace=draw(dns_labels()),
        name=draw(dns_subdomains()),
        uid=draw(_uids),
        labels=labels,
        match_labels=draw(label_maps(max_size=3)),
        containers=draw(st.lists(dns_labels(max_size=10), max_size=3, unique=True)),
    )


@st.composite
def replica_set_objects(draw: st.DrawFn) -> dict[str, Any]:
    """Arbitrary well-formed ReplicaSets, controlled by a Deployment, by something else, or
    by nothing."""
    owner = draw(
        st.none()
        | st.builds(
            _owner,
            st.sampled_from(["Deployment", "StatefulSet"]),
            dns_labels(),
            _uids,
            controller=st.booleans(),
        )
    )
    return replica_set_object(
        namespace=draw(dns_labels()), name=draw(dns_labels()), uid=draw(_uids), owner=owner
    )


_container_states = st.sampled_from(["running", "waiting", "terminated", "none"])


@st.composite
def pod_objects(draw: st.DrawFn) -> dict[str, Any]:
    """Arbitrary well-formed Pods: any phase, terminating or not, owned by a ReplicaSet, by
    something else or by nothing, containers in any state and readiness."""
    owners = draw(
        st.lists(
            st.builds(
                _owner,
                st.sampled_from(["ReplicaSet", "StatefulSet", "Node"]),
                dns_labels(),
                _uids,
                controller=st.booleans(),
            ),
            max_size=2,
        )
    )
    containers = draw(
        st.lists(
            st.tuples(dns_labels(max_size=10), _container_states, st.none() | st.booleans()),
            max_size=3,
            unique_by=lambda c: c[0],
        )
    )
    return pod_object(
        namespace=draw(dns_labels()),
        name=draw(dns_subdomains()),
        uid=draw(_uids),
        labels=draw(label_maps()),
        owners=owners,
        phase=draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed", "Unknown", None])),
        deletion_timestamp=draw(st.none() | st.just("2024-01-01T00:00:00Z")),
        containers=containers,
    )


class PodRole(enum.Enum):
    """What a pod of a :class:`DeploymentScenario` is, relative to the Deployment."""

    #: Running, not terminating, owned through a ReplicaSet, the container running: a candidate.
    CANDIDATE = "candidate"
    #: Its ReplicaSet is controlled by another Deployment.
    FOREIGN = "foreign"
    #: No controller reference at all (or only a non-controller one).
    BARE = "bare"
    #: Controlled by something that is not a ReplicaSet (a StatefulSet).
    OTHER_CONTROLLER = "other-controller"
    #: Its controller reference names our ReplicaSet's name with a stale uid.
    STALE_OWNER = "stale-owner"
    #: Its ReplicaSet no longer exists (the API answers 404).
    REPLICA_SET_GONE = "replica-set-gone"
    #: Owned and Running, but being deleted.
    TERMINATING = "terminating"
    #: Owned, but its phase is not Running.
    NOT_RUNNING = "not-running"
    #: Owned and Running, without the requested container.
    CONTAINER_MISSING = "container-missing"
    #: Owned and Running, the requested container waiting, terminated or without status.
    CONTAINER_NOT_RUNNING = "container-not-running"

    @property
    def counts_as_owned_running(self) -> bool:
        """Owned, Running and not terminating (the seed's ``hasOwnedRunningPod``)."""
        return self in (
            PodRole.CANDIDATE,
            PodRole.CONTAINER_MISSING,
            PodRole.CONTAINER_NOT_RUNNING,
        )


class DeploymentIssue(enum.Enum):
    """What is wrong with a :class:`DeploymentScenario`'s Deployment, if anything."""

    MISSING = "missing"
    NAME_MISMATCH = "name-mismatch"
    NOT_MANAGED = "not-managed"
    OTHER_WORKSPACE = "other-workspace"
    NO_UID = "no-uid"
    EMPTY_SELECTOR = "empty-selector"
    NO_CONTAINERS = "no-containers"

    @property
    def refusal(self) -> TargetRefusal:
        """The check this issue fails, before any pod is looked at."""
        match self:
            case DeploymentIssue.MISSING | DeploymentIssue.NAME_MISMATCH:
                return TargetRefusal.DEPLOYMENT_NOT_FOUND
            case DeploymentIssue.NOT_MANAGED | DeploymentIssue.OTHER_WORKSPACE:
                return TargetRefusal.NOT_OWNED
            case DeploymentIssue.NO_UID | DeploymentIssue.EMPTY_SELECTOR:
                return TargetRefusal.NO_POD_SELECTOR
            case DeploymentIssue.NO_CONTAINERS:
                return TargetRefusal.NO_CONTAINER


@attrs.frozen(kw_only=True)
class DeploymentScenario:
    """A request, the API objects it meets, and the seed's answer.

    ``pods`` all carry the Deployment's selector labels (they are what the pod LIST returns);
    ``roles[i]`` and ``ready[i]`` say what ``pods[i]`` is. ``expected_pod`` is the pod the seed
    chooses (:attr:`expected_target`), or ``None`` with ``expected_refusal`` the
    :class:`~kuber_exec_core.kube.TargetRefusal` it raises.

    Assert the code and the refusal (``TargetRefusal.of(error, scenario.request)``), not the text.
    """

    request: ExecRequest
    container: str
    deployment: dict[str, Any] | None
    replica_sets: dict[str, dict[str, Any]]
    pods: tuple[dict[str, Any], ...]
    roles: tuple[PodRole, ...]
    ready: tuple[bool, ...]
    issue: DeploymentIssue | None
    expected_pod: str | None
    expected_refusal: TargetRefusal | None
    #: How many pods the fake API server returns per LIST page (``continue`` paging).
    page_size: int

    @property
    def namespace(self) -> str:
        """The workspace's namespace."""
        return self.request.workspace.project

    @property
    def expected_error(self) -> tuple[ExecErrorCode, str] | None:
        """The ``(code, message)`` of :attr:`expected_refusal`, from the library's table."""
        if self.expected_refusal is None:
            return None
        return self.expected_refusal.code, self.expected_refusal.message(self.request)

    @property
    def expected_target(self) -> ResolvedTarget | None:
        """The seed's :class:`ResolvedTarget`, or ``None`` when it raises."""
        if self.expected_pod is None or self.deployment is None:
            return None
        pod = next(p for p in self.pods if p["metadata"]["name"] == self.expected_pod)
        return ResolvedTarget(
            namespace=self.namespace,
            deployment=self.deployment["metadata"]["name"],
            deployment_uid=self.deployment["metadata"]["uid"],
            pod=self.expected_pod,
            pod_uid=pod["metadata"]["uid"],
            container=self.container,
        )

    def respond(self, request: ApiGet) -> ApiResponse:
        """Answer a REST plan's GET as a fake API server holding this scenario's objects.

        Pod LISTs are paged ``page_size`` at a time with an opaque ``continue`` token; anything
        unknown is a 404 ``Status``."""
        ns = self.namespace
        query = dict(request.query)
        if request.path == f"/apis/apps/v1/namespaces/{ns}/deployments/{self.request.deployment}":
            if self.deployment is not None:
                return _ok(self.deployment)
        elif request.path == f"/api/v1/namespaces/{ns}/pods":
            start = int(query.get("continue", "0").removeprefix("page-"))
            end = start + self.page_size
            metadata = {"continue": f"page-{end}"} if end < len(self.pods) else {}
            return _ok(
                {
                    "apiVersion": "v1",
                    "kind": "PodList",
                    "metadata": metadata,
                    "items": list(self.pods[start:end]),
                }
            )
        elif request.path.startswith(f"/apis/apps/v1/namespaces/{ns}/replicasets/"):
            name = request.path.rsplit("/", 1)[1]
            if name in self.replica_sets:
                return _ok(self.replica_sets[name])
        return ApiResponse(
            status=404,
            body=json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"{request.path} not found",
                    "reason": "NotFound",
                    "code": 404,
                }
            ).encode(),
        )


def _ok(value: object) -> ApiResponse:
    return ApiResponse(status=200, body=json.dumps(value).encode())


@st.composite
def deployment_scenarios(
    draw: st.DrawFn,
    *,
    issues: bool = True,
    roles: Sequence[PodRole] | None = None,
    max_pods: int = 8,
) -> DeploymentScenario:
    """A workspace's Deployment with up to ``max_pods`` pods of the given ``roles`` (default all),
    and what the seed answers.

    With ``issues`` some scenarios have a Deployment problem (:class:`DeploymentIssue`) that ends
    resolution before the pods are looked at.
    """
    request = draw(valid_exec_requests())
    workspace = request.workspace
    ns = workspace.project
    name = request.deployment
    deployment_uid = draw(_uids)
    template_containers = draw(st.lists(dns_labels(max_size=12), max_size=3, unique=True))
    if request.container is None and not template_containers:
        template_containers = ["app"]
    issue = draw(st.none() | st.sampled_from(DeploymentIssue)) if issues else None
    if issue is DeploymentIssue.NO_CONTAINERS and request.container is not None:
        issue = None
    if issue is DeploymentIssue.NO_CONTAINERS:
        template_containers = []
    container = request.container or (template_containers[0] if template_containers else "")

    labels: dict[str, str] = {MANAGED_BY_LABEL: "kuber", WORKSPACE_UID_LABEL: workspace.uid}
    if issue is DeploymentIssue.NOT_MANAGED:
        labels[MANAGED_BY_LABEL] = draw(st.sampled_from(["helm", "Kuber", ""]))
        if draw(st.booleans()):
            del labels[MANAGED_BY_LABEL]
    if issue is DeploymentIssue.OTHER_WORKSPACE:
        labels[WORKSPACE_UID_LABEL] = draw(_uids.filter(lambda u: u != workspace.uid))
    match_labels = {"app.kubernetes.io/name": "web", "pod-template-hash": "abc123"}
    deployment = deployment_object(
        namespace=ns,
        name=f"{name}x"[:253] if issue is DeploymentIssue.NAME_MISMATCH else name,
        uid="" if issue is DeploymentIssue.NO_UID else deployment_uid,
        labels=labels,
        match_labels={} if issue is DeploymentIssue.EMPTY_SELECTOR else match_labels,
        containers=template_containers,
    )

    rs_name, rs_uid = f"{name[:40]}-rs", draw(_uids)
    foreign_rs, foreign_rs_uid = f"{name[:40]}-other", draw(_uids)
    gone_rs = f"{name[:40]}-gone"
    replica_sets = {
        rs_name: replica_set_object(
            namespace=ns, name=rs_name, uid=rs_uid, owner=_owner("Deployment", name, deployment_uid)
        ),
        foreign_rs: replica_set_object(
            namespace=ns,
            name=foreign_rs,
            uid=foreign_rs_uid,
            owner=_owner("Deployment", "other", draw(_uids)),
        ),
    }
    ours = _owner("ReplicaSet", rs_name, rs_uid)

    pod_names = draw(
        st.lists(dns_labels(max_size=20), max_size=max_pods, unique=True)
        .map(sorted)
        .flatmap(st.permutations)
    )
    pods: list[dict[str, Any]] = []
    pod_roles: list[PodRole] = []
    ready_flags: list[bool] = []
    others = [c for c in ("sidecar", "init-helper") if c != container]
    for pod_name in pod_names:
        role = draw(st.sampled_from(list(roles) if roles else list(PodRole)))
        ready = draw(st.none() | st.booleans())
        owners: list[dict[str, Any]] = [ours]
        phase: str | None = "Running"
        deleting: str | None = None
        state = "running"
        match role:
            case PodRole.FOREIGN:
                owners = [_owner("ReplicaSet", foreign_rs, foreign_rs_uid)]
            case PodRole.BARE:
                owners = draw(
                    st.sampled_from([[], [_owner("ReplicaSet", rs_name, rs_uid, controller=False)]])
                )
            case PodRole.OTHER_CONTROLLER:
                owners = [_owner("StatefulSet", name, deployment_uid)]
            case PodRole.STALE_OWNER:
                owners = [_owner("ReplicaSet", rs_name, draw(_uids.filter(lambda u: u != rs_uid)))]
            case PodRole.REPLICA_SET_GONE:
                owners = [_owner("ReplicaSet", gone_rs, draw(_uids))]
            case PodRole.TERMINATING:
                deleting = "2024-01-01T00:00:00Z"
            case PodRole.NOT_RUNNING:
                phase = draw(st.sampled_from(["Pending", "Succeeded", "Failed", "Unknown", None]))
            case PodRole.CONTAINER_NOT_RUNNING:
                state = draw(st.sampled_from(["waiting", "terminated", "none"]))
        pod_containers: list[tuple[str, str, bool | None]] = []
        if role is not PodRole.CONTAINER_MISSING:
            pod_containers.append((container, state, ready))
        pod_containers += [(c, "running", True) for c in others if draw(st.booleans())]
        pods.append(
            pod_object(
                namespace=ns,
                name=pod_name,
                uid=draw(_uids),
                labels={**match_labels, "extra": "1"},
                owners=owners,
                phase=phase,
                deletion_timestamp=deleting,
                containers=draw(st.permutations(pod_containers)),
            )
        )
        pod_roles.append(role)
        ready_flags.append(ready is True)

    expected_pod, expected_refusal = _expected(request, issue, pod_names, pod_roles, ready_flags)
    return DeploymentScenario(
        request=request,
        container=container,
        deployment=None if issue is DeploymentIssue.MISSING else deployment,
        replica_sets=replica_sets,
        pods=tuple(pods),
        roles=tuple(pod_roles),
        ready=tuple(ready_flags),
        issue=issue,
        expected_pod=expected_pod,
        expected_refusal=expected_refusal,
        page_size=draw(st.integers(min_value=1, max_value=max(1, max_pods))),
    )


def _expected(
    request: ExecRequest,
    issue: DeploymentIssue | None,
    names: Sequence[str],
    roles: Sequence[PodRole],
    ready: Sequence[bool],
) -> tuple[str | None, TargetRefusal | None]:
    if issue is not None:
        return None, issue.refusal
    candidates = [
        (not r, n)
        for n, role, r in zip(names, roles, ready, strict=True)
        if role is PodRole.CANDIDATE
    ]
    if candidates:
        return min(candidates)[1], None
    if request.container is not None and any(role.counts_as_owned_running for role in roles):
        return None, TargetRefusal.CONTAINER_NOT_FOUND
    return None, TargetRefusal.NO_RUNNING_POD
