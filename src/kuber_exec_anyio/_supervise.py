"""The cleanup's settings and slots: its timing, and how many cleanup execs one service runs at
once.

Shared by the service's attempts (``_attempts``), its cleanup crew (``_cleanup``, which runs the
cleanup execs) and the sweep of a dead replica's orphans (``_kubernetes._orphans``).
"""

from __future__ import annotations

import anyio
import attrs

__all__ = [
    "CLEANUP_MARGIN",
    "DEFAULT_CLEANUP_GRACE",
    "MAX_CONCURRENT_CLEANUPS",
    "CleanupSettings",
    "CleanupSlots",
]

#: Seconds between the cleanup's TERM and its KILL.
DEFAULT_CLEANUP_GRACE = 2.0
#: What the cleanup may take beyond its grace period (an exec round trip, process start-up):
#: the caller's cancellation is held at most ``grace + CLEANUP_MARGIN`` (and ``grace`` more when
#: the start mark had not arrived: the command may still have been starting).
CLEANUP_MARGIN = 2.0


@attrs.frozen(kw_only=True)
class CleanupSettings:
    """Whether to supervise and clean up, and its timing (see ``ExecService``)."""

    enabled: bool = True
    grace: float = DEFAULT_CLEANUP_GRACE

    @property
    def timeout(self) -> float:
        """The longest a cleanup may hold its caller (after it, the cleanup goes on in the
        background when the backend hosts one: ``CleanupOutcome.PENDING``)."""
        return 2 * self.grace + CLEANUP_MARGIN


#: How many cleanup execs one service runs at once. Leaving thousands of sessions at once (a
#: platform shutting down, a burst cancelled) started as many cleanup execs as sessions, all
#: competing with the closing handshakes: on the benchmark server not one of 10,000 finished
#: within its timeout. A bounded number at a time gets through; since issue 39 each is a batch
#: of up to 128 sessions of one container (``_cleanup.CleanupCrew``).
MAX_CONCURRENT_CLEANUPS = 32


class CleanupSlots:
    """The service's cleanup execs in flight, at most ``limit`` at once (made on first use:
    an anyio limiter belongs to the event loop that runs it)."""

    def __init__(self, limit: int = MAX_CONCURRENT_CLEANUPS) -> None:
        self.limit = limit
        self._limiter: anyio.CapacityLimiter | None = None

    def __repr__(self) -> str:
        in_flight = 0 if self._limiter is None else self._limiter.borrowed_tokens
        return f"CleanupSlots({in_flight}/{self.limit})"

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """The limiter the cleanup execs share."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.limit)
        return self._limiter
