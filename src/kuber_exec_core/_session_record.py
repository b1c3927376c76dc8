"""The shared record of open sessions, and the replicas' heartbeats: names, bodies, changes (pure).

Cluster-wide limits (``ClusterSlots``) keep two kinds of ``coordination.k8s.io/v1`` Lease in the
service's Lease namespace:

- one **heartbeat** per replica (:func:`heartbeat_name`), renewed every ``renew_interval``: the
  only writes that recur while sessions stay open, so they grow with the replicas, not with the
  sessions;
- one **session record** per workspace that has sessions open (:func:`record_name`: project
  *and* uid, the seed's workspace), whose annotation :data:`SESSIONS_ANNOTATION` lists them:
  each session's key, its replica, and once its command started the pod and container it runs
  in and its supervision id (what a cleanup needs). It changes only when a session starts, moves
  to its pod, or ends; every change is an update carrying the ``resourceVersion`` read (the API
  server's optimistic concurrency), so two replicas never both take the last free place.

A session counts against its workspace's limit until its entry is removed, and the entries of a
dead replica (its heartbeat expired or gone) are removed only after their processes were cleaned
up: the limit is never exceeded by what a dead replica left running. This module says what to
send and what an answer means; the async layer (``kuber_exec_anyio._kubernetes``) does the I/O.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._lease_slots import lease_body, parse_micro_time
from ._target import ResolvedTarget

__all__ = [
    "CHANGED_ANNOTATION",
    "IDLE_RECORD_SECONDS",
    "WRITER_MEMORY_SECONDS",
    "MANAGED_BY",
    "MAX_RECORD_BYTES",
    "PROJECT_ANNOTATION",
    "ROLE_LABEL",
    "SESSIONS_ANNOTATION",
    "UID_ANNOTATION",
    "Add",
    "Admission",
    "Change",
    "Plan",
    "Remove",
    "SessionEntry",
    "SessionRecord",
    "SetTarget",
    "heartbeat_body",
    "heartbeat_name",
    "heartbeat_expiries",
    "plan_changes",
    "record_body",
    "RECORD_SHARDS",
    "record_name",
    "shard_of",
]

JSON = dict[str, Any]

#: The label every object of kuber-exec's carries.
MANAGED_BY = ("app.kubernetes.io/managed-by", "kuber-exec")
#: ``replica`` on heartbeats, ``sessions`` on session records (a LIST selects one kind).
ROLE_LABEL = "kuber-exec.io/role"
#: The session record's entries, compact JSON (see :class:`SessionEntry`).
SESSIONS_ANNOTATION = "kuber-exec.io/sessions"
#: The workspace a record belongs to, for people reading it (the name is a digest).
PROJECT_ANNOTATION = "kuber-exec.io/project"
UID_ANNOTATION = "kuber-exec.io/uid"
#: When the record last changed (POSIX seconds, the writer's clock): an empty record unchanged
#: for :data:`IDLE_RECORD_SECONDS` is deleted by the sweep.
CHANGED_ANNOTATION = "kuber-exec.io/changed"
#: How long an empty record stays. Writers forget what they know of a record after
#: :data:`WRITER_MEMORY_SECONDS` without a change, far less: so no replica updates a record from
#: a memory older than its deletion (an update of a deleted Lease would create it again, with
#: what that memory held).
IDLE_RECORD_SECONDS = 3600.0
WRITER_MEMORY_SECONDS = 600.0
#: The largest sessions annotation written. The API server refuses an object whose annotations
#: exceed 256 KiB; an entry is about 200 bytes, so a record holds about a thousand sessions.
MAX_RECORD_BYTES = 200_000

_NAME_CHARACTERS = re.compile(r"[^a-z0-9-]+")


def _digest(*parts: str) -> str:
    # Each part prefixed by its length: no two tuples of parts share an input.
    joined = "".join(f"{len(part)}:{part}" for part in parts)
    return hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()


#: Records of a workspace without a limit: its sessions are spread over this many (a record
#: holds about a thousand), by session key. A limited workspace has one record (shard 0), where
#: the limit is counted.
RECORD_SHARDS = 64


def record_name(project: str, uid: str, shard: int = 0) -> str:
    """The Lease name of the workspace ``(project, uid)``'s record ``shard``: a digest of both
    (so two workspaces of one project have two records, and any project name fits)."""
    base = f"sessions-{_digest(project, uid)[:24]}"
    return base if shard == 0 else f"{base}-{shard}"


def shard_of(key: str, limit: int | None) -> int:
    """The record shard of the session ``key`` (16 hex digits): 0 under a limit, else spread."""
    return 0 if limit is not None else int(key[:8], 16) % RECORD_SHARDS


def heartbeat_name(replica: str) -> str:
    """The heartbeat Lease's name for ``replica``: readable, and unique by a digest."""
    readable = _NAME_CHARACTERS.sub("-", replica.lower()).strip("-")[:40].strip("-")
    return f"replica-{readable or 'x'}-{_digest(replica)[:8]}"


