"""API object parsing, label selectors, owner resolution and the REST plans."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode, LabelSelector, PodContainer
from kuber_exec_core import testing as kt
from kuber_exec_core.kube import (
    ApiGet,
    ApiResponse,
    DeploymentLookup,
    PodListing,
    Requirement,
    SelectorOperator,
    api_error,
    exec_upgrade_error,
    load_json_object,
    parse_deployment,
    parse_pod,
    parse_pod_list,
    parse_replica_set,
    resolve_pod_owners,
)

# -- label selectors ------------------------------------------------------------------------------


def test_from_spec_match_labels_and_expressions() -> None:
    selector = LabelSelector.from_spec(
        {
            "matchLabels": {"app": "web", "tier": "front"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "canary"]},
                {"key": "track", "operator": "NotIn", "values": ["old"]},
                {"key": "example.com/gpu", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.to_query() == (
        "app=web,env in (canary,prod),example.com/gpu,!legacy,tier=front,track notin (old)"
    )
    assert selector.matches({"app": "web", "tier": "front", "env": "prod", "example.com/gpu": ""})
    assert not selector.matches(
        {"app": "web", "tier": "front", "env": "dev", "example.com/gpu": ""}
    )
    assert not selector.matches(
        {"app": "web", "tier": "front", "env": "prod", "example.com/gpu": "", "legacy": "1"}
    )
    assert not selector.matches(
        {"app": "web", "tier": "front", "env": "prod", "example.com/gpu": "", "track": "old"}
    )
    assert not selector.matches({"app": "web", "tier": "front", "env": "prod"})


@pytest.mark.parametrize(
    "spec",
    [
        "app=web",
        ["app"],
        {"matchLabels": ["app"]},
        {"matchLabels": {"app": 1}},
        {"matchLabels": {"bad key!": "x"}},
        {"matchLabels": {"app": "bad value!"}},
        {"matchLabels": {"app": "x" * 64}},
        {"matchExpressions": {"key": "a"}},
        {"matchExpressions": ["a"]},
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        {"matchExpressions": [{"operator": "Exists"}]},
        {"matchExpressions": [{"key": "a", "operator": ["In"], "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": {"In": 1}, "values": ["x"]}]},
        {"matchExpressions": [{"key": ["a"], "operator": "Exists"}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": [["x"]]}]},
    ],
)
def test_from_spec_rejects_malformed(spec: object) -> None:
    with pytest.raises(ExecError) as caught:
        LabelSelector.from_spec(spec)
    assert caught.value.code is ExecErrorCode.INVALID
    assert caught.value.message.startswith("Invalid label selector: ")


@pytest.mark.parametrize(
    ("query", "labels", "matches"),
    [
        ("", {}, True),
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "b"}, True),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a in (b, c)", {"a": "c"}, True),
        ("a notin (b,c)", {"a": "c"}, False),
        ("a notin (b,c)", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        (" a = b , c ", {"a": "b", "c": "x"}, True),
        ("a=", {"a": ""}, True),
        # apimachinery reads "()" as the one empty value.
        ("a in ()", {"a": ""}, True),
        ("a in ()", {"a": "x"}, False),
    ],
)
def test_parse_and_match(query: str, labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.parse(query).matches(labels) is matches


@pytest.mark.parametrize(
    "query", ["a=b,", ",a", "a in (b", "a b", "a=b=c", "bad key!=x", "a=(b)", "=b"]
)
def test_parse_rejects(query: str) -> None:
    with pytest.raises(ExecError) as caught:
        LabelSelector.parse(query)
    assert caught.value.code is ExecErrorCode.INVALID


def test_query_cannot_be_injected_through_labels() -> None:
    for key, value in [("a,b", "c"), ("a", "b,c=d"), ("a", "b)"), ("a b", "c"), ("a", "b c")]:
        with pytest.raises(ExecError):
            LabelSelector.from_labels({key: value})


def _evaluate(query: str, labels: Mapping[str, str]) -> bool:
    """An independent reading of a canonical selector query (apimachinery's grammar)."""
    if not query:
        return True
    for term in re.split(r",(?![^()]*\))", query):
        if m := re.fullmatch(r"(\S+) (in|notin) \((.*)\)", term):
            key, op, values = m[1], m[2], set(m[3].split(","))
            found = key in labels and labels[key] in values
            ok = found if op == "in" else not found
        elif m := re.fullmatch(r"([^!=]+)(!=|=)(.*)", term):
            key, op, value = m[1], m[2], m[3]
            same = key in labels and labels[key] == value
            ok = same if op == "=" else not same
        elif term.startswith("!"):
            ok = term[1:] not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


@given(kt.label_selectors())
def test_selector_query_round_trip(selector: LabelSelector) -> None:
    assert LabelSelector.parse(selector.to_query()) == selector


@given(kt.label_selectors(), kt.label_maps())
def test_query_form_and_matches_agree(selector: LabelSelector, labels: dict[str, str]) -> None:
    # Use the selector's own keys and values often, or most matches would be trivial.
    for requirement in selector.requirements[:2]:
        labels[requirement.key] = min(requirement.values, default="")
    query = selector.to_query()
    assert selector.matches(labels) is _evaluate(query, labels)
    assert LabelSelector.parse(query).matches(labels) is selector.matches(labels)


def test_requirement_forms() -> None:
    assert Requirement("a", SelectorOperator.IN, frozenset({"z", "b"})).to_query() == "a in (b,z)"
    assert Requirement("a", SelectorOperator.DOES_NOT_EXIST).to_query() == "!a"
    assert LabelSelector().is_empty
    assert LabelSelector.from_spec(None).is_empty
    assert LabelSelector.from_spec({}).is_empty


# -- objects ---------------------------------------------------------------------------------------

OWNED_RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid"}


def test_parse_deployment() -> None:
    value = kt.deployment_object(
        namespace="ns",
        name="web",
        uid="d-uid",
        labels={"a": "b"},
        match_labels={"app": "web"},
        containers=["app", "sidecar"],
        match_expressions=[{"key": "env", "operator": "Exists"}],
    )
    dep = parse_deployment(value)
    assert (dep.name, dep.uid, dict(dep.labels), dep.containers) == (
        "web",
        "d-uid",
        {"a": "b"},
        ("app", "sidecar"),
    )
    assert dep.selector.to_query() == "app=web,env"
    with pytest.raises(TypeError):
        dep.labels["x"] = "y"  # type: ignore[index]


def test_parse_deployment_missing_fields_are_empty() -> None:
    dep = parse_deployment({})
    assert (dep.name, dep.uid, dep.containers) == ("", "", ())
    assert dep.selector.is_empty


def test_parse_pod() -> None:
    value = kt.pod_object(
        namespace="ns",
        name="web-1-x",
        uid="p-uid",
        labels={"app": "web"},
        owners=[{**OWNED_RS, "controller": False}, {**OWNED_RS, "controller": True}],
        containers=[("app", "running", True), ("side", "waiting", False), ("init", "none", None)],
    )
    record = parse_pod(value)
    assert record.controller is not None
    assert (record.controller.name, record.controller.uid) == ("web-1", "rs-uid")
    assert record.phase == "Running"
    assert record.deletion_timestamp is None
    assert record.containers == (
        PodContainer(name="app", running=True, ready=True),
        PodContainer(name="side", running=False, ready=False),
        PodContainer(name="init", running=False, ready=None),
    )


def test_parse_pod_list_and_continue() -> None:
    records, token = parse_pod_list({"items": [{}], "metadata": {"continue": "tok"}})
    assert len(records) == 1
    assert token == "tok"
    assert parse_pod_list({"metadata": {"continue": ""}}) == ([], None)


def _rs(uid: str, owner_uid: str | None, kind: str = "Deployment") -> dict[str, Any]:
    owner = (
        None
        if owner_uid is None
        else {
            "apiVersion": "apps/v1",
            "kind": kind,
            "name": "web",
            "uid": owner_uid,
            "controller": True,
        }
    )
    return kt.replica_set_object(namespace="ns", name="web-1", uid=uid, owner=owner)


@pytest.mark.parametrize(
    ("pod_owner", "replica_set", "expected"),
    [
        (OWNED_RS, _rs("rs-uid", "d-uid"), "d-uid"),
        (None, _rs("rs-uid", "d-uid"), None),
        ({**OWNED_RS, "uid": "stale"}, _rs("rs-uid", "d-uid"), None),
        ({**OWNED_RS, "kind": "StatefulSet"}, _rs("rs-uid", "d-uid"), None),
        ({**OWNED_RS, "apiVersion": "extensions/v1beta1"}, _rs("rs-uid", "d-uid"), None),
        (OWNED_RS, _rs("rs-uid", None), None),
        (OWNED_RS, _rs("rs-uid", "d-uid", kind="CronJob"), None),
        (OWNED_RS, _rs("", "d-uid"), None),
        (OWNED_RS, None, None),
    ],
)
def test_resolve_pod_owners(
    pod_owner: dict[str, Any] | None, replica_set: dict[str, Any] | None, expected: str | None
) -> None:
    owners = [] if pod_owner is None else [{**pod_owner, "controller": True}]
    record = parse_pod(kt.pod_object(namespace="ns", name="p", uid="u", labels={}, owners=owners))
    sets = {} if replica_set is None else {"web-1": parse_replica_set(replica_set)}
    (pod,) = resolve_pod_owners([record], sets)
    assert pod.deployment_uid == expected


MALFORMED = [
    (parse_deployment, [], "Deployment: the object is not an object"),
    (parse_deployment, {"metadata": []}, "Deployment: metadata is not an object"),
    (parse_deployment, {"metadata": {"name": 1}}, "Deployment: metadata.name is not a string"),
    (parse_deployment, {"metadata": {"labels": {"a": 1}}}, "metadata.labels is not a map"),
    (parse_deployment, {"spec": {"selector": "x"}}, "spec.selector is invalid"),
    (parse_deployment, {"spec": {"template": {"spec": {"containers": {}}}}}, "is not a list"),
    (parse_deployment, {"spec": {"template": {"spec": {"containers": [1]}}}}, "containers[0]"),
    (parse_pod, {"metadata": {"ownerReferences": [{"controller": "yes"}]}}, "controller is not a"),
    (
        parse_pod,
        {
            "spec": {"containers": [{"name": "a"}]},
            "status": {"containerStatuses": [{"name": "a", "ready": "true"}]},
        },
        "status.containerStatuses[0].ready is not a boolean",
    ),
    (parse_pod, {"status": {"phase": 1}}, "status.phase is not a string"),
    (parse_pod_list, {"items": {}}, "PodList: items is not a list"),
    (parse_pod_list, {"items": [[]]}, "Pod"),
    (parse_replica_set, "x", "ReplicaSet"),
]


@pytest.mark.parametrize(("parser", "value", "fragment"), MALFORMED)
def test_malformed_objects_are_exec_failed(parser: Any, value: object, fragment: str) -> None:
    with pytest.raises(ExecError) as caught:
        parser(value)
    assert caught.value.code is ExecErrorCode.FAILED
    assert caught.value.message.startswith("The Kubernetes API returned a malformed ")
    assert fragment in caught.value.message


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "metadata",
                    "spec",
                    "status",
                    "items",
                    "name",
                    "uid",
                    "labels",
                    "ownerReferences",
                    "controller",
                    "kind",
                    "apiVersion",
                    "selector",
                    "matchLabels",
                    "matchExpressions",
                    "key",
                    "operator",
                    "values",
                    "template",
                    "containers",
                    "containerStatuses",
                    "state",
                    "running",
                    "ready",
                    "phase",
                    "deletionTimestamp",
                    "continue",
                    "In",
                    "Exists",
                ]
            )
            | st.text(max_size=5),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@given(json_values)
