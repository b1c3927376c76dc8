"""This replica's presence among the service's replicas: its heartbeat, who else is alive, and
the fence that ends its sessions when it can no longer prove it is alive.

One heartbeat Lease per replica (``kuber_exec_core._session_record.heartbeat_name``), renewed
every ``renew_interval``: the only writes that recur while sessions are open. Another replica
takes this one for dead once its heartbeat's ``renewTime`` plus ``duration`` has passed on its
own clock, and then cleans up after its sessions. So this replica must stop its own sessions
before that can happen: when it has not renewed for ``duration - renew_interval`` seconds (its
API calls fail: a network partition), it *fences*, ending every session it holds with
``EXEC_ABORTED``. Clocks may disagree by less than ``renew_interval`` (minus a request's time)
without a live replica's sessions being taken for a dead one's (docs/platform.md).

Every ``duration`` seconds the replica reads the heartbeats (one LIST); the live replica whose
name sorts first also reads the session records (one LIST) and cleans up after dead replicas
(:meth:`Replica.sweep`): the processes of their recorded sessions are ended, then the entries
removed, and heartbeats left by replicas long gone are deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import anyio.abc

from kuber_exec_core import ExecError, ExecErrorCode, ResolvedTarget, Workspace
from kuber_exec_core.kube import ApiResponse
from kuber_exec_core.limits import (
    IDLE_RECORD_SECONDS,
    MANAGED_BY,
    PROJECT_ANNOTATION,
    ROLE_LABEL,
    UID_ANNOTATION,
    SessionEntry,
    SessionRecord,
    heartbeat_body,
    heartbeat_expiries,
    heartbeat_name,
)

from ._rest import RestClient

if TYPE_CHECKING:
    from ._lease_slots import ClusterSlots
    from ._session_records import RecordWriter

__all__ = ["OrphanCleaner", "Replica"]

logger = logging.getLogger("kuber_exec")

#: Ends the processes of sessions a dead replica left: ``(target, [(supervision id, hangup)],
#: bound)``; never raises, and returns the supervision ids whose cleanup is still pending (in
#: the background) after ``bound`` seconds (``None``: the crew's limit).
OrphanCleaner = Callable[
    [ResolvedTarget, Sequence[tuple[str, bool]], float | None], Coroutine[Any, Any, set[str]]
]


def _selector(role: str) -> str:
    return quote(f"{MANAGED_BY[0]}={MANAGED_BY[1]},{ROLE_LABEL}={role}", safe="=,")


class Replica:
    """One replica's heartbeat, view of the others, session records and fence (made by
    ``ClusterSlots`` when its backend opens; see the module docstring)."""

    def __init__(
        self, slots: ClusterSlots, rest: Callable[[], RestClient], cleaner: OrphanCleaner
    ) -> None:
        self.slots = slots
        self.name = slots.replica
        self._rest = rest
        self._cleaner = cleaner
        self._heartbeat_version: str | None = None
        #: ``anyio.current_time()`` when the last successful renewal was sent.
        self._renewed_at: float | None = None
        #: Each replica's heartbeat expiry (POSIX seconds) at the last look.
        self._expiries: dict[str, float] = {}
        self._fences: set[anyio.CancelScope] = set()
        self._writers: dict[str, RecordWriter] = {}
        #: Session keys whose removal failed (the API was unreachable), by the writer of their
        #: record: retried by the upkeep.
        self.debts: dict[RecordWriter, set[str]] = {}
        self._renewing = anyio.Lock()

    def __repr__(self) -> str:
        return f"Replica({self.name!r})"

    # -- the API ---------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        name: str | None,
        body: object = None,
        *,
        query: str = "",
        urgent: bool = False,
    ) -> ApiResponse:
        """One Lease API call as the service (never impersonated), counted in
        ``ClusterSlots.api_calls``; ``urgent`` (the heartbeat) skips the REST client's queue: a
        crowd of requests must not delay it into the fence."""
        self.slots.api_calls += 1
        path = self.slots.path(name) + (f"?{query}" if query else "")
        return await self._rest().send(method, path, body, impersonate=False, queued=not urgent)

    async def list_role(self, role: str) -> list[Any]:
        """The Leases of one role (``replica`` or ``sessions``) in the namespace."""
        answer = await self.call("GET", None, query=f"labelSelector={_selector(role)}")
        expect(answer, 200, self.slots, "list")
        items = read_json(answer).get("items")
        return items if isinstance(items, list) else []

    # -- the heartbeat and the fence -------------------------------------------------------

    @property
    def fence_after(self) -> float:
        """Seconds without a renewal after which this replica ends its sessions."""
        return self.slots.duration - self.slots.renew_interval

    def fenced(self) -> bool:
        """Whether this replica may no longer count on being seen alive."""
        renewed = self._renewed_at
        return renewed is None or anyio.current_time() - renewed >= self.fence_after

    async def renew(self) -> None:
        """Create or renew the heartbeat (a lock: one renewal at a time).

        Raises:
            ExecError: ``EXEC_FAILED`` when the API refuses or cannot be reached.
        """
        async with self._renewing:
            started = anyio.current_time()
            for _attempt in range(3):
                now = self.slots.clock()
                version = self._heartbeat_version
                body = heartbeat_body(self.name, self.slots.duration, now, resource_version=version)
                if version is None:
                    answer = await self.call("POST", None, body, urgent=True)
                    if answer.status == 409:  # ours from before (a restart with the same name)
                        current = await self.call("GET", heartbeat_name(self.name), urgent=True)
                        if current.status == 200:
                            self._heartbeat_version = version_of(current)
                        continue
                    expect(answer, 201, self.slots, "create")
                else:
                    answer = await self.call("PUT", heartbeat_name(self.name), body, urgent=True)
                    if answer.status in (404, 409):  # deleted or changed by a sweeper: again
                        self._heartbeat_version = None
                        continue
                    expect(answer, 200, self.slots, "update")
                self._heartbeat_version = version_of(answer)
                self._renewed_at = started
                return
            raise ExecError(ExecErrorCode.FAILED, "the replica heartbeat Lease kept changing")

    async def ensure_present(self) -> None:
        """Before a session is recorded: renew now unless the heartbeat is fresh.

        Raises:
            ExecError: ``EXEC_FAILED`` when the heartbeat cannot be written.
        """
        renewed = self._renewed_at
        if renewed is None or anyio.current_time() - renewed >= self.slots.renew_interval:
            await self.renew()

    @contextlib.contextmanager
    def fence(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope the fence cancels (the session's block)."""
        scope = anyio.CancelScope()
        self._fences.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._fences.discard(scope)

    def _end_sessions(self) -> None:
        if self._fences:
            logger.error(
                "no heartbeat renewal for %.0f s (the API server cannot be reached): ending "
                "this replica's %d sessions before other replicas take it for dead",
                self.fence_after,
                len(self._fences),
            )
        for scope in list(self._fences):
            scope.cancel()

    async def run(self) -> None:
        """The heartbeat, and apart from it (a long sweep must not delay a renewal) the
        upkeep: debts, idle writers, and every ``duration`` a look at the others."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._beat)
            tasks.start_soon(self._tend)

    async def _beat(self) -> None:
        """Renew every ``renew_interval`` (sooner after a failure); fence when renewals have
        failed for ``fence_after``."""
        interval = self.slots.renew_interval
        bound = max(0.5, interval / 2)
        next_renewal = anyio.current_time()
        while True:
            deadline = next_renewal
            if self._renewed_at is not None and self._fences:
                fence_at = self._renewed_at + self.fence_after
                if fence_at > anyio.current_time():  # once passed, the sessions were ended
                    deadline = min(deadline, fence_at)
            await anyio.sleep_until(deadline)
            if anyio.current_time() >= next_renewal:
                started = anyio.current_time()
                next_renewal = started + min(1.0, interval / 2)  # unless it succeeds
                try:
                    with anyio.fail_after(bound):
                        await self.renew()
                    next_renewal = started + interval
                except ExecError as error:
                    logger.warning("renewing the replica heartbeat failed: %s", error)
                except TimeoutError:
                    logger.warning("renewing the replica heartbeat got no answer in %g s", bound)
            if self.fenced():
                self._end_sessions()

    async def _tend(self) -> None:
        next_look = anyio.current_time() + self.slots.duration
        while True:
            await anyio.sleep(self.slots.renew_interval)
            if self.fenced():
                continue
            await self._pay_debts()
            self.forget_idle_writers()
            if anyio.current_time() >= next_look:
                next_look = anyio.current_time() + self.slots.duration
                try:
                    await self.look_around()
                except ExecError as error:
                    logger.warning("looking at the other replicas failed: %s", error)

    async def stop(self) -> None:
        """Delete the heartbeat (the backend is closing): the others take this replica for dead
        at once, and finish what it leaves."""
        version, self._heartbeat_version = self._heartbeat_version, None
        self._renewed_at = None
        if version is None:
            return
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        with contextlib.suppress(ExecError):
            await self.call("DELETE", heartbeat_name(self.name), options)

    # -- the others ------------------------------------------------------------------------

    def alive(self, replica: str) -> bool:
        """Whether ``replica``'s heartbeat, as last seen, has not expired by this replica's
        clock (this one is always alive)."""
        return replica == self.name or self._expiries.get(replica, -math.inf) > self.slots.clock()

    async def refresh_alive(self) -> list[Any]:
        """Read the heartbeats (to judge a record's entries, after reading the record)."""
        heartbeats = await self.list_role("replica")
        self._expiries = heartbeat_expiries(heartbeats)
        return heartbeats

    async def look_around(self) -> None:
        """Read the heartbeats; the first live replica by name also sweeps."""
        await self.refresh_alive()
        live = {replica for replica in self._expiries if self.alive(replica)}
        if min(live | {self.name}) == self.name:
            await self.sweep()

    async def sweep(self) -> None:
        """Clean up after dead replicas: every record's entries of a dead replica are cleaned
        up and removed; heartbeats that expired long ago and own no entry are deleted."""
        owners: set[str] = set()
        records = await self.list_role("sessions")
        # The heartbeats after the records: a replica missing from them is gone (its entries
        # were written after its heartbeat), not one that started since.
        heartbeats = await self.refresh_alive()
        adopted: list[tuple[SessionRecord, dict[str, SessionEntry]]] = []
        for lease in records:
            record = record_from_listing(lease)
            if record is None:
                continue
            owners.update(entry.replica for entry in record.entries.values())
            orphans = record.orphans(self.alive)
            if orphans:
                adopted.append((record, orphans))
            elif (
                not record.entries
                and record.changed is not None
                and self.slots.clock() - record.changed >= IDLE_RECORD_SECONDS
            ):
                await self._delete(record.name, record.version)
        if adopted:
            await self._adopt(adopted)
        now = self.slots.clock()
        for lease in heartbeats:
            # Expired twice over and owning no entry: a replica long gone.
            expiry = heartbeat_expiries([lease])
            if len(expiry) != 1:
                continue
            ((holder, ends),) = expiry.items()
            duration = lease["spec"]["leaseDurationSeconds"]
            if holder in owners or holder == self.name or now < ends + duration:
                continue
            metadata = lease.get("metadata", {})
            await self._delete(str(metadata.get("name")), metadata.get("resourceVersion"))

    async def _adopt(self, adopted: list[tuple[SessionRecord, dict[str, SessionEntry]]]) -> None:
        """Clean up after every orphan at once (batched per container across the records,
        waiting up to the crew's background limit: the sweep has time), then remove from each
        record those whose cleanup settled."""
        everything = {key: entry for _, orphans in adopted for key, entry in orphans.items()}
        pending = await self.clean_orphans(everything, bound=None)

        async def forget(record: SessionRecord, keys: list[str]) -> None:
            writer = self.writer(Workspace(project=record.project, uid=record.uid), record.name)
            try:
                await writer.forget(record, keys)
            except ExecError as error:
                logger.warning("removing a dead replica's sessions failed: %s", error.message)

        async with anyio.create_task_group() as tasks:
            for record, orphans in adopted:
                keys = [key for key in orphans if key not in pending]
                if keys:
                    tasks.start_soon(forget, record, keys)

    async def _delete(self, name: str, version: object) -> None:
        """Delete a Lease unless it changed since it was read (best effort: the next sweep
        tries again)."""
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": version},
        }
        with contextlib.suppress(ExecError):
            await self.call("DELETE", name, options)

    async def clean_orphans(
        self, orphans: Mapping[str, SessionEntry], *, bound: float | None
    ) -> set[str]:
        """End the processes of a dead replica's sessions, batched per pod and container,
        waiting at most ``bound`` seconds (``None``: the crew's background limit); the keys of
        those whose cleanup is still pending (to keep recorded for now)."""
        by_target: dict[ResolvedTarget, list[tuple[str, bool]]] = {}
        for entry in orphans.values():
            if entry.target is not None and entry.supervision is not None:
                by_target.setdefault(entry.target, []).append((entry.supervision, entry.hangup))
        if not by_target:
            return set()
        logger.warning(
            "cleaning up %d sessions left by dead replicas in %d containers",
            sum(len(sessions) for sessions in by_target.values()),
            len(by_target),
        )
        pending: set[str] = set()

        async def clean(target: ResolvedTarget, sessions: list[tuple[str, bool]]) -> None:
            pending.update(await self._cleaner(target, sessions, bound))

        async with anyio.create_task_group() as tasks:
            for target, sessions in by_target.items():
                tasks.start_soon(clean, target, sessions)
        return {key for key, entry in orphans.items() if entry.supervision in pending}

    # -- the records -----------------------------------------------------------------------

    def writer(self, workspace: Workspace, name: str) -> RecordWriter:
        """The one writer in this replica of ``workspace``'s record called ``name`` (one of its
        ``record_name`` shards)."""
        from ._session_records import RecordWriter

        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = RecordWriter(
                self, workspace.project, workspace.uid, name
            )
        return writer

    def forget_idle_writers(self) -> None:
        """Drop the writers idle for ``WRITER_MEMORY_SECONDS`` (the map stays as small as what
        is in use, and no writer remembers a record the sweep may delete)."""
        for key, writer in list(self._writers.items()):
            if writer.idle:
                del self._writers[key]

    async def _pay_debts(self) -> None:
        for writer in list(self.debts):
            sessions = self.debts.pop(writer)
            try:
                await writer.remove(sessions)
            except ExecError:
                self.debts.setdefault(writer, set()).update(sessions)
                return


