"""The sandbox's watches over real HTTP: LIST resourceVersions, event streams, bookmarks, 410."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread
from support import eventually

PODS = "/api/v1/namespaces/w/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/w/deployments"
# Every read is bounded: a watch that never sends what a test waits for fails, never hangs.
TIMEOUT = httpx.Timeout(10.0)


def cluster() -> Cluster:
    model = Cluster()
    model.add_deployment("w", "web", workspace_uid="u", pods=[PodSpec(name="web-1")])
    return model


@pytest.fixture
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    with (
        run_sandbox_in_thread(cluster(), bookmark_interval=0.05) as sandbox,
        httpx.Client(base_url=sandbox.url, timeout=TIMEOUT) as http,
    ):
        yield sandbox, http


def listing(http: httpx.Client, path: str = PODS) -> dict[str, Any]:
    response = http.get(path)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


class Stream:
    """The events of one open watch, read line by line."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.iter_lines()

    def next(self, *, skip_bookmarks: bool = True) -> dict[str, Any]:
        for line in self._lines:
            if not line:
                continue
            event: dict[str, Any] = json.loads(line)
            if skip_bookmarks and event["type"] == "BOOKMARK":
                continue
            return event
        raise AssertionError("the watch ended")

    def drain(self) -> None:
        """Read to the end of the stream."""
        for _ in self._lines:
            pass


@contextmanager
def watch(http: httpx.Client, path: str, **params: str) -> Iterator[Stream]:
    query = {"watch": "1", "allowWatchBookmarks": "true", **params}
    with http.stream("GET", path, params=query) as response:
        assert response.status_code == 200
        yield Stream(response)


def test_lists_and_objects_carry_increasing_resource_versions(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    first = listing(http)
    version = int(first["metadata"]["resourceVersion"])
    (pod,) = first["items"]
    assert 0 < int(pod["metadata"]["resourceVersion"]) <= version
    # Nothing changed: the same versions again.
    assert listing(http) == first
    with sandbox.cluster.changing():
        found = sandbox.cluster.pod("w", "web-1")
        assert found is not None
        found.containers[0].ready = False
    second = listing(http)
    assert int(second["metadata"]["resourceVersion"]) > version
    assert int(second["items"][0]["metadata"]["resourceVersion"]) > version


def test_a_watch_streams_changes_after_its_resource_version(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=version) as stream:
        with sandbox.cluster.changing():
            found = sandbox.cluster.pod("w", "web-1")
            assert found is not None
            found.labels["extra"] = "1"
        modified = stream.next()
        assert (modified["type"], modified["object"]["metadata"]["labels"]["extra"]) == (
            "MODIFIED",
            "1",
        )
        assert int(modified["object"]["metadata"]["resourceVersion"]) > int(version)


def test_scale_delete_and_relabel_are_events_in_order(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=version) as stream:
        pods = sandbox.cluster.scale_deployment("w", "web", 2)
        added = stream.next()
        assert added["type"] == "ADDED"
        assert added["object"]["metadata"]["name"] in {p.name for p in pods} - {"web-1"}
        sandbox.cluster.delete_pod("w", "web-1")
        deleted = stream.next()
        assert (deleted["type"], deleted["object"]["metadata"]["name"]) == ("DELETED", "web-1")
        assert int(deleted["object"]["metadata"]["resourceVersion"]) > int(
            added["object"]["metadata"]["resourceVersion"]
        )
    with watch(http, DEPLOYMENTS, resourceVersion=version) as stream:
        # Replayed from the history: the ready count changed twice.
        assert stream.next()["object"]["status"]["replicas"] == 2
        assert stream.next()["object"]["status"]["replicas"] == 1


def test_a_watch_without_version_starts_with_every_object(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    _, http = served
    with watch(http, PODS) as stream:
        added = stream.next()
        assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "web-1")


def test_bookmarks_carry_a_current_resource_version(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    _, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=version) as stream:
        bookmark = stream.next(skip_bookmarks=False)
        assert bookmark["type"] == "BOOKMARK"
        assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(version)
        assert bookmark["object"]["kind"] == "Pod"


def test_compaction_expires_open_and_new_watches(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=version) as stream:
        sandbox.cluster.compact()
        error = stream.next()
        assert error["type"] == "ERROR"
        assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
        with pytest.raises(AssertionError, match="ended"):
            stream.next()
    gone = http.get(PODS, params={"watch": "1", "resourceVersion": version})
    assert gone.status_code == 410
    assert gone.json()["reason"] == "Expired"
    fresh = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=fresh) as stream:
        assert stream.next(skip_bookmarks=False)["type"] == "BOOKMARK"