def test_parsers_never_raise_anything_but_exec_failed(value: Any) -> None:
    for parser in (parse_deployment, parse_pod, parse_pod_list, parse_replica_set):
        try:
            parser(value)
        except ExecError as error:
            code = error.code
        else:
            code = ExecErrorCode.FAILED
        assert code is ExecErrorCode.FAILED


@given(kt.pod_objects(), kt.deployment_objects(), kt.replica_set_objects())
def test_well_formed_objects_parse(
    pod: dict[str, Any], deployment: dict[str, Any], replica_set: dict[str, Any]
) -> None:
    record = parse_pod(pod)
    assert record.name == pod["metadata"]["name"]
    assert [c.name for c in record.containers] == [c["name"] for c in pod["spec"]["containers"]]
    dep = parse_deployment(deployment)
    assert dep.uid == deployment["metadata"]["uid"]
    assert dep.selector.matches(deployment["spec"]["template"]["metadata"]["labels"])
    assert parse_replica_set(replica_set).uid == replica_set["metadata"]["uid"]


@pytest.mark.parametrize("body", [b"", b"nope", b"[1]", b"\xff", b"[" * 100_000, b'"x"'])
def test_load_json_object_rejects(body: bytes) -> None:
    with pytest.raises(ExecError) as caught:
        load_json_object(body, "Pod")
    assert caught.value.code is ExecErrorCode.FAILED


