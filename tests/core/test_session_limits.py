"""``SessionLimits`` and ``SessionDeadlines``: the time limits' arithmetic, given the time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import Error, ExecError, ExecErrorCode
from kuber_exec_core.limits import SessionDeadlines, SessionLimits

seconds = st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)
times = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


def test_no_time_limit_means_no_deadline() -> None:
    limits = SessionLimits(max_sessions_per_workspace=3)
    assert not limits.limits_time
    deadlines = SessionDeadlines(limits, opened_at=10.0)
    assert deadlines.next_deadline() is None
    assert deadlines.expired(1e12) is None
    assert not deadlines.watches_activity


def test_the_messages_name_the_limit() -> None:
    deadlines = SessionDeadlines(SessionLimits(idle_timeout=0.5, max_duration=60), opened_at=0)
    assert deadlines.expired(0.4) is None
    assert deadlines.expired(0.5) == Error(
        ExecErrorCode.ABORTED,
        "the session was idle for 0.5 s (no input and no output) and was closed",
    )
    assert deadlines.expired(60) == Error(
        ExecErrorCode.ABORTED, "the session reached its maximum duration of 60 s and was closed"
    )


def test_activity_moves_the_idle_deadline_but_not_the_duration() -> None:
    deadlines = SessionDeadlines(SessionLimits(idle_timeout=10, max_duration=25), opened_at=0)
    assert deadlines.next_deadline() == 10
    deadlines.activity(8)
    assert deadlines.next_deadline() == 18
    deadlines.activity(3)  # Earlier than what was seen: no effect.
    assert deadlines.last_activity == 8
    deadlines.activity(20)
    assert deadlines.next_deadline() == 25  # The duration is nearer now.
    assert deadlines.expired(24.9) is None
    expired = deadlines.expired(25)
    assert expired is not None
    assert "maximum duration" in expired.message


@given(
    st.one_of(st.none(), seconds),
    st.one_of(st.none(), seconds),
    times,
    st.lists(st.floats(min_value=0, max_value=1e6), max_size=5),
)
def test_nothing_expires_before_the_next_deadline_and_something_does_at_it(
    idle: float | None, duration: float | None, opened: float, steps: list[float]
) -> None:
    deadlines = SessionDeadlines(
        SessionLimits(idle_timeout=idle, max_duration=duration), opened_at=opened
    )
    now = opened
    for step in steps:
        now += step
        deadline = deadlines.next_deadline()
        if deadline is not None and now >= deadline:
            break
        deadlines.activity(now)
    deadline = deadlines.next_deadline()
    assert (deadline is None) == (idle is None and duration is None)
    if deadline is not None:
        for earlier in (now, (now + deadline) / 2, deadline - 1e-6):
            if earlier < deadline:
                assert deadlines.expired(earlier) is None
        expired = deadlines.expired(deadline)
        assert expired is not None
        assert expired.code is ExecErrorCode.ABORTED


@pytest.mark.parametrize(
    "options",
    [
        {"max_sessions_per_workspace": 0},
        {"max_sessions_per_workspace": 1.5},
        {"idle_timeout": -1},
        {"idle_timeout": "5"},
        {"max_duration": True},
        {"max_duration": 0},
    ],
)
def test_limits_must_be_positive(options: dict[str, object]) -> None:
    with pytest.raises(ExecError) as refused:
        SessionLimits(**options)  # type: ignore[arg-type]
    assert refused.value.code is ExecErrorCode.INVALID
