"""Hypothesis strategies for property-testing code that uses kuber-exec, without a cluster.

Install the ``testing`` extra (it adds ``hypothesis``). Everything here generates *inputs* together
with the answer the seed's rules give for them, worked out from how the input was built (never by
calling the code under test), so a property test can compare. The answer is structure: the code,
the rule broken (:class:`~kuber_exec_core.validation.InvalidRule`), the refusal
(:class:`~kuber_exec_core.kube.TargetRefusal`) or the target; where a message is given, it comes
from the library's own table of those rules, never from a copy of its text here.

- requests: :func:`valid_exec_requests`, :func:`invalid_exec_requests` (one broken rule each),
  :func:`exec_limits`;
- the Kubernetes API's objects: :func:`deployment_objects`, :func:`replica_set_objects`,
  :func:`pod_objects` and whole :func:`deployment_scenarios` (a Deployment, its ReplicaSets and a
  mix of owned, foreign, bare, terminating, not running and not ready pods) that can also answer
  the REST plans' GETs (:meth:`DeploymentScenario.respond`);
- label selectors: :func:`label_keys`, :func:`label_values`, :func:`label_maps`,
  :func:`label_selectors`;
- what a server sends: :func:`server_scripts` (the initial empty message, output chunks of
  arbitrary bytes, a final status, optionally cut short) and :func:`raw_server_messages` (anything
  at all, for robustness tests).

The messages are framed by this module's own code (docs/protocol.md), not by the core's codec.
"""

from __future__ import annotations

import base64
import enum
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st

from ._channels import Message
from ._errors import ExecErrorCode
from ._frames import Error, Exit, ServerFrame
from ._kube_api import ApiGet, ApiResponse
from ._limits import ExecLimits
from ._request import ExecRequest, Workspace
from ._rules import InvalidRule, TargetRefusal
from ._selector import LabelSelector, Requirement, SelectorOperator
from ._session import SESSION_ENDED, ExecSession
from ._state import STREAM_END_FAILURES, StreamEnd, stream_end_failure
from ._subprotocols import Subprotocol
from ._target import ResolvedTarget

__all__ = [
    "MANAGED_BY_LABEL",
    "WORKSPACE_UID_LABEL",
    "DeploymentIssue",
    "DeploymentScenario",
    "InvalidExecRequest",
    "InvalidRule",
    "PodRole",
    "ServerScript",
    "StatusKind",
    "command_arguments",
    "commands",
    "deployment_object",
    "deployment_objects",
    "deployment_scenarios",
    "dns_labels",
    "dns_subdomains",
    "exec_limits",
    "frame_message",
    "invalid_exec_requests",
    "label_keys",
    "label_maps",
    "label_selectors",
    "label_values",
    "pod_object",
    "pod_objects",
    "raw_server_messages",
    "replica_set_object",
    "replica_set_objects",
    "server_scripts",
    "valid_exec_requests",
    "workspace_uids",
    "workspaces",
]

#: The ownership labels the seed checks (spelled out here rather than imported).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
WORKSPACE_UID_LABEL = "kuber.dev/workspace-uid"

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"
_LABEL_CHARS = _LOWER + _DIGITS + "-"
# JavaScript's String.prototype.trim() whitespace: what the seed treats as a blank uid.
_JS_BLANKS = "\t\n\v\f\r \u00a0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


# -- names ---------------------------------------------------------------------------------------


def dns_labels(*, max_size: int = 63) -> st.SearchStrategy[str]:
    """RFC 1123 labels as the seed's ``DNS_LABEL``: lowercase alphanumerics and ``-``, starting
    and ending alphanumeric, 1..``max_size`` characters (``max_size`` ≤ 63)."""
    alnum = st.sampled_from(_LOWER + _DIGITS)
    middle = st.text(alphabet=_LABEL_CHARS, max_size=max(0, max_size - 2))
    single = alnum
    longer = st.tuples(alnum, middle, alnum).map("".join)
    return (single | longer) if max_size >= 2 else single