# -- REST plans ------------------------------------------------------------------------------------


def ok(value: object) -> ApiResponse:
    return ApiResponse(status=200, body=json.dumps(value).encode())


def status_body(message: str, code: int, reason: str | None = None) -> bytes:
    status: dict[str, Any] = {"kind": "Status", "status": "Failure", "message": message}
    status["code"] = code
    if reason is not None:
        status["reason"] = reason
    return json.dumps(status).encode()


def test_deployment_lookup() -> None:
    plan = DeploymentLookup("team-a", "web")
    get = plan.next_event()
    assert get == ApiGet(path="/apis/apps/v1/namespaces/team-a/deployments/web")
    with pytest.raises(ExecError, match="has not finished"):
        plan.result()
    plan.response_received(ok({"metadata": {"name": "web", "uid": "u"}}))
    assert plan.next_event() is None
    result = plan.result()
    assert result is not None
    assert result.uid == "u"
    with pytest.raises(ExecError, match="not asked for"):
        plan.response_received(ok({}))


def test_deployment_lookup_404_is_none() -> None:
    plan = DeploymentLookup("team-a", "web")
    plan.response_received(ApiResponse(status=404, body=status_body("not found", 404)))
    assert plan.result() is None


def test_deployment_lookup_error_quotes_the_status() -> None:
    plan = DeploymentLookup("team-a", "web")
    message = 'deployments.apps "web" is forbidden: User "x" cannot get resource'
    with pytest.raises(ExecError) as caught:
        plan.response_received(ApiResponse(status=403, body=status_body(message, 403)))
    assert caught.value.code is ExecErrorCode.FAILED
    assert caught.value.message == (
        f"Kubernetes API GET /apis/apps/v1/namespaces/team-a/deployments/web failed with HTTP 403: "
        f"{message}"
    )


