"""Resolution over the watch cache equals resolution over REST, whatever the watch went through.

A fake API server holds one namespace's objects with etcd-like revisions and a history. Hypothesis
interleaves changes to the objects (creates, updates, deletes, re-creations with a new uid) with
the driver's steps: LIST pages (some failing, some expiring), watches opened from the reflector's
own resourceVersion (some refused with 410 or 500), events delivered in arbitrary byte chunks,
bookmarks (current and stale), replays of older events and of deletes of older incarnations
(out-of-order deletes), ``ERROR`` 410 and 500 events, dropped streams and compactions. After the
watches catch up, the cache must hold exactly the server's final objects, and ``TargetResolution``
over it must give the target, or the ``(code, message)``, that the REST plans give over the same
final state.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as statistic
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecLimits, LabelSelector
from kuber_exec_core._kube_api import ApiGet, ApiResponse, DeploymentLookup, PodListing
from kuber_exec_core._objects import Deployment, Pod
from kuber_exec_core._request import ExecRequest
from kuber_exec_core._resolution import (
    FetchDeployment,
    FetchPods,
    TargetResolution,
    TargetResolved,
)
from kuber_exec_core._store import WatchStore
from kuber_exec_core._target import ResolvedTarget
from kuber_exec_core._watch import (
    DEPLOYMENTS,
    PODS,
    REPLICA_SETS,
    Reflector,
    ReflectorState,
    ResourceKind,
    WatchRequest,
)
from kuber_exec_core.testing import DeploymentScenario, deployment_scenarios

KINDS: dict[str, ResourceKind[Any]] = {
    "deployments": DEPLOYMENTS,
    "replicasets": REPLICA_SETS,
    "pods": PODS,
}


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _answer(status: int, value: object) -> ApiResponse:
    return ApiResponse(status=status, body=json.dumps(value).encode())


@attrs.frozen
class Event:
    revision: int
    resource: str
    type: str
    object: dict[str, Any]

    def line(self) -> bytes:
        return json.dumps({"type": self.type, "object": self.object}).encode() + b"\n"


class FakeApi:
    """One namespace of an API server: objects with revisions, a history, compaction."""

    def __init__(self, namespace: str, *, opaque: bool = False) -> None:
        self.namespace = namespace
        #: Opaque resourceVersions ("rv-101"): the reflector cannot order them.
        self.opaque = opaque
        self.revision = 100
        self.compacted = 0
        self.objects: dict[str, dict[str, dict[str, Any]]] = {r: {} for r in KINDS}
        self.history: list[Event] = []
        self._snapshots: list[tuple[int, list[dict[str, Any]]]] = []

    def version(self, revision: int) -> str:
        return f"rv-{revision}" if self.opaque else str(revision)

    def revision_of(self, version: str) -> int:
        return int(version.removeprefix("rv-") if self.opaque else version)

    # -- changes -----------------------------------------------------------------------------------

    def put(self, resource: str, value: dict[str, Any]) -> None:
        name = value["metadata"]["name"]
        current = self.objects[resource].get(name)
        if current is not None and current["metadata"].get("uid") != value["metadata"].get("uid"):
            self.delete(resource, name)  # uids are immutable: a new uid is a new incarnation
            current = None
        self.revision += 1
        stored = copy.deepcopy(value)
        stored["metadata"]["resourceVersion"] = self.version(self.revision)
        if resource != "replicasets":
            # Every version parses to a different snapshot, so a stale one applied shows.
            stored["metadata"].setdefault("labels", {})["revision"] = str(self.revision)
        self.objects[resource][name] = stored
        kind = "ADDED" if current is None else "MODIFIED"
        self.history.append(Event(self.revision, resource, kind, stored))

    def delete(self, resource: str, name: str) -> None:
        current = self.objects[resource].pop(name, None)
        if current is None:
            return
        self.revision += 1
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = self.version(self.revision)
        self.history.append(Event(self.revision, resource, "DELETED", gone))

    def compact(self) -> None:
        self.compacted = self.revision

    # -- reads -------------------------------------------------------------------------------------

    def events_after(self, resource: str, revision: int) -> list[Event]:
        return [e for e in self.history if e.resource == resource and e.revision > revision]

    def state_at(self, resource: str, revision: int) -> dict[str, tuple[int, str]]:
        """name -> (revision, uid) of each object of ``resource`` at ``revision``."""
        state: dict[str, tuple[int, str]] = {}
        for event in self.history:
            if event.revision > revision:
                break
            if event.resource != resource:
                continue
            name = event.object["metadata"]["name"]
            if event.type == "DELETED":
                state.pop(name, None)
            else:
                state[name] = (event.revision, event.object["metadata"].get("uid", ""))
        return state

    def list_page(self, request: ApiGet) -> ApiResponse:
        resource = request.path.rsplit("/", 1)[1]
        assert request.path == f"{KINDS[resource].collection_path(self.namespace)}"
        query = dict(request.query)
        assert "watch" not in query
        assert "resourceVersion" not in query  # relists are quorum reads
        limit = int(query["limit"])
        token = query.get("continue")
        if token is None:
            items = [self.objects[resource][n] for n in sorted(self.objects[resource])]
            self._snapshots.append((self.revision, items))
            snapshot, offset = len(self._snapshots) - 1, 0
        else:
            snapshot, offset = (int(part) for part in token.split(":"))
        revision, items = self._snapshots[snapshot]
        if revision < self.compacted:
            return _answer(
                410, _status(410, "Expired", "The provided continue parameter is too old")
            )
        metadata: dict[str, Any] = {"resourceVersion": self.version(revision)}
        if offset + limit < len(items):
            metadata["continue"] = f"{snapshot}:{offset + limit}"
        body = {"kind": "List", "metadata": metadata, "items": items[offset : offset + limit]}
        return _answer(200, body)

    def rest(self, request: ApiGet) -> ApiResponse:
        """The REST reads of ``DeploymentLookup`` and ``PodListing`` over the current state."""
        ns = self.namespace
        query = dict(request.query)
        for resource in ("deployments", "replicasets"):
            prefix = f"/apis/apps/v1/namespaces/{ns}/{resource}/"
            if request.path.startswith(prefix):
                found = self.objects[resource].get(request.path.removeprefix(prefix))
                if found is not None:
                    return _answer(200, found)
        if request.path == f"/api/v1/namespaces/{ns}/pods":
            selector = LabelSelector.parse(query["labelSelector"])
            pods = [
                self.objects["pods"][name]
                for name in sorted(self.objects["pods"])
                if selector.matches(self.objects["pods"][name]["metadata"].get("labels", {}))
            ]
            start, limit = int(query.get("continue", "0")), int(query["limit"])
            metadata = {"continue": str(start + limit)} if start + limit < len(pods) else {}
            return _answer(200, {"metadata": metadata, "items": pods[start : start + limit]})
        return _answer(404, _status(404, "NotFound", f"{request.path} not found"))


@attrs.define
class Stream:
    request: WatchRequest
    cursor: int


def _chunks(data: st.DataObject, payload: bytes) -> Iterator[bytes]:
    """``payload`` cut at arbitrary byte offsets (inside UTF-8 sequences and numbers too)."""
    cuts = sorted(
        data.draw(st.sets(st.integers(1, max(1, len(payload) - 1)), max_size=6))
        if len(payload) > 1
        else set()
    )
    start = 0
    for cut in [*cuts, len(payload)]:
        if cut > start:
            yield payload[start:cut]
            start = cut


class Driver:
    """Runs one reflector against the fake server, with faults drawn by hypothesis."""

    def __init__(self, api: FakeApi, reflector: Reflector[Any]) -> None:
        self.api = api
        self.reflector = reflector
        self.resource = reflector.kind.resource
        self.stream: Stream | None = None

    def step(self, data: st.DataObject | None) -> None:
        """One driver step; ``data`` ``None`` is a fault-free step that delivers everything."""
        before = self.reflector.resource_version
        self._step(data)
        after = self.reflector.resource_version
        if before is not None and not self.api.opaque:
            # Never backwards, whatever the stream said (stale bookmarks, replays, relists).
            assert after is not None
            assert self.api.revision_of(after) >= self.api.revision_of(before)

    def _step(self, data: st.DataObject | None) -> None:
        reflector = self.reflector
        request = reflector.next_event()
        if reflector.state is ReflectorState.LISTING:
            self.stream = None
            assert isinstance(request, ApiGet)
            if data is not None and data.draw(st.integers(0, 9)) == 0:
                response = _answer(500, _status(500, "InternalError", "etcd is sad"))
            else:
                response = self.api.list_page(request)
            try:
                reflector.list_received(response)
            except ExecError as error:
                _expect_failure(error, "HTTP 500")
            return
        assert isinstance(request, WatchRequest)
        opened = self.stream is not None and self.stream.request is request
        if not opened and not self._open(request, data):
            return
        assert self.stream is not None
        self._deliver(data)

    def _open(self, request: WatchRequest, data: st.DataObject | None) -> bool:
        query = dict(request.query)
        assert query["watch"] == "1"
        assert query["allowWatchBookmarks"] == "true"
        # The watch must resume exactly where the reflector is: never from further back.
        assert request.resource_version == self.reflector.resource_version
        revision = self.api.revision_of(request.resource_version)
        self.stream = None
        expired = revision < self.api.compacted
        if not expired and data is not None and data.draw(st.integers(0, 14)) == 0:
            with pytest.raises(ExecError, match="HTTP 500"):
                self.reflector.watch_failed(_answer(500, _status(500, "InternalError", "down")))
            return False
        if expired:
            status = _status(410, "Expired", f"too old resource version: {revision}")
            if data is None or data.draw(st.booleans()):
                self.reflector.watch_failed(_answer(410, status))
            else:
                line = json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
                assert self.reflector.watch_data(line) is False
            assert self.reflector.state is ReflectorState.LISTING
            return False
        self.stream = Stream(request, revision)
        return True

    def _deliver(self, data: st.DataObject | None) -> None:
        stream = self.stream
        assert stream is not None
        pending = self.api.events_after(self.resource, stream.cursor)
        count = len(pending) if data is None else data.draw(st.integers(0, len(pending)))
        lines: list[bytes] = []
        for event in pending[:count]:
            if data is not None and data.draw(st.integers(0, 2)) == 0:
                lines.append(self._replay(data, stream.cursor))
            lines.append(event.line())
            stream.cursor = event.revision
        closed = False
        if data is not None:
            faults = ["none"] * 6 + ["bookmark"] * 2 + ["stale-bookmark", "410", "500"]
            match data.draw(st.sampled_from(faults)):
                case "bookmark":
                    # A bookmark promises every event up to it was sent.
                    later = pending[count].revision - 1 if count < len(pending) else None
                    stream.cursor = later if later is not None else self.api.revision
                    lines.append(self._bookmark(stream.cursor))
                case "stale-bookmark" if not self.api.opaque:
                    lines.append(self._bookmark(data.draw(st.integers(1, stream.cursor))))
                case "410":
                    status = _status(410, "Expired", "too old resource version")
                    lines.append(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                    closed = True
                case "500":
                    status = _status(500, "InternalError", "watch broke")
                    lines.append(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                    closed = True
        payload = b"".join(lines)
        dropped = data is not None and not closed and data.draw(st.integers(0, 3)) == 0
        if dropped and data is not None:
            payload = payload[: data.draw(st.integers(0, len(payload)))]
        for chunk in _chunks(data, payload) if data is not None else [payload]:
            try:
                keep = self.reflector.watch_data(chunk)
            except ExecError as error:
                _expect_failure(error, "status 500")
                self.stream = None
                return
            if not keep:
                self.stream = None
                return
        assert not closed
        if dropped:
            self.reflector.watch_ended()
            self.stream = None

    def _replay(self, data: st.DataObject, cursor: int) -> bytes:
        """An older event the reflector must ignore: a duplicate, or a stale delete.

        With ordered versions: any event no newer than the object the reflector holds, or a
        delete of a name it does not hold. With opaque versions only the uid can tell: a delete
        of another incarnation, or of a name it does not hold.
        """
        state = self.api.state_at(self.resource, cursor)
        eligible = []
        for event in self.api.history:
            if event.resource != self.resource or event.revision > cursor:
                continue
            metadata = event.object["metadata"]
            held = state.get(metadata["name"])
            if held is None:
                ok = event.type == "DELETED"
            elif self.api.opaque:
                ok = event.type == "DELETED" and held[1] != metadata.get("uid", "")
            else:
                ok = held[0] >= event.revision
            if ok:
                eligible.append(event)
        if not eligible:
            return b""
        chosen = data.draw(st.sampled_from(eligible))
        held = state.get(chosen.object["metadata"]["name"])
        older = held is not None and held[0] > chosen.revision
        statistic(f"replay {chosen.type} {'older' if older else 'same/absent'}")
        return chosen.line()

    def _bookmark(self, revision: int) -> bytes:
        metadata = {"resourceVersion": self.api.version(revision)}
        value = {"kind": self.reflector.kind.kind, "apiVersion": "v1", "metadata": metadata}
        return json.dumps({"type": "BOOKMARK", "object": value}).encode() + b"\n"

    def caught_up(self) -> bool:
        return (
            self.reflector.state is ReflectorState.WATCHING
            and self.stream is not None
            and self.stream.request is self.reflector.next_event()
            and not self.api.events_after(self.resource, self.stream.cursor)
        )


def _expect_failure(error: ExecError, fragment: str) -> None:
    # Only the faults this harness injects may fail a feeder: anything else is a bug.
    assert fragment in error.message, error


# -- the objects that come and go ------------------------------------------------------------------


def _variants(
    data: st.DataObject, scenario: DeploymentScenario
) -> list[tuple[str, dict[str, Any]]]:
    """The scenario's objects, and changed versions of them, as ``(resource, object)``."""
    pool: list[tuple[str, dict[str, Any]]] = []
    if scenario.deployment is not None:
        pool.append(("deployments", scenario.deployment))
        changed = copy.deepcopy(scenario.deployment)
        changed["spec"]["template"]["spec"]["containers"].reverse()
        changed["metadata"]["labels"]["extra"] = "1"
        pool.append(("deployments", changed))
    for replica_set in scenario.replica_sets.values():
        pool.append(("replicasets", replica_set))
        reborn = copy.deepcopy(replica_set)
        reborn["metadata"]["uid"] = f"{reborn['metadata']['uid'][:-4]}beef"
        pool.append(("replicasets", reborn))
    for pod in scenario.pods:
        pool.append(("pods", pod))
        tweak = data.draw(st.sampled_from(["phase", "labels", "ready", "uid"]))
        changed = copy.deepcopy(pod)
        match tweak:
            case "phase":
                changed["status"]["phase"] = "Pending"
            case "labels":
                changed["metadata"]["labels"] = {"unrelated": "yes"}
            case "ready":
                for status in changed["status"]["containerStatuses"]:
                    status["ready"] = not status.get("ready", False)
            case "uid":
                changed["metadata"]["uid"] = f"{changed['metadata']['uid'][:-4]}cafe"
        pool.append(("pods", changed))
    return pool


