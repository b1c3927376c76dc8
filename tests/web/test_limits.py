"""SessionLimits under both runtimes: concurrency per workspace, idle timeout, maximum duration."""

from __future__ import annotations

from types import ModuleType

import anyio
import pytest

from kuber_exec_anyio import (
    AuditEvent,
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    Exit,
    SessionLimits,
    Stdin,
    Stdout,
    Workspace,
)
from kuber_exec_core.limits import SessionLimits as CoreSessionLimits
from kuber_exec_core.state import LOCAL_END_REFUSAL, REFUSALS, SessionInput, SessionState
from kuber_exec_sandbox import Sandbox
from support import demo_request as run
from support.web import service_for


@pytest.mark.anyio
async def test_one_session_over_the_workspace_limit_is_refused(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    events: list[AuditEvent] = []
    limits = SessionLimits(max_sessions_per_workspace=1)
    async with service_for(adapter, sandbox, session_limits=limits, audit=events.append) as service:
        async with service.open_interactive(run("sleep", "30"), tty=False):
            with pytest.raises(ExecError) as interactive:
                async with service.open_interactive(run("sh")):
                    pass
            with pytest.raises(ExecError) as execute:
                await service.execute(run("true"))
            # Another workspace has its own count (refused by ownership, not by the limit).
            other = ExecRequest(
                workspace=Workspace(project="demo", uid="other-uid"),
                deployment="other",
                command=["echo", "other"],
            )
            assert (await service.execute(other)).stdout == b"other\n"
        # The slot is free again once the first session's block is left.
        assert (await service.execute(run("echo", "again"))).stdout == b"again\n"
    for refused in (interactive.value, execute.value):
        assert refused.code is ExecErrorCode.ABORTED
        assert refused.message == (
            "workspace demo already has 1 exec sessions open (the limit is 1); "
            "close one and try again"
        )
    refusals = [e for e in events if e.error_code is ExecErrorCode.ABORTED]
    assert [(e.phase, e.pod) for e in refusals] == [("ended", None), ("ended", None)]


@pytest.mark.anyio
async def test_an_idle_session_ends_with_an_error_frame(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    events: list[AuditEvent] = []
    limits = SessionLimits(idle_timeout=0.5)
    async with (
        service_for(adapter, sandbox, session_limits=limits, audit=events.append) as service,
        service.open_interactive(run("sh", "-c", "echo ready; sleep 30")) as session,
    ):
        with anyio.fail_after(20):
            frames = [frame async for frame in session]
        assert frames[-1] == Error(
            ExecErrorCode.ABORTED,
            "the session was idle for 0.5 s (no input and no output) and was closed",
        )
        with pytest.raises(ExecError) as late:
            await session.send(Stdin(b"x"))
        # The refusal comes from the state table, naming why the session ended.
        code, refusal = REFUSALS[(SessionState.ENDED, SessionInput.SEND_STDIN)]
        assert (late.value.code, late.value.message) == (
            code,
            LOCAL_END_REFUSAL.format(refusal=refusal, reason=frames[-1].message),
        )
        assert session.state is SessionState.ENDED
        assert session.final_frame == frames[-1]
    assert events[-1].outcome == "error"
    assert events[-1].error_code is ExecErrorCode.ABORTED


@pytest.mark.anyio
async def test_input_keeps_a_session_from_idling(adapter: ModuleType, sandbox: Sandbox) -> None:
    # Each echoed line is traffic: a session that keeps talking outlives its idle timeout.
    limits = SessionLimits(idle_timeout=1.0)
    async with (
        service_for(adapter, sandbox, session_limits=limits) as service,
        service.open_interactive(run("sh", "-c", "stty -echo; cat")) as session,
    ):
        start = anyio.current_time()
        await session.send(Stdin(b"tick\r"))
        lines = 0
        with anyio.fail_after(30):
            async for frame in session:
                assert isinstance(frame, Stdout), frame
                lines += frame.data.count(b"\n")
                if anyio.current_time() - start > 2.5:
                    break
                await session.send(Stdin(b"tick\r" * frame.data.count(b"\n")))
        assert lines > 1
        assert anyio.current_time() - start > 2.5


@pytest.mark.anyio
async def test_a_session_ends_at_its_maximum_duration(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    limits = SessionLimits(max_duration=1.0, idle_timeout=30)
    async with (
        service_for(adapter, sandbox, session_limits=limits) as service,
        service.open_interactive(
            run("sh", "-c", "while :; do echo tick; sleep 0.1; done"), tty=False
        ) as session,
    ):
        with anyio.fail_after(20):
            frames = [frame async for frame in session]
    assert frames[-1] == Error(
        ExecErrorCode.ABORTED, "the session reached its maximum duration of 1 s and was closed"
    )
    assert not any(isinstance(frame, Exit) for frame in frames)


def test_the_service_limits_are_the_cores() -> None:
    # One class, validated once (tests/core/test_session_limits.py).
    assert SessionLimits is CoreSessionLimits