def test_plan_paths_cannot_be_injected() -> None:
    get = DeploymentLookup("a/b", "c?d#e").next_event()
    assert get is not None
    assert get.path == "/apis/apps/v1/namespaces/a%2Fb/deployments/c%3Fd%23e"


@pytest.mark.parametrize(
    ("status", "body", "expected", "reason", "code"),
    [
        (500, b"", "Kubernetes API GET /p failed with HTTP 500", None, None),
        (500, b"<html>", "Kubernetes API GET /p failed with HTTP 500", None, None),
        (500, b'{"message": 5}', "Kubernetes API GET /p failed with HTTP 500", None, None),
        (
            503,
            b'{"reason": 7, "code": true}',
            "Kubernetes API GET /p failed with HTTP 503",
            None,
            None,
        ),
        (
            401,
            status_body("Unauthorized", 401, "Unauthorized"),
            "Kubernetes API GET /p failed with HTTP 401: Unauthorized",
            "Unauthorized",
            401,
        ),
    ],
)
def test_api_error(
    status: int, body: bytes, expected: str, reason: str | None, code: int | None
) -> None:
    error = api_error(ApiGet(path="/p"), ApiResponse(status=status, body=body))
    assert (error.code, error.message) == (ExecErrorCode.FAILED, expected)
    assert (error.http_status, error.status_reason, error.status_code) == (status, reason, code)