def _labels(role: str) -> dict[str, str]:
    return {MANAGED_BY[0]: MANAGED_BY[1], ROLE_LABEL: role}


def heartbeat_body(
    replica: str, duration_seconds: int, now: float, *, resource_version: str | None = None
) -> JSON:
    """The heartbeat to create (no ``resource_version``) or renew (with the one read)."""
    body = lease_body(
        heartbeat_name(replica),
        replica,
        duration_seconds,
        now,
        resource_version=resource_version,
    )
    body["metadata"]["labels"] = _labels("replica")
    return body


def heartbeat_expiries(heartbeats: Iterable[object]) -> dict[str, float]:
    """Each replica's end of life by its heartbeat (from a LIST of the ``replica`` Leases):
    ``renewTime + leaseDurationSeconds``, POSIX seconds. A replica is alive while the reader's
    clock is before it; one without a readable heartbeat is not listed (dead)."""
    expiries: dict[str, float] = {}
    for lease in heartbeats:
        spec = lease.get("spec") if isinstance(lease, dict) else None
        if not isinstance(spec, dict):
            continue
        holder = spec.get("holderIdentity")
        renewed = parse_micro_time(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds")
        if (
            isinstance(holder, str)
            and holder
            and renewed is not None
            and isinstance(duration, int)
            and not isinstance(duration, bool)
        ):
            expiries[holder] = max(expiries.get(holder, 0.0), renewed + duration)
    return expiries


@attrs.frozen
class SessionEntry:
    """One open session in a record: its replica and, once its command started, where it runs
    and its supervision id (``None``: unsupervised, nothing to clean up)."""

    replica: str
    target: ResolvedTarget | None = None
    supervision: str | None = None
    hangup: bool = False

    def to_json(self) -> list[Any]:
        """The compact form stored in the annotation."""
        target = None
        if self.target is not None:
            t = self.target
            target = [t.namespace, t.deployment, t.deployment_uid, t.pod, t.pod_uid, t.container]
        return [self.replica, target, self.supervision, 1 if self.hangup else 0]

    @classmethod
    def from_json(cls, value: object) -> SessionEntry | None:
        """The entry ``value`` stores, ``None`` if it is not one (a record another tool wrote)."""
        if not isinstance(value, list) or len(value) != 4:
            return None
        replica, target, supervision, hangup = value
        if not isinstance(replica, str) or not isinstance(supervision, str | None):
            return None
        resolved = None
        if target is not None:
            if not isinstance(target, list) or len(target) != 6:
                return None
            if not all(isinstance(part, str) for part in target):
                return None
            namespace, deployment, deployment_uid, pod, pod_uid, container = target
            resolved = ResolvedTarget(
                namespace=namespace,
                deployment=deployment,
                deployment_uid=deployment_uid,
                pod=pod,
                pod_uid=pod_uid,
                container=container,
            )
        return cls(replica, resolved, supervision, hangup == 1)


@attrs.frozen
class SessionRecord:
    """A workspace's record as read: its entries and ``resourceVersion`` (``None``: absent)."""

    name: str
    project: str
    uid: str
    version: str | None = None
    entries: Mapping[str, SessionEntry] = attrs.field(factory=dict)

    @classmethod
    def absent(cls, project: str, uid: str, shard: int = 0) -> SessionRecord:
        """The record of a workspace with no session open anywhere (no Lease)."""
        return cls(record_name(project, uid, shard), project, uid)

    @classmethod
    def from_lease(cls, project: str, uid: str, lease: object) -> SessionRecord:
        """The record a GET or an update answered; entries that are not ours are skipped.

        Raises:
            ValueError: ``lease`` is not a Lease with a ``resourceVersion`` and readable
                sessions (the caller reports it as ``EXEC_FAILED``).
        """
        if not isinstance(lease, dict) or not isinstance(lease.get("metadata"), dict):
            raise ValueError("not a Lease")
        metadata = lease["metadata"]
        version = metadata.get("resourceVersion")
        if not isinstance(version, str) or not version:
            raise ValueError("a Lease without resourceVersion")
        annotations = metadata.get("annotations") or {}
        raw = annotations.get(SESSIONS_ANNOTATION, "{}") if isinstance(annotations, dict) else ""
        try:
            stored = json.loads(raw)
        except (TypeError, ValueError):
            raise ValueError("its sessions annotation is not JSON") from None
        if not isinstance(stored, dict):
            raise ValueError("its sessions annotation is not a JSON object")
        entries = {}
        for key, value in stored.items():
            entry = SessionEntry.from_json(value)
            if entry is not None:
                entries[key] = entry
        name = metadata.get("name") or record_name(project, uid)
        changed = None
        if isinstance(annotations, dict):
            try:
                changed = float(annotations.get(CHANGED_ANNOTATION, ""))
            except ValueError:
                changed = None
        return cls(str(name), project, uid, version, entries, changed)

    changed: float | None = None

    def orphans(self, alive: Callable[[str], bool]) -> dict[str, SessionEntry]:
        """The entries of replicas ``alive`` says are dead: theirs to clean up and remove."""
        return {key: entry for key, entry in self.entries.items() if not alive(entry.replica)}


def _annotation(entries: Mapping[str, SessionEntry]) -> str:
    return json.dumps(
        {key: entry.to_json() for key, entry in sorted(entries.items())},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def record_body(
    record: SessionRecord, entries: Mapping[str, SessionEntry], now: float = 0.0
) -> JSON:
    """The Lease that stores ``entries`` as ``record``'s next version, changed at ``now``: a
    create when the record is absent, else an update carrying the ``resourceVersion`` read. An
    empty record is kept (updated, not deleted): the sweep deletes it once idle."""
    metadata: JSON = {
        "name": record.name,
        "labels": _labels("sessions"),
        "annotations": {
            PROJECT_ANNOTATION: record.project,
            UID_ANNOTATION: record.uid,
            CHANGED_ANNOTATION: f"{now:.0f}",
            SESSIONS_ANNOTATION: _annotation(entries),
        },
    }
    if record.version is not None:
        metadata["resourceVersion"] = record.version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {},
    }


class Admission(enum.Enum):
    """What became of an :class:`Add`."""

    #: Recorded, and within the limit.
    ADMITTED = "admitted"
    #: The workspace's limit is reached by sessions that count.
    REFUSED = "refused"
    #: No limit, but the record is full (:data:`MAX_RECORD_BYTES`): the session runs unrecorded
    #: (no other replica can clean up after it).
    UNRECORDED = "unrecorded"


@attrs.frozen
class Add:
    """Record a new session ``key`` of this replica, if ``limit`` allows (``None``: no limit)."""

    key: str
    entry: SessionEntry
    limit: int | None


@attrs.frozen
class SetTarget:
    """Note where session ``key``'s command runs (a no-op once the session is gone)."""

    key: str
    entry: SessionEntry


@attrs.frozen
class Remove:
    """The session ``key`` ended (a no-op when it is not recorded)."""

    key: str


Change = Add | SetTarget | Remove


@attrs.frozen
class Plan:
    """What to write for a batch of changes, and each :class:`Add`'s admission."""

    #: The entries to store; ``None`` when nothing changed (no write needed).
    entries: Mapping[str, SessionEntry] | None
    admissions: Mapping[str, Admission]
    #: Adds refused while some entries belong to replicas not known to be alive: looking at the
    #: heartbeats (and cleaning up after dead replicas) may admit them.
    doubtful: bool = False


def plan_changes(
    record: SessionRecord,
    changes: Sequence[Change],
    *,
    alive: Callable[[str], bool],
) -> Plan:
    """Apply ``changes`` in order to ``record``'s entries.

    An :class:`Add` is admitted while the entries are fewer than its limit. Every entry counts,
    a dead replica's too, until it is removed after its cleanup; ``alive`` says which replicas
    are known alive, for :attr:`Plan.doubtful`. Removing and re-targeting unknown keys changes
    nothing, so a batch may be applied again after a conflict.
    """
    entries = dict(record.entries)
    admissions: dict[str, Admission] = {}
    changed = False
    doubtful = False
    for change in changes:
        if isinstance(change, Remove):
            if entries.pop(change.key, None) is not None:
                changed = True
        elif isinstance(change, SetTarget):
            if change.key in entries and entries[change.key] != change.entry:
                entries[change.key] = change.entry
                changed = True
        else:
            if change.limit is not None:
                holders = [entry.replica for entry in entries.values()]
                if len(holders) >= change.limit:
                    admissions[change.key] = Admission.REFUSED
                    doubtful = doubtful or not all(alive(replica) for replica in holders)
                    continue
            trial = {**entries, change.key: change.entry}
            if len(_annotation(trial).encode()) > MAX_RECORD_BYTES:
                admissions[change.key] = (
                    Admission.UNRECORDED if change.limit is None else Admission.REFUSED
                )
                continue
            entries = trial
            admissions[change.key] = Admission.ADMITTED
            changed = True
    return Plan(entries if changed else None, admissions, doubtful)
