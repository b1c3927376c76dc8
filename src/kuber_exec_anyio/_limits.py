"""Session limits: execs open at once per workspace, and the time limits of interactive sessions.

``ExecService(backend, session_limits=SessionLimits(...))``. :class:`WorkspaceSlots` caps the
exec sessions open at once per workspace (over the cap: an ``ExecError`` with ``EXEC_ABORTED``
before anything is sent to the cluster). :func:`enforce_session_limits` ends an interactive
session with the core's ``Error`` frame (code ``EXEC_ABORTED``) when it has been idle or open for
too long; when a limit passes, and what the frame says, is
:class:`~kuber_exec_core.limits.SessionDeadlines`' arithmetic: this module only owns the clock.
"""

from __future__ import annotations

from typing import Protocol

import anyio

from kuber_exec_core import Error, ExecError, ExecErrorCode, Workspace
from kuber_exec_core.limits import SessionDeadlines, SessionLimits

__all__ = ["EndableSession", "SessionLimits", "WorkspaceSlots", "enforce_session_limits"]


class EndableSession(Protocol):
    """What the limits need of a session: ending it with an ``Error`` frame
    (``InteractiveSession.end``, whose first end wins)."""

    def end(self, error: Error) -> None: ...


class WorkspaceSlots:
    """Counts the execs open per workspace and refuses one over ``limit`` (``None``: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._open: dict[Workspace, int] = {}

    def take(self, workspace: Workspace) -> bool:
        """Take one of ``workspace``'s slots; whether one was taken (``False``: there is no
        limit, or the request is invalid and validation refuses it next). Give a taken slot
        back with :meth:`give_back`.

        Raises:
            ExecError: ``EXEC_ABORTED`` when the workspace already holds ``limit`` slots.
        """
        if self.limit is None or not isinstance(workspace, Workspace):
            return False
        # No await between the check and the count: atomic on one event loop.
        count = self._open.get(workspace, 0)
        if count >= self.limit:
            raise ExecError(
                ExecErrorCode.ABORTED,
                f"workspace {workspace.project} already has {count} exec sessions open "
                f"(the limit is {self.limit}); close one and try again",
            )
        self._open[workspace] = count + 1
        return True

    def give_back(self, workspace: Workspace) -> None:
        """Give back a slot :meth:`take` took."""
        remaining = self._open[workspace] - 1
        if remaining:
            self._open[workspace] = remaining
        else:
            del self._open[workspace]


async def enforce_session_limits(session: EndableSession, deadlines: SessionDeadlines) -> None:
    """Until a limit passes: sleep to the nearest deadline, then end ``session`` with the
    deadline's ``Error`` frame if it has passed (activity may have moved it: look again).

    Runs in the session's task group, which cancels it when the session's block is left; ending
    a session that has already ended changes nothing (the core's first end wins).
    """
    while (deadline := deadlines.next_deadline()) is not None:
        await anyio.sleep_until(deadline)
        error = deadlines.expired(anyio.current_time())
        if error is not None:
            session.end(error)
            return