@given(
    st.integers(min_value=300, max_value=599),
    st.binary(max_size=60) | json_values.map(lambda v: json.dumps(v).encode()),
)
def test_api_error_always_carries_the_http_status(status: int, body: bytes) -> None:
    error = api_error(ApiGet(path="/p"), ApiResponse(status=status, body=body))
    assert error.code is ExecErrorCode.FAILED
    assert error.http_status == status
    assert error.message.startswith(f"Kubernetes API GET /p failed with HTTP {status}")
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        decoded = None
    fields = decoded if isinstance(decoded, dict) else {}
    reason, code = fields.get("reason"), fields.get("code")
    assert error.status_reason == (reason if isinstance(reason, str) else None)
    assert error.status_code == (
        code if isinstance(code, int) and not isinstance(code, bool) else None
    )


def pod_json(
    name: str, rs: str | None, *, phase: str = "Running", deleting: bool = False
) -> dict[str, Any]:
    owners = (
        [] if rs is None else [{**OWNED_RS, "name": rs, "uid": f"{rs}-uid", "controller": True}]
    )
    return kt.pod_object(
        namespace="ns",
        name=name,
        uid=f"{name}-uid",
        labels={"app": "web"},
        owners=owners,
        phase=phase,
        deletion_timestamp="t" if deleting else None,
        containers=[("app", "running", True)],
    )


def test_pod_listing_pages_then_reads_replica_sets() -> None:
    selector = LabelSelector.from_labels({"app": "web", "tier": "a"})
    plan = PodListing("ns", selector)
    first = plan.next_event()
    assert first == ApiGet(
        path="/api/v1/namespaces/ns/pods",
        query=(("labelSelector", "app=web,tier=a"), ("limit", "500")),
    )
    assert first.target == "/api/v1/namespaces/ns/pods?labelSelector=app%3Dweb%2Ctier%3Da&limit=500"
    plan.response_received(ok({"items": [pod_json("p1", "rs-b")], "metadata": {"continue": "c1"}}))
    second = plan.next_event()
    assert second is not None
    assert dict(second.query)["continue"] == "c1"
    plan.response_received(
        ok(
            {
                "items": [
                    pod_json("p2", "rs-a"),
                    pod_json("p3", "rs-b"),
                    pod_json("p4", "rs-gone"),
                    pod_json("p5", None),
                    pod_json("p6", "rs-pending", phase="Pending"),
                    pod_json("p7", "rs-dying", deleting=True),
                ],
                "metadata": {},
            }
        )
    )
    # Each ReplicaSet named by a running live pod, once, in name order; not the others'.
    paths = []
    while (get := plan.next_event()) is not None:
        paths.append(get.path)
        name = get.path.rsplit("/", 1)[1]
        if name == "rs-gone":
            plan.response_received(ApiResponse(status=404, body=status_body("gone", 404)))
        else:
            rs = _rs(f"{name}-uid", "d-uid")
            rs["metadata"]["name"] = name
            plan.response_received(ok(rs))
    assert paths == [
        "/apis/apps/v1/namespaces/ns/replicasets/rs-a",
        "/apis/apps/v1/namespaces/ns/replicasets/rs-b",
        "/apis/apps/v1/namespaces/ns/replicasets/rs-gone",
    ]
    owners = {p.name: p.deployment_uid for p in plan.result()}
    assert owners == {
        "p1": "d-uid",
        "p2": "d-uid",
        "p3": "d-uid",
        "p4": None,
        "p5": None,
        "p6": None,
        "p7": None,
    }
    assert set(plan.replica_sets) == {"rs-a", "rs-b"}