def _mutate(data: st.DataObject, api: FakeApi, pool: list[tuple[str, dict[str, Any]]]) -> None:
    resource, value = data.draw(st.sampled_from(pool))
    if data.draw(st.integers(0, 2)) == 0:
        api.delete(resource, value["metadata"]["name"])
    else:
        api.put(resource, value)


# -- the two resolutions ---------------------------------------------------------------------------

Outcome = tuple[str, object, object]


def _outcome_of(resolve: Any) -> Outcome:
    try:
        target = resolve()
    except ExecError as error:
        return ("error", error.code, error.message)
    assert isinstance(target, ResolvedTarget)
    return ("target", target, None)


def _rest_plan(api: FakeApi, plan: DeploymentLookup | PodListing) -> None:
    while (request := plan.next_event()) is not None:
        plan.response_received(api.rest(request))


def _rest_deployment(api: FakeApi, namespace: str, name: str) -> Deployment | None:
    lookup = DeploymentLookup(namespace, name)
    _rest_plan(api, lookup)
    return lookup.result()


def _rest_pods(api: FakeApi, namespace: str, selector: LabelSelector) -> tuple[Pod, ...]:
    listing = PodListing(namespace, selector)
    _rest_plan(api, listing)
    return listing.result()


def _resolution(
    request: ExecRequest,
    get_deployment: Callable[[str, str], Deployment | None],
    list_pods: Callable[[str, LabelSelector], Sequence[Pod]],
) -> ResolvedTarget:
    # A synchronous driver of the plan over two reads: never remembered.
    plan = TargetResolution(request, ExecLimits())
    while True:
        match plan.next_event():
            case FetchDeployment(namespace=namespace, name=name):
                plan.deployment_received(get_deployment(namespace, name))
            case FetchPods(namespace=namespace, selector=selector):
                plan.pods_received(list_pods(namespace, selector))
            case TargetResolved(target=target):
                return target


