"""A crowd of sessions leaving at once is cleaned up in batches, and what outlives its callers'
bound goes on, observably, in the background (issue 39), on both runtimes, against the sandbox.

The sandbox runs pods as this machine's processes: a session's processes are found, as the
cleanup finds them, by the ``KUBER_EXEC_SESSION`` variable in their ``/proc/PID/environ``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from kuber_exec_core import ExecRequest, ExecStreams, ResolvedTarget, Subprotocol, Workspace
from kuber_exec_core.supervision import (
    MAX_SESSIONS_PER_CLEANUP,
    SESSION_ENVIRONMENT_VARIABLE,
    CleanupOutcome,
    CleanupRequest,
)
from support import backend_for, eventually

pytestmark = pytest.mark.anyio

GRACE = 0.5
CROWD = 200


def request(*command: str) -> ExecRequest:
    return ExecRequest(
        workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=command
    )


def running_sessions(session_ids: Iterable[str]) -> set[str]:
    """Which of ``session_ids`` have a live process on this machine (zombies have no
    environment)."""
    wanted = {f"{SESSION_ENVIRONMENT_VARIABLE}={i}".encode(): i for i in session_ids}
    found: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        found.update(wanted[variable] for variable in environment if variable in wanted)
    return found


def session_id(session: Any) -> str:
    supervision = session._session.supervision
    assert supervision is not None
    return str(supervision.session_id)


async def leave_together(service: Any, count: int, *, tty: bool = False) -> list[str]:
    """Open ``count`` ``cat`` sessions, wait until each one's process runs, and leave them all
    at once. Their supervision ids, once every call has returned."""
    ids: list[str] = []
    leave = anyio.Event()

    async def one() -> None:
        async with service.open_interactive(request("cat"), tty=tty) as session:
            ids.append(session_id(session))
            await leave.wait()

    async with anyio.create_task_group() as tasks:
        for _ in range(count):
            tasks.start_soon(one)
        await eventually(lambda: len(ids) == count, "the sessions to open", timeout=60)
        await eventually(
            lambda: len(running_sessions(ids)) == count, "every cat to start", timeout=60
        )
        leave.set()
    return ids


async def test_a_crowd_leaving_at_once_leaves_nothing_and_is_batched(
    adapter: Any, sandbox: Any
) -> None:
    events: list[Any] = []
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, audit=events.append, cleanup_grace=GRACE)
        ids = await leave_together(service, CROWD)
        # Every caller has returned; what it did not see settled goes on in the background.
        await eventually(
            lambda: service.cleanup_status.in_progress == 0, "the cleanups to settle", timeout=60
        )
        status = service.cleanup_status
        assert running_sessions(ids) == set()
        assert (status.done, status.failed, status.abandoned) == (CROWD, 0, 0)
        # Batched: far fewer execs than sessions (at least CROWD / MAX_SESSIONS_PER_CLEANUP).
        assert CROWD // MAX_SESSIONS_PER_CLEANUP <= status.execs < CROWD // 4
    outcomes = [event.cleanup for event in events if event.phase == "ended"]
    assert len(outcomes) == CROWD
    assert set(outcomes) <= {CleanupOutcome.TERMINATED, CleanupOutcome.PENDING}
    assert outcomes.count(CleanupOutcome.PENDING) == status.pending


@attrs.frozen
class _TinyBound:
    """Cleanup settings whose caller bound is far shorter than any cleanup."""

    grace: float = GRACE
    timeout: float = 0.001


async def test_a_cleanup_past_its_callers_bound_is_pending_and_observable(
    adapter: Any, sandbox: Any
) -> None:
    events: list[Any] = []
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, audit=events.append, cleanup_grace=GRACE)
        service.cleanup_settings = _TinyBound()  # read when the crew is made, on first use
        assert service.cleanup_status.in_progress == 0
        ids = await leave_together(service, 3)
        # The callers returned at once: the cleanup is still going on, and says so.
        ended = [event.cleanup for event in events if event.phase == "ended"]
        assert ended == [CleanupOutcome.PENDING] * 3
        assert service.cleanup_status.pending == 3
        await eventually(lambda: service.cleanup_status.done == 3, "the background cleanup")
        assert service.cleanup_status.in_progress == 0
        assert running_sessions(ids) == set()


async def test_sessions_named_by_id_are_cleaned_without_their_session(
    adapter: Any, sandbox: Any
) -> None:
    # How a replica finishes the cleanups another one left: ids and a target, no ExecSession.
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, cleanup_grace=GRACE)
        ids: list[str] = []
        targets: list[ResolvedTarget] = []

        async def hold() -> None:
            async with service.open_interactive(request("cat"), tty=False) as session:
                ids.append(session_id(session))
                targets.append(session.target)
                async for _ in session:  # until the process's end is reported
                    pass

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold)
            tasks.start_soon(hold)
            await eventually(lambda: len(running_sessions(ids)) == 2, "both cats to start")
            nobody = "0123456789abcdef"
            outcomes = await service._crew().clean_sessions(
                targets[0], [CleanupRequest(i) for i in [*ids, nobody]]
            )
            assert outcomes == {
                ids[0]: CleanupOutcome.TERMINATED,
                ids[1]: CleanupOutcome.TERMINATED,
                nobody: CleanupOutcome.NONE,
            }
            assert running_sessions(ids) == set()
        # Both processes were ended: their sessions saw the exit, and needed no cleanup.
        assert service.cleanup_status.execs == 1


async def test_one_session_asked_for_twice_at_once_is_cleaned_once_per_batch(
    adapter: Any, sandbox: Any
) -> None:
    # Two callers cleaning up after one dead replica name the same session at once: a batch
    # names each session once, and both callers get a verdict.
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, cleanup_grace=GRACE)
        ids: list[str] = []
        targets: list[ResolvedTarget] = []

        async def hold() -> None:
            async with service.open_interactive(request("cat"), tty=False) as session:
                ids.append(session_id(session))
                targets.append(session.target)
                async for _ in session:
                    pass

        outcomes: list[Any] = []

        async def clean() -> None:
            crew = service._crew()
            outcomes.append(await crew.clean_sessions(targets[0], [CleanupRequest(ids[0])]))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold)
            await eventually(lambda: len(running_sessions(ids)) == 1, "the cat to start")
            async with anyio.create_task_group() as cleaners:
                cleaners.start_soon(clean)
                cleaners.start_soon(clean)
        assert len(outcomes) == 2
        assert {outcome[ids[0]] for outcome in outcomes} <= {
            CleanupOutcome.TERMINATED,
            CleanupOutcome.NONE,
        }
        assert CleanupOutcome.TERMINATED in {outcome[ids[0]] for outcome in outcomes}
        assert running_sessions(ids) == set()


class _NoHooks:
    """A backend with only the three methods: no background task group to host cleanups."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def get_deployment(self, namespace: str, name: str) -> Any:
        return await self._inner.get_deployment(namespace, name)

    async def list_pods(self, namespace: str, selector: Any) -> Any:
        return await self._inner.list_pods(namespace, selector)

    def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AbstractAsyncContextManager[Any]:
        opened: AbstractAsyncContextManager[Any] = self._inner.exec(
            target, command, streams, subprotocols
        )
        return opened