def dns_subdomains(*, max_size: int = 253) -> st.SearchStrategy[str]:
    """RFC 1123 subdomains as the seed's ``DNS_SUBDOMAIN``: dot-separated labels, 1..``max_size``
    characters in total (labels of up to 63 characters)."""
    return (
        st.lists(dns_labels(max_size=63), min_size=1, max_size=5)
        .map(".".join)
        .filter(lambda name: len(name) <= max_size)
    )


def _utf16_length(text: str) -> int:
    return sum(2 if ord(char) > 0xFFFF else 1 for char in text)


def workspace_uids() -> st.SearchStrategy[str]:
    """Valid workspace uids: 1..256 UTF-16 code units, not blank under JavaScript's ``trim()``.

    Mostly UUID-like ASCII, sometimes arbitrary Unicode text (surrounding blanks included)."""
    uuid_like = st.uuids().map(str)
    arbitrary = st.text(min_size=1, max_size=80).filter(
        lambda uid: bool(uid.strip(_JS_BLANKS)) and _utf16_length(uid) <= 256
    )
    return uuid_like | arbitrary


def workspaces() -> st.SearchStrategy[Workspace]:
    """Valid :class:`Workspace` values (a DNS-label project and a valid uid)."""
    return st.builds(Workspace, project=dns_labels(), uid=workspace_uids())


# -- limits and requests ---------------------------------------------------------------------------


