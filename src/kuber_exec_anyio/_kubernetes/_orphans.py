"""Ending what a dead replica's sessions left running, from the shared record.

A session record's entry names the pod, container and supervision id of the session's command;
when its replica died (``kill -9``, a lost node) or was shut down before it could clean up,
another replica runs the supervision's cleanup there (docs/cleanup.md) before it removes the
entry: through one crew per backend (:class:`OrphanCleanup`), batched per container like the
service's cleanups and sharing one limit of cleanup execs in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kuber_exec_core import DEFAULT_SUBPROTOCOLS, ResolvedTarget
from kuber_exec_core.supervision import CleanupOutcome, CleanupRequest

from .._backend import Backend
from .._cleanup import CleanupCrew
from .._supervise import CleanupSettings, CleanupSlots

__all__ = ["OrphanCleanup"]

logger = logging.getLogger("kuber_exec")

_GRACE = 2.0
_AT_ONCE = 16


class OrphanCleanup:
    """A backend's cleanups of dead replicas' sessions (its ``ClusterSlots``' ``OrphanCleaner``):
    one crew, made on first use (an anyio limiter belongs to the event loop that runs it)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._crew: CleanupCrew | None = None

    def _crew_now(self) -> CleanupCrew:
        if self._crew is None:
            settings = CleanupSettings(grace=_GRACE)
            self._crew = CleanupCrew(
                self._backend, DEFAULT_SUBPROTOCOLS, settings, CleanupSlots(_AT_ONCE)
            )
        return self._crew

    async def __call__(
        self,
        target: ResolvedTarget,
        sessions: Sequence[tuple[str, bool]],
        bound: float | None,
    ) -> set[str]:
        """Run the cleanup of each ``(supervision id, hangup)`` in ``target``, batched (one exec
        for up to ``MAX_SESSIONS_PER_CLEANUP`` of them); never raises. Waits ``bound`` seconds
        at most (``None``: the crew's background limit): what is not settled by then goes on in
        the backend's background when it has one (``pending``), and is given up otherwise.
        Returns the sessions still pending: they stay recorded, for the next sweep."""
        requests = []
        for session_id, hangup in dict(sessions).items():
            try:
                requests.append(CleanupRequest(session_id, hangup=hangup))
            except ValueError:  # not a supervision id: nothing of ours could carry it
                logger.warning("a session record names a malformed supervision id; skipped")
        if not requests:
            return set()
        outcomes = await self._crew_now().clean_sessions(target, requests, bound=bound)
        logger.info(
            "cleaned up %d sessions of a dead replica in %s/%s: %s",
            len(requests),
            target.namespace,
            target.pod,
            ", ".join(sorted({outcome.value for outcome in outcomes.values()})),
        )
        pending = {key for key, outcome in outcomes.items() if outcome is CleanupOutcome.PENDING}
        if CleanupOutcome.FAILED in outcomes.values():
            logger.warning(
                "cleaning up after a dead replica in %s/%s failed for some sessions (see above)",
                target.namespace,
                target.pod,
            )
        return pending
