"""The slot Leases of kuber-exec before the session records: kept for a rolling update.

Replicas of the previous version count a workspace's sessions as the Leases ``<project>-0`` ..
``<project>-<N-1>`` (one per session, renewed every ``renew_interval``). During a rolling update
from it, ``ClusterSlots(legacy_slots=True)`` makes the new replicas hold such a Lease *too*, so
the old replicas count the new ones' sessions and the limit holds across both versions
(docs/platform.md, "Upgrading"). The arithmetic is :mod:`kuber_exec_core._lease_slots`.

Taking a slot tries them in order: create (``201``: held; ``409``: taken), and for a taken one, a
GET and, if it has expired, an update with its ``resourceVersion`` (``409``: another replica took
it first). No free slot: ``ExecError(EXEC_ABORTED)`` before anything is sent for the exec. While
the session lives a task renews the Lease every ``renew_interval`` seconds; at the end the Lease is
deleted with its ``resourceVersion`` as precondition (a Lease since taken over is left to its new
holder). A replica that dies stops renewing: its slots are free ``duration`` seconds after their
last renewal.

Cost (docs/platform.md): taking a slot is 1 create when slot 0 is free, up to 2 calls per taken
slot before it (create, GET) and 1 more for a takeover; renewing is 1 update per
``renew_interval`` (default ``duration / 3``: 12 per minute per session at the default 15 s);
releasing is 1 delete. The calls run as the service (never impersonated), through the backend's
REST client, its credentials and its 401 refresh.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio

from kuber_exec_core import ExecError, ExecErrorCode, Workspace
from kuber_exec_core.limits import is_expired, lease_body, slot_names, transitions_of

from .._groups import single_exception
from ._replica import expect, read_json, version_of
from ._rest import RestClient

if TYPE_CHECKING:
    from ._lease_slots import ClusterSlots

__all__ = ["LegacySlotLeases"]

logger = logging.getLogger("kuber_exec")

_RELEASE_TIMEOUT = 5.0


class LegacySlotLeases:
    """A workspace's per-session slot Leases, as the previous version takes them."""

    def __init__(self, limit: int | None, slots: ClusterSlots, rest: Callable[[], RestClient]):
        self.limit = limit
        self.slots = slots
        self._rest = rest

    @contextlib.asynccontextmanager
    async def hold(self, workspace: Workspace) -> AsyncIterator[None]:
        """Hold one of ``workspace``'s Lease slots for the block, renewed meanwhile.

        Raises:
            ExecError: ``EXEC_ABORTED`` when every slot is held and live; ``EXEC_FAILED``
                when the Lease API refuses (e.g. 403: the service lacks the RBAC).
        """
        if self.limit is None or not isinstance(workspace, Workspace):
            yield  # No limit, or an invalid request that validation refuses next.
            return
        rest = self._rest()
        holder = f"{self.slots.replica}/{uuid.uuid4().hex[:12]}"
        held = await self._take(rest, workspace, holder)
        if held is None:
            raise ExecError(
                ExecErrorCode.ABORTED,
                f"workspace {workspace.project} already has {self.limit} exec sessions open "
                f"across the service's replicas (the limit is {self.limit}); close one and try "
                "again",
            )
        lease = _Held(*held)
        try:
            # The caller's block runs inside the renewals' task group: its exception must come
            # out as itself, not in a group.
            with single_exception():
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._renew, rest, lease, holder)
                    try:
                        yield
                    finally:
                        tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT):
                await self._release(rest, lease)

    async def _call(self, rest: RestClient, method: str, name: str | None, body: Any) -> Any:
        self.slots.api_calls += 1
        answer = await rest.send(method, self.slots.path(name), body, impersonate=False)
        return answer

    async def _take(
        self, rest: RestClient, workspace: Workspace, holder: str
    ) -> tuple[str, str, float] | None:
        """``(name, resourceVersion, acquireTime)`` of the slot taken, or ``None`` when all are
        held."""
        assert self.limit is not None
        duration = self.slots.duration
        for name in slot_names(workspace.project, self.limit):
            now = self.slots.clock()
            created = await self._call(rest, "POST", None, lease_body(name, holder, duration, now))
            if created.status == 201:
                return name, version_of(created), now
            expect(created, 409, self.slots, "create")
            current = await self._call(rest, "GET", name, None)
            if current.status == 404:
                continue  # Released meanwhile: another caller will get it; try the next one.
            expect(current, 200, self.slots, "get")
            lease = read_json(current)
            now = self.slots.clock()
            if not is_expired(lease, now):
                continue
            version = lease.get("metadata", {}).get("resourceVersion")
            body = lease_body(
                name,
                holder,
                duration,
                now,
                resource_version=version,
                transitions=transitions_of(lease) + 1,
            )
            taken = await self._call(rest, "PUT", name, body)
            if taken.status == 200:
                logger.info("took over the expired session slot %s", name)
                return name, version_of(taken), now
            if taken.status not in (404, 409):
                expect(taken, 200, self.slots, "update")
        return None

    async def _renew(self, rest: RestClient, lease: _Held, holder: str) -> None:
        # Never raises: a failed renewal is retried at the next interval; a slot taken over
        # (we were presumed dead) stops the renewals, and the session goes on.
        while True:
            await anyio.sleep(self.slots.renew_interval)
            now = self.slots.clock()
            body = lease_body(
                lease.name,
                holder,
                self.slots.duration,
                now,
                resource_version=lease.version,
                acquired_at=lease.acquired_at,
            )
            try:
                answer = await self._call(rest, "PUT", lease.name, body)
            except ExecError as error:
                logger.warning("renewing session slot %s failed: %s", lease.name, error.message)
                continue
            if answer.status == 200:
                lease.version = version_of(answer)
            elif answer.status in (404, 409):
                logger.warning(
                    "session slot %s was taken over (a renewal came too late): the "
                    "session goes on, but no longer counts against the limit",
                    lease.name,
                )
                lease.version = None
                return
            else:
                logger.warning(
                    "renewing session slot %s failed with HTTP %d", lease.name, answer.status
                )

    async def _release(self, rest: RestClient, lease: _Held) -> None:
        if lease.version is None:
            return  # Taken over: the Lease is someone else's now.
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": lease.version},
        }
        try:
            answer = await self._call(rest, "DELETE", lease.name, options)
        except ExecError as error:
            logger.warning("releasing session slot %s failed: %s", lease.name, error.message)
            return
        if answer.status not in (200, 404, 409):
            logger.warning(
                "releasing session slot %s failed with HTTP %d", lease.name, answer.status
            )


class _Held:
    def __init__(self, name: str, version: str, acquired_at: float) -> None:
        self.name = name
        self.version: str | None = version
        self.acquired_at = acquired_at
