"""One replica's writer of one workspace's session record: changes committed in groups.

A record is created by its workspace's first session and kept while the workspace is in use,
empty or not (updated, never deleted by a writer): an update of a Lease that no longer exists
would create it again from what the writer remembered. The sweep deletes records left empty for
``IDLE_RECORD_SECONDS``, and a writer forgets what it knows after ``WRITER_MEMORY_SECONDS``
without a change, far sooner.

Every session start, move and end of a workspace in this replica goes through its
:class:`RecordWriter`. A caller queues its change and waits for the writer's lock; the caller
that gets it writes *every* change queued by then in one update (a group commit), so a crowd of
sessions starting or ending together costs a few writes, not one each. A write carries the
``resourceVersion`` last seen (kept from the writer's own last write: a session start in a quiet
workspace is one call); on ``409 Conflict`` the record is read again and the batch applied
again. When an add is refused while some entries belong to replicas not known alive, the writer
reads the heartbeats, and when some are dead, cleans up after their sessions and removes them
before deciding (a dead replica's sessions count until their processes are ended).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection, Mapping, Sequence

import anyio

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.kube import ApiResponse
from kuber_exec_core.limits import (
    WRITER_MEMORY_SECONDS,
    Add,
    Admission,
    Change,
    Remove,
    SessionEntry,
    SessionRecord,
    SetTarget,
    plan_changes,
    record_body,
)

from ._replica import Replica, expect, read_json

__all__ = ["CLEANUP_BOUND", "MAX_CONFLICTS", "RecordWriter"]

#: The longest a session being admitted waits for a dead replica's sessions to be cleaned up
#: (a cleanup's own bound at the default grace: ``2 * 2 + 2``); what is not done by then stays
#: recorded, and the admission is refused.
CLEANUP_BOUND = 6.0

logger = logging.getLogger("kuber_exec")

#: Writes in a row refused with 409 before a batch fails (many replicas changing one
#: workspace's record at once: each retry re-reads, so one of them wins every round).
MAX_CONFLICTS = 16


class _Pending:
    __slots__ = ("admission", "change", "done", "error")

    def __init__(self, change: Change) -> None:
        self.change = change
        self.done = False
        self.admission: Admission | None = None
        self.error: BaseException | None = None


class RecordWriter:
    """The group-committing writer of one workspace's record (see the module docstring)."""

    def __init__(self, replica: Replica, project: str, uid: str, name: str) -> None:
        self.replica = replica
        self.project = project
        self.uid = uid
        #: The record's Lease name (``record_name`` of the workspace and one of its shards).
        self.name = name
        self._queue: list[_Pending] = []
        self._lock = anyio.Lock()
        #: The record as this replica last wrote or read it (``None``: read it first). A new
        #: writer guesses "absent": a quiet workspace's first session is one create (a ``409``
        #: says otherwise, and the record is read).
        self._record: SessionRecord | None = self._absent()
        #: When this writer last changed the record (``anyio.current_time()``).
        self.changed_at = anyio.current_time()
        #: Writes made and changes they carried, for cost figures and tests.
        self.writes = 0
        self.changes = 0

    def __repr__(self) -> str:
        return f"RecordWriter({self.name!r})"

    def _absent(self) -> SessionRecord:
        return SessionRecord(self.name, self.project, self.uid)

    async def submit(self, change: Change) -> Admission | None:
        """Commit ``change`` (with whatever else is queued); an :class:`Add`'s admission.

        Raises:
            ExecError: ``EXEC_FAILED`` when the Lease API fails or refuses.
        """
        mine = _Pending(change)
        self._queue.append(mine)
        try:
            async with self._lock:
                if not mine.done:
                    batch, self._queue = self._queue, []
                    await self._commit(batch, mine)
        except BaseException:
            if mine in self._queue:
                self._queue.remove(mine)
            raise
        if mine.error is not None:
            raise mine.error
        return mine.admission

    async def remove(self, keys: Collection[str]) -> None:
        """Remove the entries ``keys`` (unknown ones are no-ops).

        Raises:
            ExecError: ``EXEC_FAILED`` when the Lease API fails or refuses.
        """
        failures: list[ExecError] = []

        async def remove_one(key: str) -> None:
            try:
                await self.submit(Remove(key))
            except ExecError as error:
                failures.append(error)

        # Queued together, committed together (the group commit): one write for all of them.
        async with anyio.create_task_group() as tasks:
            for key in keys:
                tasks.start_soon(remove_one, key)
        if failures:
            raise failures[0]

    async def forget(self, record: SessionRecord, keys: Collection[str]) -> None:
        """Remove ``keys`` (a dead replica's entries, cleaned up) from ``record`` as listed."""
        async with self._lock:
            # What was read is newer than a guess (a stale version costs one 409 and a read).
            if self._record is None or self._record.version is None:
                self._record = record
        await self.remove(keys)

    async def _commit(self, batch: list[_Pending], mine: _Pending) -> None:
        try:
            admissions = await self._apply([pending.change for pending in batch])
        except BaseException as error:
            for pending in batch:
                if pending is mine or isinstance(error, ExecError):
                    pending.error = error
                    pending.done = True
                else:
                    # Cancelled while writing for others: theirs go back to the queue, for the
                    # next holder of the lock.
                    self._queue.insert(0, pending)
            raise
        for pending in batch:
            if isinstance(pending.change, Add):
                pending.admission = admissions.get(pending.change.key)
            pending.done = True
        self.changes += len(batch)

    @property
    def idle(self) -> bool:
        """Whether nothing waits and the record has not changed here for
        ``WRITER_MEMORY_SECONDS`` (then the writer may be forgotten, with what it knew)."""
        return (
            not self._queue
            and not self._lock.locked()
            and anyio.current_time() - self.changed_at >= WRITER_MEMORY_SECONDS
        )

    async def _apply(self, changes: Sequence[Change]) -> Mapping[str, Admission]:
        replica = self.replica
        changes = list(changes)
        for conflict in range(MAX_CONFLICTS):
            record = self._record or await self._read()
            plan = plan_changes(record, changes, alive=replica.alive)
            if plan.doubtful:
                # Heartbeats read *after* the record: an entry is written only once its
                # replica's heartbeat exists, so a replica missing from this read is gone, not
                # new (an older read could miss a replica that started since).
                await replica.refresh_alive()
                orphans = record.orphans(replica.alive)
                if orphans:
                    pending = await replica.clean_orphans(orphans, bound=CLEANUP_BOUND)
                    changes = [Remove(key) for key in orphans if key not in pending] + changes
                    plan = plan_changes(record, changes, alive=replica.alive)
            if plan.entries is None:
                return plan.admissions
            if await self._write(record, plan.entries):
                return plan.admissions
            self._record = None
            # Someone else wrote in between: read again, after a short random pause so that
            # replicas in a crowd do not collide again in lock step.
            await anyio.sleep(random.uniform(0, 0.005 * (conflict + 1)))
        raise ExecError(
            ExecErrorCode.FAILED,
            f"the session record of workspace {self.project} was changed by other replicas "
            f"{MAX_CONFLICTS} times in a row; try again",
        )

    async def _read(self) -> SessionRecord:
        answer = await self.replica.call("GET", self.name)
        if answer.status == 404:
            return self._absent()
        expect(answer, 200, self.replica.slots, "get")
        return self._parse(answer)

    def _parse(self, answer: ApiResponse) -> SessionRecord:
        try:
            return SessionRecord.from_lease(self.project, self.uid, read_json(answer))
        except ValueError as error:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"the session record Lease {self.name} is not readable: {error}",
            ) from None

    async def _write(self, record: SessionRecord, entries: Mapping[str, SessionEntry]) -> bool:
        """Store ``entries`` as ``record``'s next version; ``False`` on a conflict (re-read)."""
        replica = self.replica
        self.writes += 1
        body = record_body(record, entries, replica.slots.clock())
        if record.version is None:
            answer = await replica.call("POST", None, body)
            if answer.status == 409:
                return False
            expect(answer, 201, replica.slots, "create")
        else:
            answer = await replica.call("PUT", self.name, body)
            if answer.status in (404, 409):
                return False
            if answer.status != 201:  # 201: deleted by hand meanwhile; the update made it again
                expect(answer, 200, replica.slots, "update")
        self._record = self._parse(answer)
        self.changed_at = anyio.current_time()
        return True


async def submit_quietly(writer: RecordWriter, change: SetTarget) -> None:
    """Commit a :class:`SetTarget` from a task of its own: a failure is logged (the entry
    stays without its target: a dead replica's process there would not be cleaned up)."""
    try:
        await writer.submit(change)
    except ExecError as error:
        logger.warning("recording where session %s runs failed: %s", change.key, error.message)
