"""The service's side of supervision: which attempt to make next, and the cleanup's settings.

The rules are the core's (:mod:`kuber_exec_core.supervision`); this module holds the state one
service keeps (which containers have no shell) and the cleanup's timing and slots (the cleanup
execs themselves are the crew's, ``_cleanup``). An exec
is at most three attempts: supervised; unsupervised on the same pod when the prologue could not
start (no shell in the image, or ``ARGV[0]`` not found, whose real error only the runtime
gives); and once on another pod when the runtime refused to start anything (a stopped container
during a rollout). Nothing is retried once output, an exit or the start mark has arrived.
"""

from __future__ import annotations

import enum
import logging
from collections import OrderedDict

import anyio
import attrs

from kuber_exec_core import Error, ExecSession, ResolvedTarget
from kuber_exec_core.supervision import (
    StartMark,
    is_missing_shell,
    is_start_failure,
)

__all__ = [
    "DEFAULT_CLEANUP_GRACE",
    "CleanupSettings",
    "NextAttempt",
    "ShellRegistry",
    "next_attempt",
    "needs_cleanup",
]

logger = logging.getLogger("kuber_exec")

#: Seconds between the cleanup's TERM and its KILL.
DEFAULT_CLEANUP_GRACE = 2.0
#: What the cleanup may take beyond its grace period (an exec round trip, process start-up):
#: the caller's cancellation is held at most ``grace + CLEANUP_MARGIN`` (and ``grace`` more when
#: the start mark had not arrived: the command may still have been starting).
CLEANUP_MARGIN = 2.0
_SHELLESS_REMEMBERED = 4096


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


class ShellRegistry:
    """The containers found to have no shell (bounded: the oldest are forgotten first), so that
    later execs there start unsupervised at once instead of trying the prologue each time."""

    def __init__(self, capacity: int = _SHELLESS_REMEMBERED) -> None:
        self._capacity = capacity
        self._shellless: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    @staticmethod
    def _key(target: ResolvedTarget) -> tuple[str, str, str]:
        # The pod's uid, not its name: a new pod of a new image may well have a shell.
        return (target.namespace, target.pod_uid, target.container)

    def has_shell(self, target: ResolvedTarget) -> bool:
        """Whether a shell is assumed in ``target``'s container (until shown otherwise)."""
        return self._key(target) not in self._shellless

    def lacks_shell(self, target: ResolvedTarget) -> None:
        """Remember that ``target``'s container has no shell."""
        key = self._key(target)
        self._shellless[key] = None
        self._shellless.move_to_end(key)
        while len(self._shellless) > self._capacity:
            self._shellless.popitem(last=False)


class NextAttempt(enum.Enum):
    """What to do after an attempt that failed before its command started."""

    #: The same pod, without the prologue.
    UNSUPERVISED = "unsupervised"
    #: Resolve again, ranking this pod last, and run there.
    ELSEWHERE = "elsewhere"


def next_attempt(
    session: ExecSession, *, retried_elsewhere: bool, shells: ShellRegistry, target: ResolvedTarget
) -> NextAttempt | None:
    """The retry an attempt's end allows, or ``None`` (report it). Decided by structure: the
    start mark, the Status's reason and code, and whether any output arrived."""
    final = session.final_frame
    if not isinstance(final, Error) or session.bytes_out:
        return None
    if session.supervision is not None:
        if session.start_mark is StartMark.MISSING:
            return NextAttempt.UNSUPERVISED  # the runtime's own "not found" error, unchanged
        if session.start_mark is None and is_missing_shell(final):
            shells.lacks_shell(target)
            logger.warning(
                "container %s of pod %s/%s has no %s: its execs run unsupervised (a cancelled "
                "one is not cleaned up; see docs/cleanup.md)",
                target.container,
                target.namespace,
                target.pod,
                "/bin/sh",
            )
            return NextAttempt.UNSUPERVISED
    if (
        not retried_elsewhere
        and session.start_mark is None
        and session.server_reported_end
        and is_start_failure(final)
    ):
        return NextAttempt.ELSEWHERE
    return None


def needs_cleanup(session: ExecSession | None) -> bool:
    """Whether a supervised attempt ended without the server's account of its process's end
    (the caller left, a cap, a limit, a lost connection): the process may still be running."""
    if session is None or session.supervision is None:
        return False
    return not session.server_reported_end and session.start_mark is not StartMark.MISSING
