"""Session limits, and when an interactive session must end by them: the arithmetic, given the time.

:class:`SessionLimits` is the service's configuration (sessions per workspace, idle timeout,
maximum duration). :class:`SessionDeadlines` turns the two time limits into deadlines. The async
layer owns the clock; this module only compares the times it is told. Feed it the time the
session opened, each moment of activity (stdin or a resize sent, output received), and ask, at
any time, whether a limit has passed and when to look again::

    deadlines = SessionDeadlines(limits, opened_at=now())
    while (wake := deadlines.next_deadline()) is not None:
        await sleep_until(wake)
        if (error := deadlines.expired(now())) is not None:
            session.end(error)        # the Error frame the session ends with
            break

Times are seconds on one monotonic clock (any origin). The messages of the ``Error`` frames are
here, once: the layers above never word them.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._errors import ExecError, ExecErrorCode
from ._frames import Error

__all__ = ["SessionDeadlines", "SessionLimits"]


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ExecError(
            ExecErrorCode.INVALID, f"{attribute.name} must be a positive number or None"
        )
    if attribute.name == "max_sessions_per_workspace" and not isinstance(value, int):
        raise ExecError(ExecErrorCode.INVALID, f"{attribute.name} must be a positive integer")


@attrs.frozen(kw_only=True)
class SessionLimits:
    """Optional limits on exec sessions; ``None`` (the default) means no limit.

    Attributes:
        max_sessions_per_workspace: execs (``execute`` calls and interactive sessions) open at
            once per workspace; one more is refused with ``ExecError(EXEC_ABORTED, ...)`` before
            anything is sent to the cluster.
        idle_timeout: seconds an interactive session may go without a ``Stdin`` or ``Resize``
            frame sent and without output received; then it ends with an ``Error`` frame
            (``EXEC_ABORTED``).
        max_duration: seconds an interactive session may stay open in all; then it ends the
            same way.

    Raises:
        ExecError: ``EXEC_INVALID`` for a value that is not positive.
    """

    max_sessions_per_workspace: int | None = attrs.field(default=None, validator=_optional_positive)
    idle_timeout: float | None = attrs.field(default=None, validator=_optional_positive)
    max_duration: float | None = attrs.field(default=None, validator=_optional_positive)

    @property
    def limits_time(self) -> bool:
        """Whether an interactive session has a deadline (an idle timeout or a duration)."""
        return self.idle_timeout is not None or self.max_duration is not None


class SessionDeadlines:
    """The idle timeout and the maximum duration of one session (of ``limits``), as deadlines.

    Args:
        limits: the service's :class:`SessionLimits`.
        opened_at: when the session opened; it counts as activity.
    """

    def __init__(self, limits: SessionLimits, *, opened_at: float) -> None:
        self.idle_timeout = limits.idle_timeout
        self.max_duration = limits.max_duration
        self.opened_at = opened_at
        self._last_activity = opened_at

    def __repr__(self) -> str:
        return (
            f"SessionDeadlines(idle_timeout={self.idle_timeout!r}, "
            f"max_duration={self.max_duration!r}, next={self.next_deadline()!r})"
        )

    @property
    def watches_activity(self) -> bool:
        """Whether :meth:`activity` matters (an idle timeout is set): a caller on a hot path may
        skip reading its clock otherwise."""
        return self.idle_timeout is not None

    @property
    def last_activity(self) -> float:
        """The latest time given to :meth:`activity` (or ``opened_at``)."""
        return self._last_activity

    def activity(self, now: float) -> None:
        """Something moved at ``now``: the idle deadline starts again from there (never
        backwards: an earlier ``now`` than one already seen changes nothing)."""
        if now > self._last_activity:
            self._last_activity = now

    def next_deadline(self) -> float | None:
        """The earliest time a limit can pass, as known now; ``None`` when there is no limit.

        Activity after this call can only move it later: a caller that wakes at this time and
        finds :meth:`expired` ``None`` asks again.
        """
        deadlines = []
        if self.max_duration is not None:
            deadlines.append(self.opened_at + self.max_duration)
        if self.idle_timeout is not None:
            deadlines.append(self._last_activity + self.idle_timeout)
        return min(deadlines) if deadlines else None

    def expired(self, now: float) -> Error | None:
        """The ``Error`` frame (``EXEC_ABORTED``) to end the session with if a limit has passed
        at ``now``, else ``None``. The maximum duration is checked first."""
        if self.max_duration is not None and now >= self.opened_at + self.max_duration:
            return Error(
                ExecErrorCode.ABORTED,
                "the session reached its maximum duration of "
                f"{_seconds(self.max_duration)} and was closed",
            )
        if self.idle_timeout is not None and now >= self._last_activity + self.idle_timeout:
            return Error(
                ExecErrorCode.ABORTED,
                f"the session was idle for {_seconds(self.idle_timeout)} "
                "(no input and no output) and was closed",
            )
        return None