def test_pod_listing_errors() -> None:
    plan = PodListing("ns", LabelSelector.from_labels({"app": "web"}))
    with pytest.raises(ExecError, match="has not finished"):
        plan.result()
    with pytest.raises(ExecError) as caught:
        plan.response_received(ApiResponse(status=403, body=status_body("pods is forbidden", 403)))
    assert caught.value.message.endswith("failed with HTTP 403: pods is forbidden")
    plan.response_received(ok({"items": [pod_json("p", "rs")]}))
    with pytest.raises(ExecError) as caught:
        plan.response_received(ApiResponse(status=500, body=b"boom"))
    assert caught.value.message == (
        "Kubernetes API GET /apis/apps/v1/namespaces/ns/replicasets/rs failed with HTTP 500"
    )


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"items": 3}', b'{"items": [{"metadata": 1}]}'])
def test_pod_listing_malformed_is_exec_failed(body: bytes) -> None:
    plan = PodListing("ns", LabelSelector.from_labels({"app": "web"}))
    with pytest.raises(ExecError) as caught:
        plan.response_received(ApiResponse(status=200, body=body))
    assert caught.value.code is ExecErrorCode.FAILED


def test_exec_upgrade_error() -> None:
    mismatch = exec_upgrade_error(403, b"", ("v5.channel.k8s.io", "v4.channel.k8s.io"))
    assert mismatch.code is ExecErrorCode.FAILED
    assert "v5.channel.k8s.io, v4.channel.k8s.io" in mismatch.message
    assert (mismatch.http_status, mismatch.status_reason, mismatch.status_code) == (403, None, None)
    only_v5 = exec_upgrade_error(403, b" ", ("v5.channel.k8s.io",))
    assert only_v5.code is ExecErrorCode.INVALID
    assert "v5.channel.k8s.io" in only_v5.message
    assert only_v5.http_status == 403
    rbac = exec_upgrade_error(
        403, status_body("pods/exec is forbidden", 403, "Forbidden"), ("v5.channel.k8s.io",)
    )
    # The server's authorization said no: the same code as the pre-flight's denial.
    assert rbac.code is ExecErrorCode.TARGET_FORBIDDEN
    assert rbac.message == "The exec upgrade failed with HTTP 403: pods/exec is forbidden"
    assert (rbac.http_status, rbac.status_reason, rbac.status_code) == (403, "Forbidden", 403)
    # 1.35+'s exec handler refuses a missing `create` with no reason at all: say what it means.
    silent = exec_upgrade_error(
        403, status_body('pods "web-1" is forbidden: ', 403, "Forbidden"), ("v5.channel.k8s.io",)
    )
    assert silent.code is ExecErrorCode.TARGET_FORBIDDEN
    assert silent.message == (
        'The exec upgrade failed with HTTP 403: pods "web-1" is forbidden (the server gave no '
        "reason: Kubernetes 1.35 and later refuse a WebSocket exec this way when the user may "
        "'get' pods/exec but not 'create' it, which they also require)"
    )
    # A 403 Status of another reason is no authorization verdict.
    other = exec_upgrade_error(
        403, status_body("quota", 403, "SomethingElse"), ("v5.channel.k8s.io",)
    )
    assert (other.code, other.status_reason) == (ExecErrorCode.FAILED, "SomethingElse")
    gone = exec_upgrade_error(404, status_body('pods "x" not found', 404, "NotFound"), ())
    assert (gone.code, gone.http_status, gone.status_reason) == (
        ExecErrorCode.FAILED,
        404,
        "NotFound",
    )
    legacy = exec_upgrade_error(500, b'container not found ("app")', ("v4.channel.k8s.io",))
    assert legacy.message == "The exec upgrade failed with HTTP 500"  # a text body, not a Status
    assert (legacy.http_status, legacy.status_reason, legacy.status_code) == (500, None, None)


@given(
    st.binary(max_size=80) | json_values.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([200, 201, 404, 403, 500]),
)
def test_plans_turn_any_answer_into_a_result_or_exec_failed(body: bytes, status: int) -> None:
    plans: list[DeploymentLookup | PodListing] = [
        DeploymentLookup("ns", "web"),
        PodListing("ns", LabelSelector.from_labels({"app": "web"})),
    ]
    for plan in plans:
        try:
            for _ in range(5):
                if plan.next_event() is None:
                    break
                plan.response_received(ApiResponse(status=status, body=body))
        except ExecError as error:
            code = error.code
        else:
            code = ExecErrorCode.FAILED
        assert code is ExecErrorCode.FAILED
