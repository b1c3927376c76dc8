"""What an exec passes through before it may start, as one block for ``ExecService``.

:func:`admitted` wraps an ``execute`` call or an interactive session: its audit record (every
refusal below gets the ``ended`` event), whom it acts as (:mod:`._identity`), and its workspace
slot, in-process (:class:`~._limits.WorkspaceSlots`) or held as a Lease across replicas
(:class:`~._lease_slots.LeaseWorkspaceSlots`). :func:`workspace_slots` picks the kind from the
backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from kuber_exec_core import ExecRequest

from ._audit import AuditRecord, audited
from ._identity import acting_as
from ._lease_slots import ClusterSlots, LeaseWorkspaceSlots
from ._limits import WorkspaceSlots

__all__ = ["admitted", "workspace_slots"]

Slots = WorkspaceSlots | LeaseWorkspaceSlots


def workspace_slots(backend: object, limit: int | None) -> Slots:
    """Lease slots when ``backend`` has ``cluster_slots`` (a :class:`ClusterSlots`, as
    ``KubernetesBackend(cluster_slots=...)``) and a REST client; else the in-process count."""
    cluster = getattr(backend, "cluster_slots", None)
    rest = getattr(backend, "rest_client", None)
    if isinstance(cluster, ClusterSlots) and callable(rest):
        return LeaseWorkspaceSlots(limit, cluster, rest)
    return WorkspaceSlots(limit)


@contextlib.asynccontextmanager
async def admitted(record: AuditRecord, slots: Slots, request: ExecRequest) -> AsyncIterator[None]:
    """Audit, act as ``request.on_behalf_of`` and hold a slot of its workspace for the block.

    Raises:
        ExecError: ``EXEC_ABORTED`` when the workspace has no free slot (recorded as ended).
    """
    with audited(record), acting_as(getattr(request, "on_behalf_of", None)):
        if isinstance(slots, WorkspaceSlots):
            with slots.hold(request.workspace):
                yield
        else:
            async with slots.hold(request.workspace):
                yield
