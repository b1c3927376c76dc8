"""What an exec passes through before it may start, as one block for ``ExecService``.

:func:`admitted` wraps an ``execute`` call or an interactive session: its audit record (every
refusal below gets the ``ended`` event), whom it acts as (:mod:`._identity`), and its workspace
slot, in-process (:class:`~._limits.WorkspaceSlots`) or held as a Lease across replicas
(:class:`~kuber_exec_anyio._kubernetes._lease_slots.LeaseWorkspaceSlots`).
:func:`workspace_slots` picks the kind from the backend.

The block is one class rather than three nested generator context managers: it is entered on
every exec, and each generator context manager costs about as much as the rest of admission
(docs/benchmarks.md).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING

from kuber_exec_core import ExecRequest, Impersonation

from ._audit._record import AuditRecord
from ._backend import backend_hooks
from ._identity import act_as, stop_acting
from ._kubernetes._session_slot import NO_SLOT, SessionSlot
from ._limits import WorkspaceSlots

if TYPE_CHECKING:
    from typing import TypeAlias

    # The Lease machinery is imported for a backend with cluster_slots only.
    from ._kubernetes._lease_slots import LeaseWorkspaceSlots

    Slots: TypeAlias = WorkspaceSlots | LeaseWorkspaceSlots

__all__ = ["admitted", "workspace_slots"]


def workspace_slots(backend: object, limit: int | None) -> Slots:
    """Lease slots when ``backend``'s hooks have ``cluster_slots`` (as
    ``KubernetesBackend(cluster_slots=...)``), over its ``rest_client``; else the in-process
    count."""
    hooks = backend_hooks(backend)
    if hooks.cluster_slots is not None:
        from ._kubernetes._lease_slots import LeaseWorkspaceSlots

        return LeaseWorkspaceSlots(limit, hooks.cluster_slots, hooks.rest_client)
    return WorkspaceSlots(limit)


def admitted(
    record: AuditRecord, slots: Slots, request: ExecRequest
) -> AbstractAsyncContextManager[SessionSlot]:
    """Audit, act as ``request.on_behalf_of`` and hold a slot of its workspace for the block;
    the block gets the slot, to note where each attempt runs (a no-op without cluster slots).

    An exception leaving the block (or raised on entry) gives ``record`` its ``ended`` event
    (``AuditRecord.interrupted``) and propagates.

    Raises (on entry):
        ExecError: ``EXEC_ABORTED`` when the workspace has no free slot (recorded as ended).
    """
    return _Admission(record, slots, request)


class _Admission:
    """:func:`admitted`'s block: entered once, in one task."""

    __slots__ = ("_lease", "_local", "_record", "_request", "_slots", "_token")

    def __init__(self, record: AuditRecord, slots: Slots, request: ExecRequest) -> None:
        self._record = record
        self._slots = slots
        self._request = request
        self._token: Token[Impersonation | None] | None = None
        #: The in-process slots one was taken from, or the Lease slot's block, once entered.
        self._local: WorkspaceSlots | None = None
        self._lease: AbstractAsyncContextManager[SessionSlot] | None = None

    async def __aenter__(self) -> SessionSlot:
        self._token = act_as(getattr(self._request, "on_behalf_of", None))
        slots = self._slots
        try:
            if isinstance(slots, WorkspaceSlots):
                if slots.take(self._request.workspace):
                    self._local = slots
                return NO_SLOT
            lease = slots.hold(self._request.workspace)
            slot = await lease.__aenter__()
            self._lease = lease
            return slot
        except BaseException as error:
            stop_acting(self._token)
            self._record.interrupted(error)
            raise

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        assert self._token is not None
        try:
            try:
                if self._lease is not None:
                    if await self._lease.__aexit__(error_type, error, traceback):
                        return True  # the slot's block swallowed it: nothing left the block
                elif self._local is not None:
                    self._local.give_back(self._request.workspace)
            finally:
                stop_acting(self._token)
        except BaseException as raised:
            self._record.interrupted(raised)
            raise
        if error is not None:
            self._record.interrupted(error)
        return False