def _rest_resolution(api: FakeApi, request: ExecRequest) -> ResolvedTarget:
    return _resolution(
        request,
        lambda namespace, name: _rest_deployment(api, namespace, name),
        lambda namespace, selector: _rest_pods(api, namespace, selector),
    )


def _store_resolution(store: WatchStore, request: ExecRequest) -> ResolvedTarget:
    return _resolution(request, store.get_deployment, store.list_pods)


def _check_remembered(store: WatchStore, request: ExecRequest) -> None:
    # WatchStore.resolve_target remembers targets: whatever the watch went through since, its
    # answer is the one a fresh resolution over the same snapshots gives.
    if store.synced(request.workspace.project):
        remembered = _outcome_of(lambda: store.resolve_target(request, ExecLimits()))
        assert remembered == _outcome_of(lambda: _store_resolution(store, request))


def _comparable(pod: Pod) -> Pod:
    # PodListing reads no ReplicaSet for a pod that cannot be chosen or counted, so such a pod's
    # owner is known only when a live pod shares its ReplicaSet: that field is not compared.
    if pod.phase == "Running" and not pod.deletion_timestamp:
        return pod
    return attrs.evolve(pod, deployment_uid=None)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenario=deployment_scenarios(max_pods=6), data=st.data())
def test_resolution_over_the_cache_equals_resolution_over_rest(
    scenario: DeploymentScenario, data: st.DataObject
) -> None:
    namespace = scenario.namespace
    api = FakeApi(namespace, opaque=data.draw(st.integers(0, 4)) == 0)
    pool = _variants(data, scenario)
    for resource, value in pool[::2]:  # the scenario's own objects, before anything watches
        if data.draw(st.integers(0, 4)) > 0:
            api.put(resource, value)

    store = WatchStore()
    watch = store.watch(namespace, page_size=data.draw(st.integers(1, 4)))
    drivers = [Driver(api, reflector) for reflector in watch.reflectors]

    # Compactions are rare: each one makes the next watch relist, and a relist repairs
    # whatever a wrong event handling did, hiding it.
    actions = ["mutate"] * 8 + ["step"] * 15 + ["compact", "resolve", "resolve"]
    for _ in range(data.draw(st.integers(0, 80))):
        match data.draw(st.sampled_from(actions)):
            case "mutate":
                _mutate(data, api, pool)
            case "step":
                data.draw(st.sampled_from(drivers)).step(data)
            case "compact":
                api.compact()
            case "resolve":
                _check_remembered(store, scenario.request)
    # Past their LISTs, the watches meet faults on changes of a few objects.
    for driver in drivers:
        for _ in range(data.draw(st.integers(0, 12))):
            if data.draw(st.booleans()):
                _mutate(data, api, pool)
            driver.step(data)
            _check_remembered(store, scenario.request)
    # Settle: the scenario's own objects last (so the final state is mostly the scenario's),
    # then the watches catch up without faults.
    for resource, value in pool[::2]:
        if data.draw(st.booleans()):
            api.put(resource, value)
    for driver in drivers:
        for _ in range(200):
            if driver.caught_up():
                break
            driver.step(None)
        assert driver.caught_up()

    assert store.synced(namespace)
    for driver in drivers:
        kind = driver.reflector.kind
        expected = {name: kind.parse(value) for name, value in api.objects[kind.resource].items()}
        assert dict(driver.reflector.items) == expected
        assert driver.reflector.resource_version is not None

    request = scenario.request
    name = request.deployment
    assert store.get_deployment(namespace, name) == _rest_deployment(api, namespace, name)
    deployment = store.get_deployment(namespace, name)
    if deployment is not None and not deployment.selector.is_empty:
        cached = store.list_pods(namespace, deployment.selector)
        listed = _rest_pods(api, namespace, deployment.selector)
        assert tuple(map(_comparable, cached)) == tuple(map(_comparable, listed))

    cache = _outcome_of(lambda: store.resolve_target(request, ExecLimits()))
    rest = _outcome_of(lambda: _rest_resolution(api, request))
    assert cache == rest
