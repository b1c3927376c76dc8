"""Per-workspace session limits that hold across replicas, and the shared record of open sessions.

``KubernetesBackend(config, cluster_slots=ClusterSlots(namespace="kuber-exec"))`` with
``SessionLimits(max_sessions_per_workspace=N)`` makes every replica sharing that namespace count
against the same ``N``. Two kinds of Lease live there (docs/platform.md has the arithmetic):

- each replica's **heartbeat**, renewed every ``renew_interval`` (:mod:`._replica`): the only
  writes while sessions stay open, so the API load grows with the replicas, not the sessions;
- each workspace's **session record** (project and uid), listing its open sessions, their
  replica and, once started, their pod, container and supervision id; changed only when a
  session starts, starts its command, or ends, with optimistic concurrency, in group commits
  (:mod:`._session_records`).

Opening a session records it (one write when this replica knows the record's version: a create
for a quiet workspace), refused with ``EXEC_ABORTED`` when ``N`` are recorded. A dead replica's
sessions keep counting until a live one has ended their processes (from the record) and removed
them: the first live replica by name does that every ``duration`` seconds, and a replica that
is refused because of them does it at once. A replica that cannot renew its heartbeat for
``duration - renew_interval`` seconds ends its own sessions first (the fence). Without a limit
the record still lists every session, so that another replica can clean up after this one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from kuber_exec_core import ExecError, ExecErrorCode, ResolvedTarget, Workspace
from kuber_exec_core.limits import (
    Add,
    Admission,
    Remove,
    SessionEntry,
    SetTarget,
    record_name,
    shard_of,
)

from .._groups import single_exception
from ._legacy_slots import LegacySlotLeases
from ._replica import OrphanCleaner, Replica
from ._rest import RestClient
from ._session_records import RecordWriter, submit_quietly
from ._session_slot import NO_SLOT as NO_SLOT
from ._session_slot import SessionSlot as SessionSlot

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "ClusterSlots",
    "LeaseWorkspaceSlots",
    "NO_SLOT",
    "SessionSlot",
]

logger = logging.getLogger("kuber_exec")

#: Seconds after its last heartbeat that a replica is taken for dead.
DEFAULT_LEASE_DURATION = 15
#: The longest a session's end waits to be recorded before it is left to the next heartbeat.
_RELEASE_TIMEOUT = 5.0
_NAMESPACE_MAX = 63
#: A record holds about a thousand entries (``MAX_RECORD_BYTES``): limits stay well below.
MAX_CLUSTER_LIMIT = 500


class ClusterSlots:
    """Where and how the replicas' heartbeats and session records live (see the module
    docstring).

    Args:
        namespace: the namespace of the Leases (it must exist; the service needs ``create``,
            ``get``, ``list``, ``update`` and ``delete`` on ``leases`` in it).
        duration: seconds after its last heartbeat that a replica is taken for dead (a positive
            integer; default 15). A killed replica's sessions are cleaned up and stop counting
            within ``duration`` seconds plus one sweep (``duration`` more, or at once when a
            session is refused because of them).
        renew_interval: seconds between heartbeats (default ``duration / 3``; less than
            ``duration``). Replicas' clocks must agree to within this, less a request's time.
        replica: this replica's name (default ``<hostname>-<pid>``): unique per process.
        clock: POSIX seconds now (default ``time.time``), compared across machines.
        legacy_slots: also hold the previous version's per-session slot Lease, so that its
            replicas count this one's sessions during a rolling update (docs/platform.md,
            "Upgrading"); default ``False``.

    Raises:
        ExecError: ``EXEC_INVALID`` for a bad value.
    """

    def __init__(
        self,
        namespace: str,
        *,
        duration: int = DEFAULT_LEASE_DURATION,
        renew_interval: float | None = None,
        replica: str | None = None,
        clock: Callable[[], float] = time.time,
        legacy_slots: bool = False,
    ) -> None:
        if not isinstance(namespace, str) or not 0 < len(namespace) <= _NAMESPACE_MAX:
            raise ExecError(ExecErrorCode.INVALID, "namespace must be a namespace name")
        if isinstance(duration, bool) or not isinstance(duration, int) or duration < 1:
            raise ExecError(ExecErrorCode.INVALID, "duration must be a positive integer")
        interval = duration / 3 if renew_interval is None else renew_interval
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not 0 < interval < duration
        ):
            raise ExecError(
                ExecErrorCode.INVALID, "renew_interval must be positive and less than duration"
            )
        if replica is not None and (not isinstance(replica, str) or not replica):
            raise ExecError(ExecErrorCode.INVALID, "replica must be a non-empty string")
        if not isinstance(legacy_slots, bool):
            raise ExecError(ExecErrorCode.INVALID, "legacy_slots must be a bool")
        self.namespace = namespace
        self.duration = duration
        self.renew_interval = float(interval)
        self.replica = replica or f"{socket.gethostname()}-{os.getpid()}"
        self.clock = clock
        self.legacy_slots = legacy_slots
        #: Lease API calls made (of every kind), for cost figures and tests.
        self.api_calls = 0
        self._present: Replica | None = None
        self._tasks: anyio.abc.TaskGroup | None = None

    def __repr__(self) -> str:
        return (
            f"ClusterSlots(namespace={self.namespace!r}, duration={self.duration!r}, "
            f"replica={self.replica!r})"
        )

    def path(self, name: str | None = None) -> str:
        """The REST path of the namespace's Leases, or of one."""
        base = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        return base if name is None else f"{base}/{name}"

    @property
    def present(self) -> Replica:
        """This replica's presence, while its backend is open.

        Raises:
            ExecError: ``EXEC_FAILED`` when the backend is not open.
        """
        if self._present is None:
            raise ExecError(
                ExecErrorCode.FAILED,
                "ClusterSlots work while their KubernetesBackend is open (async with backend)",
            )
        return self._present

    async def open(self, rest: Callable[[], RestClient], cleaner: OrphanCleaner) -> None:
        """Start the heartbeat's task (the backend's ``__aenter__`` calls it). The first
        heartbeat is written by the first session (so an RBAC problem fails that exec, with
        what is missing), or by the task's first round, whichever comes first.

        Raises:
            ExecError: ``EXEC_FAILED`` when these slots already serve an open backend.
        """
        if self._present is not None:
            raise ExecError(ExecErrorCode.FAILED, "these ClusterSlots already serve a backend")
        present = Replica(self, rest, cleaner)
        tasks = anyio.create_task_group()
        await tasks.__aenter__()
        tasks.start_soon(present.run)
        self._present, self._tasks = present, tasks

    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: object) -> bool:
        """Run ``function(*args)`` in these slots' task group while the backend is open;
        whether it was started."""
        if self._tasks is None:
            return False
        self._tasks.start_soon(function, *args)
        return True

    async def close(self) -> None:
        """Stop the heartbeat and delete it (the backend's ``__aexit__``): the other replicas
        take this one for dead at once and clean up after whatever it leaves."""
        present, tasks = self._present, self._tasks
        self._present = self._tasks = None
        if tasks is not None:
            tasks.cancel_scope.cancel()
            await tasks.__aexit__(None, None, None)
        if present is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
                await present.stop()