def record_from_listing(lease: object) -> SessionRecord | None:
    """A record from a LIST of ``sessions`` Leases, ``None`` for one that is not readable."""
    if not isinstance(lease, dict):
        return None
    annotations = lease.get("metadata", {}).get("annotations") or {}
    project = annotations.get(PROJECT_ANNOTATION)
    uid = annotations.get(UID_ANNOTATION)
    if not isinstance(project, str) or not isinstance(uid, str):
        return None
    try:
        return SessionRecord.from_lease(project, uid, lease)
    except ValueError:
        return None


def read_json(answer: ApiResponse) -> Any:
    """The JSON object an answer carries.

    Raises:
        ExecError: ``EXEC_FAILED`` when it is not one.
    """
    try:
        value = json.loads(answer.body)
    except (ValueError, UnicodeError):
        value = None
    if not isinstance(value, dict):
        raise ExecError(ExecErrorCode.FAILED, "the Lease API answered something not a JSON object")
    return value


def version_of(answer: ApiResponse) -> str:
    """The ``resourceVersion`` of the Lease an answer carries.

    Raises:
        ExecError: ``EXEC_FAILED`` when there is none.
    """
    version = read_json(answer).get("metadata", {}).get("resourceVersion")
    if not isinstance(version, str) or not version:
        raise ExecError(
            ExecErrorCode.FAILED, "the Lease API answered a Lease without resourceVersion"
        )
    return version


def expect(answer: ApiResponse, status: int, slots: ClusterSlots, verb: str) -> None:
    """Raise unless ``answer`` has ``status``: ``EXEC_FAILED`` naming the verb the service
    needs (on 401 and 403: the RBAC it lacks)."""
    if answer.status == status:
        return
    hint = (
        f" (the service needs {verb} on leases.coordination.k8s.io in namespace "
        f"{slots.namespace!r})"
        if answer.status in (401, 403)
        else ""
    )
    raise ExecError(
        ExecErrorCode.FAILED,
        f"the session slot Lease {verb} failed with HTTP {answer.status}{hint}",
        http_status=answer.status,
    )
