"""Resource versions and watch history: what the served model looked like, change by change.

The cluster model is plain mutable objects a test edits in place, so nothing records a change as
it happens. The journal finds changes by rendering: :meth:`Journal.sync` renders one namespace's
Pods, Deployments and ReplicaSets and compares each object's JSON with what it rendered last
time. An object that is new, differs, or is gone gets the next cluster-wide resourceVersion and
an ``ADDED``/``MODIFIED``/``DELETED`` event in the history, which watches replay and follow.

A REST read of a namespace always syncs it first, so LIST answers are never stale; watches sync
their namespace after every :meth:`~kuber_exec_sandbox.Cluster.touch`. Every call here runs with
the cluster's lock held (the model may be changed from another thread under it).

The history keeps the last :data:`HISTORY_LIMIT` events; a watch from a resourceVersion older
than the oldest one it still holds (or than the last :meth:`~kuber_exec_sandbox.Cluster.compact`)
is too old: ``410 Gone``.
"""

from __future__ import annotations

import bisect
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

import attrs

from . import _render
from ._cluster import Cluster, Namespace, PodObject

__all__ = ["HISTORY_LIMIT", "RESOURCES", "Journal", "WatchEvent", "journal_of"]

JSON = dict[str, Any]
#: Events kept for watches to resume from (the API server's watch cache keeps a window too).
HISTORY_LIMIT = 10_000
#: The namespaced resources the journal renders.
RESOURCES = ("pods", "deployments", "replicasets")


@attrs.frozen
class WatchEvent:
    """One change: its resourceVersion, where it happened, and the object as it became."""

    resource_version: int
    resource: str
    namespace: str
    type: str
    object: JSON


def _with_version(value: JSON, version: int) -> JSON:
    return {**value, "metadata": {**value["metadata"], "resourceVersion": str(version)}}


def _counts(pods: list[PodObject]) -> tuple[int, int]:
    return sum(1 for p in pods if p.ready), len(pods)


def _render_namespace(cluster: Cluster, ns: Namespace) -> dict[str, dict[str, JSON]]:
    rendered: dict[str, dict[str, JSON]] = {
        "pods": {name: _render.pod_json(pod) for name, pod in ns.pods.items()},
        "deployments": {},
        "replicasets": {},
    }
    for name, deployment in ns.deployments.items():
        counts = _counts(cluster.pods_of(deployment))
        rendered["deployments"][name] = _render.deployment_json(deployment, *counts)
    for name, replica_set in ns.replica_sets.items():
        owned = [
            p for p in ns.pods.values() if p.owner is not None and p.owner.uid == replica_set.uid
        ]
        rendered["replicasets"][name] = _render.replica_set_json(replica_set, *_counts(owned))
    return rendered


class Journal:
    """The rendered state and event history of one :class:`Cluster` (see the module docstring)."""

    def __init__(self, cluster: Cluster, history_limit: int = HISTORY_LIMIT) -> None:
        self._cluster = weakref.ref(cluster)
        self._limit = history_limit
        # (resource, namespace) -> name -> (JSON as rendered with the placeholder version, version)
        self._objects: dict[tuple[str, str], dict[str, tuple[JSON, int]]] = {}
        self._synced_changes: dict[str, int] = {}
        self._events: deque[WatchEvent] = deque()
        # Absolute index of _events[0] in the history, so cursors survive trimming.
        self._first = 0
        # Watches from a resourceVersion below this one are too old (410).
        self.oldest_valid = 0
        self._compactions = cluster.compactions
        #: Bumped by every compaction: open watches end with ``ERROR`` 410 when it changes.
        self.epoch = 0

    @property
    def end(self) -> int:
        """The cursor just past the newest event."""
        return self._first + len(self._events)

    def _model(self) -> Cluster:
        cluster = self._cluster()
        assert cluster is not None  # The journal lives as long as its cluster.
        return cluster

    def refresh(self) -> None:
        """Apply a pending :meth:`Cluster.compact`, and sync every namespace touched since its
        last sync (what a woken watch calls)."""
        cluster = self._model()
        if cluster.compactions != self._compactions:
            self._compactions = cluster.compactions
            self._first += len(self._events)
            self._events.clear()
            self.oldest_valid = cluster.resource_version
            self.epoch += 1
        for namespace in list(self._synced_changes):
            if self._synced_changes[namespace] != cluster.changes:
                self.sync(namespace)

    def sync(self, namespace: str) -> None:
        """Render ``namespace`` and record every object that appeared, changed or went away."""
        cluster = self._model()
        ns = cluster.namespaces.get(namespace)
        if ns is None and namespace not in self._synced_changes:
            return  # Never had objects: nothing to record (and no entry per unknown name).
        self._synced_changes[namespace] = cluster.changes
        rendered = _render_namespace(cluster, ns) if ns is not None else {}
        for resource in RESOURCES:
            current = rendered.get(resource, {})
            known = self._objects.setdefault((resource, namespace), {})
            for name in sorted(current):
                value = current[name]
                previous = known.get(name)
                if previous is not None and previous[0] == value:
                    continue
                version = self._next_version(cluster)
                known[name] = (value, version)
                kind = "ADDED" if previous is None else "MODIFIED"
                self._record(version, resource, namespace, kind, _with_version(value, version))
            for name in sorted(set(known) - set(current)):
                value, _ = known.pop(name)
                version = self._next_version(cluster)
                self._record(version, resource, namespace, "DELETED", _with_version(value, version))

    def sync_all(self) -> None:
        """Sync every namespace of the model (and any it no longer has)."""
        for namespace in sorted(set(self._model().namespaces) | set(self._synced_changes)):
            self.sync(namespace)

    def _next_version(self, cluster: Cluster) -> int:
        cluster.resource_version += 1
        return cluster.resource_version

    def _record(self, version: int, resource: str, namespace: str, kind: str, value: JSON) -> None:
        self._events.append(WatchEvent(version, resource, namespace, kind, value))
        while len(self._events) > self._limit:
            dropped = self._events.popleft()
            self._first += 1
            self.oldest_valid = max(self.oldest_valid, dropped.resource_version)

    def items(self, resource: str, namespace: str) -> list[JSON]:
        """The objects of ``resource`` in ``namespace`` by name, each with its resourceVersion
        (call :meth:`sync` first for the current state)."""
        known = self._objects.get((resource, namespace), {})
        return [_with_version(*known[name]) for name in sorted(known)]

    def watched(self, namespace: str) -> None:
        """Keep ``namespace`` in :meth:`refresh`'s syncs from now on."""
        self._synced_changes.setdefault(namespace, -1)

    def cursor_after(self, version: int) -> int | None:
        """The cursor of the first event newer than ``version``; ``None`` when that is too old
        (events after it were compacted away)."""
        if version < self.oldest_valid:
            return None
        versions = [event.resource_version for event in self._events]
        return self._first + bisect.bisect_right(versions, version)

    def events(self, cursor: int) -> Iterator[WatchEvent]:
        """The events from ``cursor`` (as :meth:`cursor_after` or :attr:`end` gave) on."""
        start = max(cursor - self._first, 0)
        for index in range(start, len(self._events)):
            yield self._events[index]


_JOURNALS: weakref.WeakKeyDictionary[Cluster, Journal] = weakref.WeakKeyDictionary()


def journal_of(cluster: Cluster) -> Journal:
    """The journal of ``cluster``, created on first use (call with the cluster's lock held)."""
    journal = _JOURNALS.get(cluster)
    if journal is None:
        journal = _JOURNALS[cluster] = Journal(cluster)
    return journal
