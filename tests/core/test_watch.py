"""The reflector's and the store's rules, one by one (the property is in test_watch_property)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings

from kuber_exec_core import ExecError, ExecErrorCode, ExecLimits, LabelSelector
from kuber_exec_core._jsonlines import JsonLinesDecoder
from kuber_exec_core._kube_api import ApiGet, ApiResponse, DeploymentLookup, PodListing
from kuber_exec_core._objects import (
    Deployment,
    PodRecord,
    ReplicaSet,
    parse_deployment,
    parse_pod,
    parse_replica_set,
)
from kuber_exec_core._store import WatchStore
from kuber_exec_core._watch import (
    DEPLOYMENTS,
    PODS,
    REPLICA_SETS,
    Reflector,
    ReflectorState,
    ResourceKind,
    WatchRequest,
    compare_resource_versions,
)
from kuber_exec_core.testing import (
    DeploymentScenario,
    deployment_object,
    deployment_scenarios,
    pod_object,
    pod_objects,
    replica_set_object,
)

NS = "demo"


def _ok(value: object) -> ApiResponse:
    return ApiResponse(status=200, body=json.dumps(value).encode())


def _status(code: int, reason: str = "Failure", message: str = "no") -> dict[str, Any]:
    return {
        "kind": "Status",
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    }


def _with_version(value: dict[str, Any], version: str) -> dict[str, Any]:
    value = json.loads(json.dumps(value))
    value["metadata"]["resourceVersion"] = version
    return value


def _pod(name: str, version: str = "5", uid: str | None = None, **extra: Any) -> dict[str, Any]:
    value = pod_object(
        namespace=NS, name=name, uid=uid or f"uid-{name}", labels={"app": "web"}, **extra
    )
    return _with_version(value, version)


def _page(
    items: list[dict[str, Any]], version: str = "10", token: str | None = None
) -> ApiResponse:
    metadata: dict[str, Any] = {"resourceVersion": version}
    if token is not None:
        metadata["continue"] = token
    return _ok({"kind": "List", "metadata": metadata, "items": items})


def _line(kind: str, value: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": value}).encode() + b"\n"


def _bookmark(version: str) -> bytes:
    return _line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": version}})


def _synced_pods(*items: dict[str, Any], version: str = "10") -> Reflector[PodRecord]:
    reflector = Reflector(PODS, NS)
    reflector.list_received(_page(list(items), version))
    assert reflector.state is ReflectorState.WATCHING
    return reflector


# -- JSON lines ------------------------------------------------------------------------------------

STREAM = _line("ADDED", _pod("a")) + _bookmark("12") + _line("DELETED", _pod("a", "13"))


def test_lines_split_at_every_byte_come_out_whole() -> None:
    expected = JsonLinesDecoder().feed(STREAM)
    assert len(expected) == 3
    for cut in range(len(STREAM) + 1):
        for second in (cut, (cut + len(STREAM)) // 2):
            decoder = JsonLinesDecoder()
            lines = decoder.feed(STREAM[:cut])
            lines += decoder.feed(STREAM[cut:second])
            lines += decoder.feed(STREAM[second:])
            assert lines == expected, cut
            assert decoder.pending_bytes == 0


def test_one_byte_at_a_time() -> None:
    decoder = JsonLinesDecoder()
    lines = [line for byte in STREAM for line in decoder.feed(bytes([byte]))]
    assert lines == JsonLinesDecoder().feed(STREAM)


def test_blank_lines_are_skipped_and_the_tail_is_kept() -> None:
    decoder = JsonLinesDecoder()
    assert decoder.feed(b'\n  \n{"a": 1}\r\n{"b"') == [b'{"a": 1}\r']
    assert decoder.pending_bytes == 4
    assert decoder.reset() == b'{"b"'
    assert decoder.pending_bytes == 0


@pytest.mark.parametrize(
    ("chunks", "fails"),
    [
        ([b"x" * 8 + b"\n"], False),  # exactly the limit
        ([b"x" * 9 + b"\n"], True),  # one over, newline in the same read
        ([b"x" * 9], True),  # one over, no newline yet
        ([b"x" * 5, b"x" * 4], True),  # over across reads
        ([b"x" * 8 + b"\n" + b"y" * 8 + b"\n"], False),  # each line is bounded, not the read
    ],
)
def test_the_line_limit(chunks: list[bytes], fails: bool) -> None:
    decoder = JsonLinesDecoder(max_line_bytes=8)
    if not fails:
        for chunk in chunks:
            decoder.feed(chunk)
        return
    for chunk in chunks[:-1]:
        decoder.feed(chunk)
    with pytest.raises(ExecError) as caught:
        decoder.feed(chunks[-1])
    assert caught.value.code is ExecErrorCode.FAILED
    assert "8-byte line limit" in caught.value.message
    assert decoder.pending_bytes == 0


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_the_line_limit_is_a_positive_int(value: Any) -> None:
    with pytest.raises(ExecError) as caught:
        JsonLinesDecoder(max_line_bytes=value)
    assert caught.value.code is ExecErrorCode.INVALID


# -- resource versions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("9", "10", -1),  # numerically, not as text
        ("10", "9", 1),
        ("10", "10", 0),
        ("010", "10", 0),
        ("abc", "10", None),  # opaque: no order
        ("10", "", None),
        ("²", "1", None),  # a Unicode digit is not an etcd revision
        ("-1", "1", None),
    ],
)
def test_resource_versions_are_ordered_only_as_integers(
    left: str, right: str, order: int | None
) -> None:
    assert compare_resource_versions(left, right) == order


# -- LIST ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (DEPLOYMENTS, "/apis/apps/v1/namespaces/demo/deployments"),
        (REPLICA_SETS, "/apis/apps/v1/namespaces/demo/replicasets"),
        (PODS, "/api/v1/namespaces/demo/pods"),
    ],
)
def test_list_then_watch_requests(kind: ResourceKind[Any], path: str) -> None:
    reflector = Reflector(kind, NS, page_size=2, watch_timeout_seconds=300)
    first = reflector.next_event()
    assert first == ApiGet(path=path, query=(("limit", "2"),))
    assert not reflector.synced
    reflector.list_received(_page([], "41", token="t1"))
    assert reflector.next_event() == ApiGet(path=path, query=(("limit", "2"), ("continue", "t1")))
    assert not reflector.synced
    reflector.list_received(_page([], "41"))
    assert reflector.synced
    watch = reflector.next_event()
    assert isinstance(watch, WatchRequest)
    assert watch.path == path
    assert watch.query == (
        ("watch", "1"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", "41"),
        ("timeoutSeconds", "300"),
    )
    assert watch.resource_version == "41"
    assert (
        watch.target
        == f"{path}?watch=1&allowWatchBookmarks=true&resourceVersion=41&timeoutSeconds=300"
    )


def test_the_namespace_is_quoted_into_the_path() -> None:
    assert Reflector(PODS, "a/b").next_event() == ApiGet(
        path="/api/v1/namespaces/a%2Fb/pods", query=(("limit", "500"),)
    )


def test_a_relist_replaces_the_snapshot_only_when_complete() -> None:
    reflector = _synced_pods(_pod("a"), _pod("b"))
    view = reflector.items
    reflector.relist()
    reflector.list_received(_page([_pod("c")], "20", token="more"))
    assert sorted(reflector.items) == ["a", "b"]  # half a relist never shows
    assert reflector.synced
    reflector.list_received(_page([_pod("d")], "20"))
    assert sorted(reflector.items) == ["c", "d"]
    assert sorted(view) == ["c", "d"]  # an earlier view follows the relist
    assert reflector.resource_version == "20"
    assert reflector.lists_completed == 2


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (_ok({"kind": "List", "metadata": {}, "items": []}), "has no metadata.resourceVersion"),
        (_ok({"metadata": {"resourceVersion": "3"}, "items": {}}), "items is not a list"),
        (ApiResponse(status=200, body=b"<html>"), "is not JSON"),
        (_ok([1]), "is not an object"),
        (_page([{"metadata": {"uid": "x"}}]), "has no metadata.name"),
        (_page([{"metadata": {"name": 3}}]), "metadata.name is not a string"),
        (_page([{"metadata": {"name": "a"}, "spec": {"containers": {}}}]), "is not a list"),
    ],
)
def test_a_malformed_list_is_exec_failed_and_restarts(response: ApiResponse, message: str) -> None:
    reflector = Reflector(PODS, NS)
    reflector.list_received(_page([_pod("a")], "10", token="t"))
    with pytest.raises(ExecError) as caught:
        reflector.list_received(response)
    assert caught.value.code is ExecErrorCode.FAILED
    assert message in caught.value.message
    assert reflector.next_event() == ApiGet(
        path="/api/v1/namespaces/demo/pods", query=(("limit", "500"),)
    )
    reflector.list_received(_page([], "11"))
    assert dict(reflector.items) == {}  # the first page of the failed LIST is gone


def test_a_failed_page_is_retried_as_is() -> None:
    reflector = Reflector(PODS, NS)
    reflector.list_received(_page([], "10", token="t"))
    page = reflector.next_event()
    body = json.dumps(_status(500, message="etcd is sad")).encode()
    with pytest.raises(ExecError) as caught:
        reflector.list_received(ApiResponse(status=500, body=body))
    assert caught.value.message == (
        "Kubernetes API GET /api/v1/namespaces/demo/pods failed with HTTP 500: etcd is sad"
    )
    assert reflector.next_event() is page


def test_an_expired_continue_token_restarts_the_list_silently() -> None:
    reflector = Reflector(PODS, NS)
    reflector.list_received(_page([_pod("a")], "10", token="t"))
    reflector.list_received(ApiResponse(status=410, body=json.dumps(_status(410)).encode()))
    assert reflector.next_event() == ApiGet(
        path="/api/v1/namespaces/demo/pods", query=(("limit", "500"),)
    )
    reflector.list_received(_page([_pod("b")], "30"))
    assert sorted(reflector.items) == ["b"]


def test_a_410_on_a_first_page_is_an_error() -> None:
    reflector = Reflector(PODS, NS)
    with pytest.raises(ExecError, match="HTTP 410"):
        reflector.list_received(ApiResponse(status=410, body=b""))


def test_endless_paging_is_refused() -> None:
    reflector = Reflector(PODS, NS, max_pages=3)
    reflector.list_received(_page([], "1", token="same"))
    with pytest.raises(ExecError, match="did not finish paging after 2 pages"):
        reflector.list_received(_page([], "1", token="same"))
    for token in ("p1", "p2"):
        reflector.list_received(_page([], "1", token=token))
    with pytest.raises(ExecError, match="did not finish paging after 3 pages"):
        reflector.list_received(_page([], "1", token="p3"))


def test_a_list_older_than_what_was_seen_is_refused() -> None:
    reflector = _synced_pods(_pod("a"), version="50")
    reflector.relist()
    with pytest.raises(ExecError, match="answered resourceVersion 7, older than 50"):
        reflector.list_received(_page([], "7"))
    assert sorted(reflector.items) == ["a"]
    assert reflector.state is ReflectorState.LISTING


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.watch_data(b"{}\n"),
        lambda r: r.watch_ended(),
        lambda r: r.watch_failed(ApiResponse(status=500, body=b"")),
    ],
)
def test_watch_feeders_refuse_while_listing(call: Any) -> None:
    with pytest.raises(ExecError, match="while no watch was asked for"):
        call(Reflector(PODS, NS))


def test_list_received_refuses_while_watching() -> None:
    with pytest.raises(ExecError, match="not asked for"):
        _synced_pods().list_received(_page([]))


@pytest.mark.parametrize(
    "options",
    [{"page_size": 0}, {"max_pages": -1}, {"watch_timeout_seconds": 0}, {"page_size": True}],
)
def test_options_are_positive_ints(options: dict[str, Any]) -> None:
    with pytest.raises(ExecError) as caught:
        Reflector(PODS, NS, **options)
    assert caught.value.code is ExecErrorCode.INVALID


# -- WATCH events ----------------------------------------------------------------------------------


def _ready(name: str, version: str, uid: str | None = None) -> dict[str, Any]:
    return _pod(name, version, uid, containers=[("app", "running", True)])


# Each case: the snapshot "a" at resourceVersion 10 (uid-a) is listed, then one event arrives.
# Expected: whether "a" is then present, its readiness (None when absent), and the resume point.
EVENT_CASES = [
    ("added-new", _line("ADDED", _ready("b", "11")), {"a": None, "b": True}, "11"),
    ("modified", _line("MODIFIED", _ready("a", "11")), {"a": True}, "11"),
    ("modified-replayed", _line("MODIFIED", _ready("a", "10")), {"a": None}, "10"),
    ("modified-older", _line("MODIFIED", _ready("a", "9")), {"a": None}, "10"),
    ("modified-opaque", _line("MODIFIED", _ready("a", "x9")), {"a": True}, "x9"),
    ("deleted", _line("DELETED", _pod("a", "12")), {}, "12"),
    ("deleted-older-incarnation", _line("DELETED", _pod("a", "9", "old")), {"a": None}, "10"),
    ("deleted-unknown", _line("DELETED", _pod("zz", "12")), {"a": None}, "12"),
    ("deleted-opaque-same-uid", _line("DELETED", _pod("a", "x1")), {}, "x1"),
    ("deleted-opaque-other-uid", _line("DELETED", _pod("a", "x1", "old")), {"a": None}, "x1"),
    ("bookmark", _bookmark("15"), {"a": None}, "15"),
    ("bookmark-stale", _bookmark("3"), {"a": None}, "10"),
    ("no-version", _line("MODIFIED", _ready("a", "")), {"a": True}, "10"),
]


@pytest.mark.parametrize(
    ("line", "expected", "version"), [c[1:] for c in EVENT_CASES], ids=[c[0] for c in EVENT_CASES]
)
def test_each_event_rule(line: bytes, expected: dict[str, bool | None], version: str) -> None:
    reflector = _synced_pods(_pod("a", "10"), version="10")
    assert reflector.watch_data(line) is True
    ready = {
        name: next((c.ready for c in record.containers), None)
        for name, record in reflector.items.items()
    }
    assert ready == expected
    assert reflector.resource_version == version
    reflector.watch_ended()
    resumed = reflector.next_event()
    assert isinstance(resumed, WatchRequest)
    assert resumed.resource_version == version


def test_a_dropped_watch_resumes_from_the_last_event_and_drops_the_half_event() -> None:
    reflector = _synced_pods(version="10")
    first = reflector.next_event()
    half = _line("ADDED", _pod("b", "12"))
    assert reflector.watch_data(_line("ADDED", _pod("a", "11")) + half[:20]) is True
    reflector.watch_ended()
    resumed = reflector.next_event()
    assert isinstance(resumed, WatchRequest)
    assert resumed is not first
    assert resumed.resource_version == "11"
    assert reflector.synced
    # The resumed stream starts clean: the dropped half does not prefix its first event.
    assert reflector.watch_data(half) is True
    assert sorted(reflector.items) == ["a", "b"]


@pytest.mark.parametrize(
    "status",
    [
        _status(410, "Expired", "too old resource version: 1 (5)"),
        _status(0, "Gone"),
        {"reason": "Expired"},
    ],
)
def test_an_error_410_event_relists_and_drops_the_rest_of_the_read(status: dict[str, Any]) -> None:
    reflector = _synced_pods(_pod("a"), version="10")
    data = _line("ERROR", status) + _line("ADDED", _pod("b", "11"))
    assert reflector.watch_data(data) is False
    assert reflector.state is ReflectorState.LISTING
    assert reflector.synced  # still as fresh as a watch: only a relist away
    assert sorted(reflector.items) == ["a"]
    assert isinstance(reflector.next_event(), ApiGet)


def test_an_http_410_on_the_watch_relists() -> None:
    reflector = _synced_pods(version="10")
    reflector.watch_failed(ApiResponse(status=410, body=json.dumps(_status(410)).encode()))
    assert reflector.state is ReflectorState.LISTING


def test_an_http_error_on_the_watch_retries_the_same_watch() -> None:
    reflector = _synced_pods(version="10")
    with pytest.raises(ExecError) as caught:
        reflector.watch_failed(
            ApiResponse(
                status=503,
                body=json.dumps(_status(503, "ServiceUnavailable", message="busy")).encode(),
            )
        )
    assert caught.value.code is ExecErrorCode.FAILED
    assert (
        caught.value.message
        == "Kubernetes API WATCH /api/v1/namespaces/demo/pods failed with HTTP 503: busy"
    )
    error = caught.value
    assert (error.http_status, error.status_reason, error.status_code) == (
        503,
        "ServiceUnavailable",
        503,
    )
    retry = reflector.next_event()
    assert isinstance(retry, WatchRequest)
    assert retry.resource_version == "10"


def test_an_error_event_other_than_410_resumes_with_an_error() -> None:
    reflector = _synced_pods(version="10")
    reflector.watch_data(_line("ADDED", _pod("a", "11")))
    with pytest.raises(ExecError) as caught:
        reflector.watch_data(_line("ERROR", _status(500, "InternalError", "etcd down")))
    assert caught.value.message == (
        "Kubernetes API WATCH /api/v1/namespaces/demo/pods failed with status 500: etcd down"
    )
    # The stream itself was a 200: the Status is in the event, not in the HTTP answer.
    error = caught.value
    assert (error.http_status, error.status_reason, error.status_code) == (
        None,
        "InternalError",
        500,
    )
    retry = reflector.next_event()
    assert isinstance(retry, WatchRequest)
    assert retry.resource_version == "11"
    assert reflector.synced


MALFORMED = [
    (b"not json\n", "the event is not JSON"),
    (b"[1, 2]\n", "the event is not an object"),
    (b'{"type": "ADDED"}\n', "has no type or no object"),
    (b'{"type": 1, "object": {}}\n', "has no type or no object"),
    (b'{"type": "ADDED", "object": []}\n', "has no type or no object"),
    (b'{"type": "SURPRISE", "object": {}}\n', "unknown type 'SURPRISE'"),
    (_line("BOOKMARK", {"metadata": {}}), "bookmark without metadata.resourceVersion"),
    (_line("DELETED", {"metadata": {"uid": "u"}}), "deletes an object without metadata.name"),
    (
        _line("ADDED", {"metadata": {"name": "p"}, "status": {"phase": 3}}),
        "status.phase is not a string",
    ),
    (_line("ADDED", {"metadata": {"uid": "u"}}), "has no metadata.name"),
    (b"[" * 100_000 + b"\n", "the event is not JSON"),
    (
        _line("ADDED", {"metadata": {"name": "x" * 200_000}}),
        "line limit",
    ),
]


@pytest.mark.parametrize(("data", "message"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_a_malformed_event_is_exec_failed_and_forces_an_unsynced_relist(
    data: bytes, message: str
) -> None:
    reflector = Reflector(PODS, NS, max_line_bytes=200_000)
    reflector.list_received(_page([_pod("a")], "10"))
    with pytest.raises(ExecError) as caught:
        reflector.watch_data(data)
    assert caught.value.code is ExecErrorCode.FAILED
    assert message in caught.value.message
    assert reflector.state is ReflectorState.LISTING
    assert not reflector.synced  # an event is lost: only the relist can repair it
    assert sorted(reflector.items) == ["a"]
    reflector.list_received(_page([_pod("b")], "20"))
    assert reflector.synced
    assert sorted(reflector.items) == ["b"]


def test_several_events_in_one_read_apply_in_order() -> None:
    reflector = _synced_pods(version="10")
    data = b"".join(
        [
            _line("ADDED", _pod("a", "11")),
            _line("MODIFIED", _ready("a", "12")),
            _line("ADDED", _pod("b", "13")),
            _line("DELETED", _pod("b", "14")),
            _bookmark("20"),
        ]
    )
    assert reflector.watch_data(data) is True
    assert [c.ready for c in reflector.items["a"].containers] == [True]
    assert sorted(reflector.items) == ["a"]
    assert reflector.resource_version == "20"


# -- one parser for REST and the cache ------------------------------------------------------------


def test_the_reflectors_read_with_the_rest_parsers() -> None:
    assert (DEPLOYMENTS.parse, REPLICA_SETS.parse, PODS.parse) == (
        parse_deployment,
        parse_replica_set,
        parse_pod,
    )
    get = DeploymentLookup(NS, "web").next_event()
    listing = PodListing(NS, LabelSelector.from_labels({"app": "web"})).next_event()
    assert get is not None
    assert listing is not None
    assert get.path == DEPLOYMENTS.object_path(NS, "web")
    assert listing.path == PODS.collection_path(NS) == Reflector(PODS, NS).next_event().path


def _full_pod() -> dict[str, Any]:
    return pod_object(
        namespace=NS,
        name="full",
        uid="uid-full",
        labels={"app": "web", "pod-template-hash": "abc"},
        owners=[RS_OWNER],
        phase="Running",
        deletion_timestamp="2024-01-01T00:00:00Z",
        containers=[("app", "running", True), ("sidecar", "waiting", False)],
    )


def test_the_cache_keeps_every_field_of_a_pod_record() -> None:
    full = _full_pod()
    expected = parse_pod(full)
    # Every field is set: a field the cache dropped or defaulted shows as a difference below.
    # (A new PodRecord field fails here until _full_pod sets it.)
    assert [f.name for f in attrs.fields(PodRecord) if not getattr(expected, f.name)] == []
    reflector = Reflector(PODS, NS)
    reflector.list_received(_page([_with_version(full, "5")]))
    listed = reflector.items["full"]
    reflector.watch_data(_line("MODIFIED", _with_version(full, "6")))
    watched = reflector.items["full"]
    assert watched is not listed
    for record in (listed, watched):
        for field in attrs.fields(PodRecord):
            assert getattr(record, field.name) == getattr(expected, field.name), field.name


@settings(max_examples=50, deadline=None)
@given(pod=pod_objects())
def test_the_cache_stores_what_the_pod_parser_gives(pod: dict[str, Any]) -> None:
    reflector = Reflector(PODS, NS)
    reflector.list_received(_page([_with_version(pod, "5")]))
    name = pod["metadata"]["name"]
    assert attrs.asdict(reflector.items[name]) == attrs.asdict(parse_pod(pod))


def test_pods_share_the_strings_they_repeat() -> None:
    # Decoded separately, as two events are: equal strings, distinct objects until interned.
    first, second = (parse_pod(json.loads(json.dumps(_full_pod()))) for _ in range(2))
    assert first.controller is not None
    assert second.controller is not None
    shared = [
        (next(iter(first.labels)), next(iter(second.labels))),
        (first.labels["app"], second.labels["app"]),
        (first.controller.uid, second.controller.uid),
        (first.controller.name, second.controller.name),
        (first.phase, second.phase),
        (first.containers[0].name, second.containers[0].name),
    ]
    assert all(a is b for a, b in shared)


def test_changes_moves_exactly_when_the_answers_can() -> None:
    # WatchStore remembers targets while no reflector's ``changes`` moves: it must move for
    # every change to ``items`` or ``synced``, and (so the memo is worth keeping) for nothing
    # else.
    reflector = Reflector(PODS, NS)
    before = reflector.changes
    reflector.list_received(_page([_pod("a")], "10"))
    assert reflector.changes == before + 1  # the LIST's snapshot
    steps: list[tuple[bytes, bool]] = [
        (_bookmark("11"), False),
        (_line("MODIFIED", _pod("a", "4")), False),  # a replay of an older version
        (_line("ADDED", _pod("b", "12")), True),
        (_line("MODIFIED", _pod("b", "13", phase="Pending")), True),
        (_line("DELETED", _pod("zzz", "14")), False),  # never seen
        (_line("DELETED", _pod("a", "15")), True),
    ]
    for line, moves in steps:
        count = reflector.changes
        reflector.watch_data(line)
        assert (reflector.changes != count) is moves, line
    count = reflector.changes
    with pytest.raises(ExecError):
        reflector.watch_data(b"not json\n")  # an event lost: unsynced until the relist
    assert not reflector.synced
    assert reflector.changes == count + 1
    reflector.list_received(_page([_pod("b", "16")], "16"))
    assert reflector.synced
    assert reflector.changes == count + 2


# -- the store -------------------------------------------------------------------------------------

OURS = {"app.kubernetes.io/managed-by": "kuber", "kuber.dev/workspace-uid": "ws-1"}
RS_OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "web-rs",
    "uid": "rs-1",
    "controller": True,
}


def _deployment() -> dict[str, Any]:
    return _with_version(
        deployment_object(
            namespace=NS,
            name="web",
            uid="dep-1",
            labels=OURS,
            match_labels={"app": "web"},
            containers=["app"],
        ),
        "3",
    )


def _replica_set(uid: str = "rs-1", owner_kind: str = "Deployment") -> dict[str, Any]:
    owner = {
        "apiVersion": "apps/v1",
        "kind": owner_kind,
        "name": "web",
        "uid": "dep-1",
        "controller": True,
    }
    return _with_version(replica_set_object(namespace=NS, name="web-rs", uid=uid, owner=owner), "4")


def _owned(name: str, owners: list[dict[str, Any]] | None = None, **labels: str) -> dict[str, Any]:
    value = pod_object(
        namespace=NS,
        name=name,
        uid=f"uid-{name}",
        labels=labels or {"app": "web"},
        owners=[RS_OWNER] if owners is None else owners,
        containers=[("app", "running", True)],
    )
    return _with_version(value, "5")


def _synced_store(
    deployments: list[dict[str, Any]],
    replica_sets: list[dict[str, Any]],
    pods: list[dict[str, Any]],
) -> WatchStore:
    store = WatchStore()
    watch = store.watch(NS)
    watch.deployments.list_received(_page(deployments))
    watch.replica_sets.list_received(_page(replica_sets))
    watch.pods.list_received(_page(pods))
    assert watch.synced
    assert watch.watching
    return store


def test_an_unsynced_namespace_does_not_answer() -> None:
    store = WatchStore()
    request = _request()
    assert store.resolve_target(request, ExecLimits()) is None
    watch = store.watch(NS)
    watch.deployments.list_received(_page([_deployment()]))
    watch.replica_sets.list_received(_page([_replica_set()]))
    assert not store.synced(NS)  # pods are not listed yet
    assert store.resolve_target(request, ExecLimits()) is None
    with pytest.raises(ExecError, match="namespace demo is not synced") as caught:
        store.get_deployment(NS, "web")
    assert caught.value.code is ExecErrorCode.FAILED
    with pytest.raises(ExecError, match="not synced"):
        store.list_pods(NS, LabelSelector.from_labels({"app": "web"}))
    watch.pods.list_received(_page([_owned("p")]))
    target = store.resolve_target(request, ExecLimits())
    assert target is not None
    assert (target.pod, target.pod_uid, target.deployment_uid) == ("p", "uid-p", "dep-1")


def _request(container: str | None = None) -> Any:
    from kuber_exec_core import ExecRequest, Workspace

    return ExecRequest(
        workspace=Workspace(project=NS, uid="ws-1"),
        deployment="web",
        command=["true"],
        container=container,
    )


def test_validation_comes_first() -> None:
    from kuber_exec_core import ExecRequest, Workspace

    bad = ExecRequest(workspace=Workspace(project=NS, uid="ws-1"), deployment="web", command=[])
    with pytest.raises(ExecError) as caught:
        WatchStore().resolve_target(bad, ExecLimits())
    assert caught.value.code is ExecErrorCode.INVALID


# Each case: one pod's owner references (and the ReplicaSet the namespace holds), and the
# Deployment uid the store must resolve for it.
OWNER_CASES = [
    ("owned", [RS_OWNER], _replica_set(), "dep-1"),
    ("stale-replica-set-uid", [{**RS_OWNER, "uid": "rs-old"}], _replica_set(), None),
    ("replica-set-gone", [RS_OWNER], None, None),
    ("replica-set-not-by-a-deployment", [RS_OWNER], _replica_set(owner_kind="StatefulSet"), None),
    ("not-a-controller", [{**RS_OWNER, "controller": False}], _replica_set(), None),
    ("controlled-by-a-statefulset", [{**RS_OWNER, "kind": "StatefulSet"}], _replica_set(), None),
    ("wrong-api-version", [{**RS_OWNER, "apiVersion": "extensions/v1beta1"}], _replica_set(), None),
    ("bare", [], _replica_set(), None),
]


@pytest.mark.parametrize(
    ("owners", "replica_set", "uid"), [c[1:] for c in OWNER_CASES], ids=[c[0] for c in OWNER_CASES]
)
def test_owner_resolution_rules(
    owners: list[dict[str, Any]], replica_set: dict[str, Any] | None, uid: str | None
) -> None:
    store = _synced_store(
        [_deployment()], [] if replica_set is None else [replica_set], [_owned("p", owners)]
    )
    (pod,) = store.list_pods(NS, LabelSelector.from_labels({"app": "web"}))
    assert pod.deployment_uid == uid


def test_list_pods_filters_by_selector_in_name_order() -> None:
    pods = [_owned("c"), _owned("a"), _owned("b", tier="db"), _owned("d", app="web", tier="db")]
    store = _synced_store([_deployment()], [_replica_set()], pods)
    assert [p.name for p in store.list_pods(NS, LabelSelector.from_labels({"app": "web"}))] == [
        "a",
        "c",
        "d",
    ]
    selector = LabelSelector.parse("tier in (db)")
    assert [p.name for p in store.list_pods(NS, selector)] == ["b", "d"]
    assert [p.name for p in store.list_pods(NS, LabelSelector.parse("!tier"))] == ["a", "c"]


def test_get_deployment_by_name() -> None:
    store = _synced_store([_deployment()], [], [])
    deployment = store.get_deployment(NS, "web")
    assert isinstance(deployment, Deployment)
    assert deployment.uid == "dep-1"
    assert store.get_deployment(NS, "other") is None


def test_the_store_follows_watch_events() -> None:
    store = _synced_store([_deployment()], [_replica_set()], [_owned("a"), _owned("b")])
    watch = store.namespace(NS)
    assert watch is not None
    watch.pods.watch_data(_line("DELETED", _with_version(_owned("a"), "11")))
    target = store.resolve_target(_request(), ExecLimits())
    assert target is not None
    assert target.pod == "b"
    watch.replica_sets.watch_data(_line("DELETED", _with_version(_replica_set(), "12")))
    with pytest.raises(ExecError) as caught:
        store.resolve_target(_request(), ExecLimits())
    assert caught.value.code is ExecErrorCode.TARGET_NOT_READY
    watch.deployments.watch_data(_line("DELETED", _with_version(_deployment(), "13")))
    with pytest.raises(ExecError) as caught:
        store.resolve_target(_request(), ExecLimits())
    assert (caught.value.code, caught.value.message) == (
        ExecErrorCode.TARGET_NOT_FOUND,
        "Deployment web was not found",
    )


def test_remembered_targets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kuber_exec_core._store.MAX_REMEMBERED_TARGETS", 1)
    store = _synced_store([_deployment()], [_replica_set()], [_owned("a")])
    watch = store.namespace(NS)
    assert watch is not None
    for container in (None, "app", None, "app"):
        target = store.resolve_target(_request(container), ExecLimits())
        assert target is not None
        assert (target.pod, target.container) == ("a", "app")
        assert len(watch._targets) == 1


def test_namespaces_are_separate_and_can_be_restarted() -> None:
    store = _synced_store([_deployment()], [_replica_set()], [_owned("a")])
    other = store.watch("other")
    assert not store.synced("other")
    assert store.synced(NS)
    assert len(store) == 2
    assert {w.namespace for w in store} == {NS, "other"}
    old = store.namespace(NS)
    assert old is not None
    restarted = store.watch(NS)
    assert not store.synced(NS)  # new reflectors start unsynced
    old.pods.watch_data(_line("ADDED", _owned("zombie")))  # a slow driver of the old ones
    reflectors: tuple[Reflector[Any], ...] = restarted.reflectors
    for reflector, items in zip(
        reflectors, ([_deployment()], [_replica_set()], [_owned("a")]), strict=True
    ):
        reflector.list_received(_page(items))
    assert [p.name for p in store.list_pods(NS, LabelSelector.from_labels({"app": "web"}))] == ["a"]
    assert store.namespace(NS) is restarted
    assert store.namespace("other") is other


def test_reflector_items_is_a_read_only_view() -> None:
    reflector = _synced_pods(_pod("a"))
    items = reflector.items
    with pytest.raises(TypeError):
        items["b"] = items["a"]  # type: ignore[index]
    assert isinstance(items["a"], PodRecord)
    empty: Reflector[ReplicaSet] = Reflector(REPLICA_SETS, NS)
    assert dict(empty.items) == {}


@settings(max_examples=100, deadline=None)
@given(scenario=deployment_scenarios())
def test_a_listed_store_gives_the_seed_answer(scenario: DeploymentScenario) -> None:
    """The scenarios' own expectations, over a store filled by one LIST of each kind."""
    store = WatchStore()
    watch = store.watch(scenario.namespace, page_size=scenario.page_size)
    objects = (
        [] if scenario.deployment is None else [scenario.deployment],
        list(scenario.replica_sets.values()),
        list(scenario.pods),
    )
    reflectors: tuple[Reflector[Any], ...] = watch.reflectors
    for reflector, items in zip(reflectors, objects, strict=True):
        while reflector.state is ReflectorState.LISTING:
            request = reflector.next_event()
            assert isinstance(request, ApiGet)
            start = int(dict(request.query).get("continue", "0"))
            end = start + scenario.page_size
            token = str(end) if end < len(items) else None
            page = [_with_version(item, "7") for item in items[start:end]]
            reflector.list_received(_page(page, "7", token=token))
    try:
        target = store.resolve_target(scenario.request, ExecLimits())
    except ExecError as error:
        assert (error.code, error.message) == scenario.expected_error  # noqa: PT017
    else:
        assert target == scenario.expected_target