@st.composite
def exec_limits(draw: st.DrawFn) -> ExecLimits:
    """Valid :class:`ExecLimits`: each value positive (sometimes the default, sometimes small),
    the default output cap never above the maximum."""
    defaults = ExecLimits()

    def value(default: int, upper: int) -> int:
        return draw(st.just(default) | st.integers(min_value=1, max_value=upper))

    max_cap = value(defaults.max_output_cap_bytes, 4 * 1024 * 1024)
    default_cap = draw(
        st.just(max_cap) | st.integers(min_value=1, max_value=max_cap),
    )
    return ExecLimits(
        max_command_arguments=value(defaults.max_command_arguments, 200),
        max_command_bytes=value(defaults.max_command_bytes, 64 * 1024),
        max_argument_bytes=value(defaults.max_argument_bytes, 16 * 1024),
        max_output_cap_bytes=max_cap,
        default_output_cap_bytes=default_cap,
        interactive_queue_capacity=value(defaults.interactive_queue_capacity, 1024),
        max_stdin_frame_bytes=value(defaults.max_stdin_frame_bytes, 256 * 1024),
    )


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def command_arguments(*, max_bytes: int = 8 * 1024) -> st.SearchStrategy[str]:
    """One valid argv element: text without NUL and without lone surrogates, at most
    ``max_bytes`` UTF-8 bytes (sometimes exactly ``max_bytes``)."""
    short = st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="\0"),
        max_size=min(max_bytes, 40),
    ).filter(lambda arg: _utf8_size(arg) <= max_bytes)
    exact = st.sampled_from("a-é€😀 ").map(lambda char: char * (max_bytes // _utf8_size(char)))
    return short | exact


@st.composite
def commands(draw: st.DrawFn, limits: ExecLimits | None = None) -> tuple[str, ...]:
    """A valid argv under ``limits`` (default :class:`ExecLimits`): 1..max arguments, each and all
    of them within the byte limits."""
    limits = limits or ExecLimits()
    count = draw(st.integers(min_value=1, max_value=min(limits.max_command_arguments, 8)))
    budget = limits.max_command_bytes
    arguments: list[str] = []
    for _ in range(count):
        allowed = min(limits.max_argument_bytes, budget)
        argument = draw(command_arguments(max_bytes=allowed))
        budget -= _utf8_size(argument)
        arguments.append(argument)
    return tuple(arguments)


@st.composite
def valid_exec_requests(draw: st.DrawFn, limits: ExecLimits | None = None) -> ExecRequest:
    """Requests that pass validation under ``limits`` (default :class:`ExecLimits`), with and
    without an explicit container."""
    return ExecRequest(
        workspace=draw(workspaces()),
        deployment=draw(dns_subdomains()),
        command=draw(commands(limits)),
        container=draw(st.none() | dns_labels()),
    )


@attrs.frozen(kw_only=True)
class InvalidExecRequest:
    """A request that breaks exactly one rule (:class:`~kuber_exec_core.validation.InvalidRule`,
    also importable from here) under ``limits``: validation must raise ``rule.error(limits)``.

    Assert the code and the rule (``InvalidRule.of(error, limits) is bad.rule``), not the text.
    """

    request: ExecRequest
    rule: InvalidRule
    limits: ExecLimits

    @property
    def message(self) -> str:
        """The ``EXEC_INVALID`` message the request gets, from the library's table."""
        return self.rule.message(self.limits)


_BAD_LABELS = [
    "",
    "A",
    "Web",
    "-web",
    "web-",
    "web_1",
    "web.1",
    "web 1",
    "web\n",
    "wéb",
    "a" * 64,
]
_BAD_SUBDOMAINS = ["", "Web", "-web", "web-", "web..x", ".web", "web.", "web_1", "web\n", "a" * 254]


def _bad_names(fixed: list[str], max_length: int, dotted: bool) -> st.SearchStrategy[str]:
    label = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
    pattern = re.compile(rf"{label}(?:\.{label})*" if dotted else label)
    arbitrary = st.text(max_size=20).filter(
        lambda name: pattern.fullmatch(name) is None or len(name) > max_length
    )
    return st.sampled_from(fixed) | arbitrary


def _argument_nul() -> st.SearchStrategy[object]:
    with_nul = st.tuples(st.text(max_size=5), st.text(max_size=5)).map(lambda p: f"{p[0]}\0{p[1]}")
    not_text = st.sampled_from([b"ls", 1, None, ["ls"]])
    return with_nul | not_text


def _feasible_rules(limits: ExecLimits) -> list[InvalidRule]:
    rules = [rule for rule in InvalidRule]
    if limits.max_command_arguments > 10_000:
        rules.remove(InvalidRule.ARGUMENT_COUNT)
    if limits.max_argument_bytes > 1024 * 1024:
        rules.remove(InvalidRule.ARGUMENT_BYTES)
    reachable = limits.max_command_arguments * limits.max_argument_bytes
    if reachable <= limits.max_command_bytes or limits.max_command_bytes > 1024 * 1024:
        rules.remove(InvalidRule.COMMAND_BYTES)
    return rules


@st.composite
def invalid_exec_requests(
    draw: st.DrawFn,
    limits: ExecLimits | None = None,
    rules: Sequence[InvalidRule] | None = None,
) -> InvalidExecRequest:
    """Requests that break exactly one rule (drawn from ``rules``, default all that ``limits``
    make possible), with the rule they break.

    Everything before the broken rule is valid, so that rule is the one validation must report.
    """
    limits = limits or ExecLimits()
    candidates = [rule for rule in (rules or list(InvalidRule)) if rule in _feasible_rules(limits)]
    rule = draw(st.sampled_from(candidates))
    request = draw(valid_exec_requests(limits))
    command: list[object] = list(request.command)
    changes: dict[str, Any] = {}
    match rule:
        case InvalidRule.WORKSPACE:
            not_a_workspace = [None, "team-a", ("team-a", "uid"), {"project": "a", "uid": "u"}]
            changes["workspace"] = draw(st.sampled_from(not_a_workspace))
        case InvalidRule.PROJECT:
            project = draw(_bad_names(_BAD_LABELS, 63, dotted=False))
            changes["workspace"] = attrs.evolve(request.workspace, project=project)
        case InvalidRule.WORKSPACE_UID:
            blank = st.text(alphabet=_JS_BLANKS, max_size=5)
            too_long = st.sampled_from(["u" * 257, "😀" * 129, "é" * 257])
            uid = draw(blank | too_long)
            changes["workspace"] = attrs.evolve(request.workspace, uid=uid)
        case InvalidRule.DEPLOYMENT:
            changes["deployment"] = draw(_bad_names(_BAD_SUBDOMAINS, 253, dotted=True))
        case InvalidRule.CONTAINER:
            changes["container"] = draw(_bad_names(_BAD_LABELS, 63, dotted=False))
        case InvalidRule.COMMAND_MISSING:
            changes["command"] = draw(st.sampled_from([(), [], "ls", None]))
        case InvalidRule.ARGUMENT_COUNT:
            extra = draw(st.integers(min_value=1, max_value=3))
            command = ["a"] * (limits.max_command_arguments + extra)
        case InvalidRule.ARGUMENT_NUL:
            command = _with_replaced(draw, command, draw(_argument_nul()), limits)
        case InvalidRule.ARGUMENT_UNICODE:
            lone = draw(st.sampled_from(["\ud800", "a\udfff", "\udc80b"]))
            command = _with_replaced(draw, command, lone, limits)
        case InvalidRule.ARGUMENT_BYTES:
            over = draw(st.integers(min_value=1, max_value=3))
            char = draw(st.sampled_from("xé€"))
            size = _utf8_size(char)
            argument = char * (limits.max_argument_bytes // size + over)
            command = _with_replaced(draw, command, argument, limits)
        case InvalidRule.COMMAND_BYTES:
            command = list(_over_budget(draw, limits))
    changes.setdefault("command", tuple(command))
    return InvalidExecRequest(request=attrs.evolve(request, **changes), rule=rule, limits=limits)


def _with_replaced(
    draw: st.DrawFn, command: list[object], argument: object, limits: ExecLimits
) -> list[object]:
    """``command`` with ``argument`` at some position, still within the argument count."""
    if len(command) >= limits.max_command_arguments:
        command = command[: limits.max_command_arguments - 1]
    index = draw(st.integers(min_value=0, max_value=len(command)))
    return [*command[:index], argument, *command[index:]]


def _over_budget(draw: st.DrawFn, limits: ExecLimits) -> tuple[str, ...]:
    """An argv whose every argument is within bounds but whose total is over the budget."""
    # Over the budget by 1 to 3 bytes, but never by more than the argument count can carry.
    reachable = limits.max_command_arguments * limits.max_argument_bytes
    excess = min(3, reachable - limits.max_command_bytes)
    target = limits.max_command_bytes + draw(st.integers(min_value=1, max_value=excess))
    arguments: list[str] = []
    while target > 0:
        size = min(limits.max_argument_bytes, target)
        arguments.append("c" * size)
        target -= size
    assert len(arguments) <= limits.max_command_arguments
    return tuple(draw(st.permutations(arguments)))


# -- label selectors -------------------------------------------------------------------------------


_NAME_CHARS = _LOWER + _LOWER.upper() + _DIGITS


def _label_names() -> st.SearchStrategy[str]:
    alnum = st.sampled_from(_NAME_CHARS)
    middle = st.text(alphabet=_NAME_CHARS + "-_.", max_size=10)
    return alnum | st.tuples(alnum, middle, alnum).map("".join)


def label_keys() -> st.SearchStrategy[str]:
    """Valid label keys: a name (alphanumerics, ``-_.``, ≤ 63) with an optional DNS prefix."""
    prefix = st.none() | dns_subdomains(max_size=40)
    return st.tuples(prefix, _label_names()).map(lambda p: f"{p[0]}/{p[1]}" if p[0] else p[1])


def label_values() -> st.SearchStrategy[str]:
    """Valid label values, the empty string included."""
    return st.just("") | _label_names()


def label_maps(*, max_size: int = 6) -> st.SearchStrategy[dict[str, str]]:
    """Label maps (key → value) as on an object's ``metadata.labels``."""
    return st.dictionaries(label_keys(), label_values(), max_size=max_size)


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    key = draw(label_keys())
    operator = draw(st.sampled_from(SelectorOperator))
    match operator:
        case SelectorOperator.EQUALS | SelectorOperator.NOT_EQUALS:
            values = frozenset([draw(label_values())])
        case SelectorOperator.IN | SelectorOperator.NOT_IN:
            values = frozenset(draw(st.lists(label_values(), min_size=1, max_size=4)))
        case SelectorOperator.EXISTS | SelectorOperator.DOES_NOT_EXIST:
            values = frozenset()
    return Requirement(key, operator, values)


def label_selectors(*, max_size: int = 5) -> st.SearchStrategy[LabelSelector]:
    """Selectors of up to ``max_size`` requirements, every operator (=, !=, in, notin, exists,
    !exists), the empty selector included."""
    return st.lists(_requirements(), max_size=max_size).map(lambda r: LabelSelector(tuple(r)))


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


# -- server messages -------------------------------------------------------------------------------


def frame_message(subprotocol: Subprotocol, channel: int, payload: bytes) -> Message:
    """One whole message as a server (or client) sends it: ``[channel][payload]`` in binary
    subprotocols, ``'0'+channel`` then padded base64 in the base64 ones (docs/protocol.md)."""
    if subprotocol in (Subprotocol.BASE64, Subprotocol.V4_BASE64):
        return chr(ord("0") + channel) + base64.standard_b64encode(payload).decode("ascii")
    return bytes([channel]) + payload


class StatusKind(enum.Enum):
    """How a :class:`ServerScript` ends."""

    #: ``{"metadata":{},"status":"Success"}`` (v4/v5), or nothing and a clean close (pre-v4).
    SUCCESS = "success"
    #: ``NonZeroExitCode`` with the ``ExitCode`` cause somewhere among other causes (v4/v5).
    NON_ZERO_EXIT = "non-zero-exit"
    #: ``InternalError`` with code 500: the command could not run (v4/v5).
    INTERNAL_ERROR = "internal-error"
    #: Plain failure text on channel 3 (pre-v4 only).
    TEXT_FAILURE = "text-failure"
    #: No status at all: the connection ended early (v4/v5 any close; pre-v4 a broken one).
    TRUNCATED = "truncated"


@attrs.frozen(kw_only=True, repr=False)
class ServerScript:
    """The messages a server sends for one exec, and what a client must make of them.

    Feed ``messages`` in order, then end the transport with ``clean_close``; the client must
    yield exactly ``stdout`` and ``stderr`` (however chunked) and then ``terminal``.
    """

    subprotocol: Subprotocol
    messages: tuple[Message, ...]
    clean_close: bool
    kind: StatusKind
    stdout: bytes
    stderr: bytes
    terminal: Exit | Error

    def __repr__(self) -> str:
        return (
            f"ServerScript({self.subprotocol.value}, {self.kind.name}, "
            f"{len(self.messages)} messages, clean_close={self.clean_close}, "
            f"terminal={self.terminal!r})"
        )

    def feed(self, session: ExecSession) -> list[ServerFrame]:
        """Feed the whole script into ``session`` and return every frame it yields, in order."""
        frames: list[ServerFrame] = []
        for message in self.messages:
            session.receive_message(message)
        session.connection_closed(clean=self.clean_close)
        while (event := session.next_event()) is not SESSION_ENDED:
            assert isinstance(event, ServerFrame), event
            frames.append(event)
        return frames


def _go_json(value: object) -> bytes:
    # Go's encoding/json escapes <, > and & (and U+2028/9) even in plain strings.
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text.encode("utf-8")


_status_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40)


@st.composite
def _status(draw: st.DrawFn, kind: StatusKind, structured: bool) -> tuple[bytes, Exit | Error]:
    if kind is StatusKind.SUCCESS:
        return _go_json({"metadata": {}, "status": "Success"}), Exit(0)
    if kind is StatusKind.NON_ZERO_EXIT:
        code = draw(st.integers(min_value=1, max_value=255) | st.integers(-(2**31), 2**31 - 1))
        message = draw(
            st.just(f"command terminated with non-zero exit code: {code}") | _status_text
        )
        others = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"message": _status_text},
                    optional={
                        "reason": st.sampled_from(["Other", "exitcode", ""]),
                        "field": _status_text,
                    },
                ),
                max_size=3,
            )
        )
        index = draw(st.integers(min_value=0, max_value=len(others)))
        causes = [*others[:index], {"reason": "ExitCode", "message": str(code)}, *others[index:]]
        status: dict[str, Any] = {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "NonZeroExitCode",
            "details": {"causes": causes},
        }
        return _go_json(status), Exit(code, "NonZeroExitCode", message)
    if kind is StatusKind.INTERNAL_ERROR:
        detail = draw(_status_text)
        message = f"Internal error occurred: error executing command in container: {detail}"
        status = {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": detail}]},
            "code": 500,
        }
        return _go_json(status), Error(ExecErrorCode.FAILED, message)
    assert kind is StatusKind.TEXT_FAILURE
    assert not structured
    text = draw(_status_text)
    return text.encode("utf-8"), Error(
        ExecErrorCode.FAILED, text.strip() or STREAM_END_FAILURES[StreamEnd.UNEXPLAINED]
    )