async def test_without_a_background_host_the_callers_clean_up_within_their_bound(
    adapter: Any, sandbox: Any
) -> None:
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(_NoHooks(backend), cleanup_grace=GRACE)
        ids = await leave_together(service, 40)
        # No background: every cleanup settled before its caller returned.
        status = service.cleanup_status
        assert running_sessions(ids) == set()
        assert (status.in_progress, status.pending, status.abandoned) == (0, 0, 0)
        assert status.done == 40
        assert status.execs < 40


async def test_leaving_the_backend_lets_the_background_cleanups_finish(
    adapter: Any, sandbox: Any
) -> None:
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, cleanup_grace=GRACE)
        service.cleanup_settings = _TinyBound()
        ids = await leave_together(service, 3)
        assert service.cleanup_status.pending == 3
    # Leaving the block waited (bounded: background_exit_timeout) for what was still running.
    status = service.cleanup_status
    assert (status.done, status.in_progress, status.abandoned) == (3, 0, 0)
    assert running_sessions(ids) == set()


async def test_background_cleanups_past_the_exit_timeout_are_counted_abandoned(
    adapter: Any, sandbox: Any
) -> None:
    async with backend_for(adapter, sandbox) as backend:
        backend.background_exit_timeout = 0.0  # cancel at once
        service = adapter.ExecService(backend, cleanup_grace=GRACE)
        service.cleanup_settings = _TinyBound()
        ids = await leave_together(service, 2)
    status = service.cleanup_status
    assert status.in_progress == 0
    assert status.done + status.abandoned == 2
    kill_sessions(ids)  # what the cancelled cleanup may have left


def kill_sessions(session_ids: Iterable[str]) -> None:
    """End, as a test's own cleanup, whatever of ``session_ids`` still runs."""
    wanted = {f"{SESSION_ENVIRONMENT_VARIABLE}={i}".encode() for i in session_ids}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted.intersection((entry / "environ").read_bytes().split(b"\0")):
                os.kill(int(entry.name), 9)
        except OSError:
            continue