class _RecordedSlot(SessionSlot):
    __slots__ = ("_key", "_replica", "_tasks", "_writer", "settled")

    def __init__(
        self, writer: RecordWriter, key: str, replica: str, tasks: anyio.abc.TaskGroup
    ) -> None:
        self._writer = writer
        self._key = key
        self._replica = replica
        self._tasks = tasks
        self.settled: anyio.Event | None = None

    def release_after(self, settled: anyio.Event) -> None:
        self.settled = settled

    def note_attempt(
        self, target: ResolvedTarget, supervision: str | None, *, hangup: bool
    ) -> None:
        entry = SessionEntry(self._replica, target, supervision, hangup)
        self._tasks.start_soon(submit_quietly, self._writer, SetTarget(self._key, entry))


class LeaseWorkspaceSlots:
    """The ``WorkspaceSlots`` of a service whose backend has :class:`ClusterSlots`."""

    def __init__(self, limit: int | None, slots: ClusterSlots, rest: Callable[[], RestClient]):
        if limit is not None and limit > MAX_CLUSTER_LIMIT:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"max_sessions_per_workspace must be at most {MAX_CLUSTER_LIMIT} with "
                "ClusterSlots (a workspace's record holds about a thousand sessions)",
            )
        self.limit = limit
        self.slots = slots
        self._legacy = LegacySlotLeases(limit, slots, rest) if slots.legacy_slots else None

    @contextlib.asynccontextmanager
    async def hold(self, workspace: Workspace) -> AsyncIterator[SessionSlot]:
        """Record a session of ``workspace`` for the block (and hold the previous version's
        slot too, with ``legacy_slots``); end the block with ``EXEC_ABORTED`` when this replica
        fences.

        Raises:
            ExecError: ``EXEC_ABORTED`` when the workspace's limit is reached across the
                replicas, or the block was ended by the fence; ``EXEC_FAILED`` when the Lease
                API refuses (e.g. 403: the service lacks the RBAC) or cannot be reached.
        """
        if (
            not isinstance(workspace, Workspace)
            or not isinstance(workspace.project, str)
            or not isinstance(workspace.uid, str)
        ):
            yield NO_SLOT  # An invalid request: validation refuses it next.
            return
        async with contextlib.AsyncExitStack() as stack:
            if self._legacy is not None:
                await stack.enter_async_context(self._legacy.hold(workspace))
            async with self._recorded(workspace) as slot:
                yield slot

    @contextlib.asynccontextmanager
    async def _recorded(self, workspace: Workspace) -> AsyncIterator[SessionSlot]:
        present = self.slots.present
        await present.ensure_present()
        if present.fenced():
            raise ExecError(
                ExecErrorCode.ABORTED,
                "this replica cannot renew its heartbeat (the API server is unreachable), so it "
                "cannot hold a session slot; try again",
            )
        key = secrets.token_hex(8)
        shard = shard_of(key, self.limit)
        writer = present.writer(workspace, record_name(workspace.project, workspace.uid, shard))
        admission = await writer.submit(Add(key, SessionEntry(present.name), self.limit))
        if admission is Admission.REFUSED:
            raise ExecError(
                ExecErrorCode.ABORTED,
                f"workspace {workspace.project} already has {self.limit} exec sessions open "
                f"across the service's replicas (the limit is {self.limit}); close one and try "
                "again",
            )
        if admission is Admission.UNRECORDED:
            logger.warning(
                "the session record of workspace %s is full: this session is not recorded "
                "(another replica could not clean up after it)",
                workspace.project,
            )
        fenced = False
        slot: _RecordedSlot | None = None
        try:
            # The caller's block runs inside the slot's task group: its exception must come out
            # as itself, not in a group.
            with single_exception():
                async with anyio.create_task_group() as tasks:
                    with present.fence() as fence:
                        slot = _RecordedSlot(writer, key, present.name, tasks)
                        yield slot
                    fenced = fence.cancelled_caught
        finally:
            if admission is Admission.ADMITTED:
                # A cleanup going on in the background keeps the entry until it settles (if
                # this replica is shut down first, the others finish it from the record).
                settled = None if slot is None else slot.settled
                if settled is None or not self.slots.spawn(
                    _release_when_settled, present, writer, key, settled
                ):
                    with anyio.CancelScope(shield=True):
                        await _release(present, writer, key)
        if fenced:
            raise ExecError(
                ExecErrorCode.ABORTED,
                "the session was ended: this replica could not renew its heartbeat for "
                f"{present.fence_after:g} s (the API server is unreachable), and other replicas "
                "would soon count its sessions as gone",
            )


#: The longest a session stays recorded after its block for a background cleanup: the crew's
#: own limit (``_cleanup.BACKGROUND_LIMIT``, 60 s; not imported: ``_cleanup`` imports the
#: backend seam, which imports this module) and a margin.
_SETTLE_LIMIT = 65.0


async def _release_when_settled(
    present: Replica, writer: RecordWriter, key: str, settled: anyio.Event
) -> None:
    with anyio.move_on_after(_SETTLE_LIMIT):
        await settled.wait()
    await _release(present, writer, key)


async def _release(present: Replica, writer: RecordWriter, key: str) -> None:
    """Remove the session's entry; when that fails or takes too long, the heartbeat's task
    retries it (a debt)."""
    with anyio.move_on_after(_RELEASE_TIMEOUT) as deadline:
        try:
            await writer.submit(Remove(key))
            return
        except ExecError as error:
            logger.warning("recording the end of session %s failed: %s", key, error.message)
    if deadline.cancelled_caught:
        logger.warning("recording the end of session %s took too long; retrying later", key)
    present.debts.setdefault(writer, set()).add(key)