@st.composite
def server_scripts(
    draw: st.DrawFn,
    subprotocol: Subprotocol | None = None,
    *,
    kinds: Sequence[StatusKind] | None = None,
    max_chunks: int = 6,
) -> ServerScript:
    """What a server sends for one exec in ``subprotocol`` (default: any), ending as one of
    ``kinds`` (default: any the subprotocol can send).

    First the empty message on the lowest requested output channel (stdout, else stderr, else
    channel 3), then up to ``max_chunks`` output messages of arbitrary bytes on the requested
    streams (empty ones included: they are no-ops), then the status (if any), then a close.
    """
    protocol = subprotocol or draw(st.sampled_from(Subprotocol))
    structured = protocol in (Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64)
    possible = (
        [StatusKind.SUCCESS, StatusKind.NON_ZERO_EXIT, StatusKind.INTERNAL_ERROR]
        if structured
        else [StatusKind.SUCCESS, StatusKind.TEXT_FAILURE]
    ) + [StatusKind.TRUNCATED]
    kind = draw(st.sampled_from([k for k in (kinds or possible) if k in possible]))
    initial = draw(st.sampled_from([1, 2, 3]))
    streams = {1: [1, 2], 2: [2], 3: []}[initial]
    messages: list[Message] = [frame_message(protocol, initial, b"")]
    output = {1: bytearray(), 2: bytearray()}
    if streams:
        chunks = draw(
            st.lists(
                st.tuples(st.sampled_from(streams), st.binary(max_size=64)), max_size=max_chunks
            )
        )
        for channel, data in chunks:
            messages.append(frame_message(protocol, channel, data))
            output[channel] += data
    clean = True
    terminal: Exit | Error
    if kind is StatusKind.TRUNCATED:
        clean = draw(st.booleans()) if structured else False
        terminal = Error(
            ExecErrorCode.FAILED,
            stream_end_failure(StreamEnd.NO_STATUS if structured else StreamEnd.LOST),
        )
    elif kind is StatusKind.SUCCESS and not structured:
        terminal = Exit(0)
    else:
        payload, terminal = draw(_status(kind, structured))
        messages.append(frame_message(protocol, 3, payload))
        clean = draw(st.booleans())
    return ServerScript(
        subprotocol=protocol,
        messages=tuple(messages),
        clean_close=clean,
        kind=kind,
        stdout=bytes(output[1]),
        stderr=bytes(output[2]),
        terminal=terminal,
    )


def raw_server_messages(subprotocol: Subprotocol) -> st.SearchStrategy[Message]:
    """Anything a broken or hostile server could send in ``subprotocol``: arbitrary binary and
    text frames, well-framed messages on every channel with arbitrary payloads, and statuses
    that are almost right."""
    channels = st.sampled_from([0, 1, 2, 3, 4, 5, 9, 255]) | st.integers(0, 255)
    framed = st.builds(
        lambda channel, payload: (
            frame_message(subprotocol, channel % 10, payload)
            if subprotocol in (Subprotocol.BASE64, Subprotocol.V4_BASE64)
            else frame_message(subprotocol, channel, payload)
        ),
        channels,
        st.binary(max_size=64)
        | st.sampled_from(
            [
                b"{}",
                b"[]",
                b"null",
                b'{"status":"Failure","reason":"NonZeroExitCode"}',
                b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":"x"}}',
                b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason'
                b'":"ExitCode","message":"99999999999999999999"}]}}',
                b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason'
                b'":"ExitCode","message":7}]}}',
                b'{"status":"Failure","message":["x"],"reason":{}}',
                b"[" * 5000,
                b"\xff\xfe",
            ]
        ),
    )
    return framed | st.binary(max_size=80) | st.text(max_size=80)