def test_dropped_watches_end_without_the_end_of_the_body(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=version) as stream:
        stream.next(skip_bookmarks=False)
        sandbox.cluster.drop_watches()
        with pytest.raises(httpx.RemoteProtocolError):
            stream.drain()


def test_timeout_seconds_ends_the_stream_cleanly(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with (
        watch(http, PODS, resourceVersion=version, timeoutSeconds="1") as stream,
        pytest.raises(AssertionError, match="ended"),
    ):
        stream.next()


def test_a_quiet_change_shows_in_watches_only_after_a_rest_read(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, http = served
    version = listing(http)["metadata"]["resourceVersion"]
    with watch(http, PODS, resourceVersion=version) as stream:
        with sandbox.cluster.changing(quiet=True):
            del sandbox.cluster.namespaces["w"].pods["web-1"]
        # Two bookmarks: the watch looked at least once since the change, and did not see it.
        assert stream.next(skip_bookmarks=False)["type"] == "BOOKMARK"
        assert stream.next(skip_bookmarks=False)["type"] == "BOOKMARK"
        assert listing(http)["items"] == []
        assert stream.next()["type"] == "DELETED"


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"resourceVersion": "x"}, 400),
        ({"timeoutSeconds": "-1"}, 400),
        ({"labelSelector": "app=web"}, 400),
    ],
)
def test_bad_watch_queries_are_refused(
    served: tuple[Sandbox, httpx.Client], params: dict[str, str], status: int
) -> None:
    _, http = served
    response = http.get(PODS, params={"watch": "1", **params})
    assert response.status_code == status
    assert response.json()["kind"] == "Status"


def test_cluster_wide_watches_are_refused(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    assert http.get("/api/v1/pods", params={"watch": "1"}).status_code == 405


def test_pages_skip_nothing_when_an_object_goes_between_pages() -> None:
    model = Cluster()
    model.add_deployment(
        "w", "web", workspace_uid="u", pods=[PodSpec(name=f"p{i}") for i in range(4)]
    )
    with run_sandbox_in_thread(model) as sandbox, httpx.Client(base_url=sandbox.url) as http:
        first = http.get(PODS, params={"limit": 2}).json()
        assert [i["metadata"]["name"] for i in first["items"]] == ["p0", "p1"]
        sandbox.cluster.delete_pod("w", "p0")
        token = first["metadata"]["continue"]
        second = http.get(PODS, params={"limit": 2, "continue": token}).json()
        assert [i["metadata"]["name"] for i in second["items"]] == ["p2", "p3"]
        assert "continue" not in second["metadata"]


def test_scale_deployment_refuses_what_it_cannot_do() -> None:
    model = cluster()
    with pytest.raises(ValueError, match="negative"):
        model.scale_deployment("w", "web", -1)
    with pytest.raises(KeyError):
        model.scale_deployment("w", "nope", 1)
    model.add_deployment("w", "bare", workspace_uid="u", pods=[])
    sets = model.namespaces["w"].replica_sets
    for name in [n for n in sets if n.startswith("bare-")]:
        del sets[name]
    with pytest.raises(KeyError, match="controls no ReplicaSet"):
        model.scale_deployment("w", "bare", 1)
    assert [p.name for p in model.scale_deployment("w", "web", 3)][:1] == ["web-1"]
    assert len(model.scale_deployment("w", "web", 0)) == 0
    assert not model.namespaces["w"].pods


def test_listeners_hear_every_touch_until_removed() -> None:
    model = cluster()
    heard: list[int] = []
    remove = model.add_listener(lambda: heard.append(model.resource_version))
    model.touch()
    with model.changing(quiet=True):
        pass
    with model.changing():
        pass
    remove()
    remove()  # idempotent
    model.touch()
    assert len(heard) == 2


def test_a_watch_ends_when_its_client_goes_even_without_bookmarks(
    served: tuple[Sandbox, httpx.Client],
) -> None:
    sandbox, _ = served
    version = "1"
    with httpx.Client(base_url=sandbox.url, timeout=TIMEOUT) as other:
        query = {"watch": "1", "resourceVersion": version}  # no bookmarks: a silent stream
        with other.stream("GET", PODS, params=query) as response:
            assert response.status_code == 200
            eventually(lambda: sandbox.open_watches == 1, "the watch to open")
    # The client closed its connection and nothing happened in the cluster since.
    eventually(lambda: sandbox.open_watches == 0, "the watch to end")
