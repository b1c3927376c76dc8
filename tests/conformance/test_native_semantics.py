"""One implementation, native semantics: each runtime's own cancellation and timeouts hold.

The service is written once on anyio; these tests drive it with each runtime's *native* tools
(``task.cancel()`` and ``asyncio.timeout`` on asyncio, cancel scopes on trio) and check that the
runtime's own exception comes out, and nothing of the other runtime's.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import trio

from kuber_exec_core import Close, ExecError, ExecErrorCode
from support import backend_for
from support import demo_request as run

pytestmark = pytest.mark.anyio


class _UnknownFrame:
    """Not a frame at all: what a caller's bug might pass to ``send``."""


@pytest.mark.parametrize("how", ["aclose", "close-frame", "block-exit"])
async def test_an_unknown_frame_after_a_close_is_aborted(service: Any, how: str) -> None:
    # The state table's rule: anything but a close after the end or a close is EXEC_ABORTED,
    # checked before the frame's type (both runtimes used to say EXEC_INVALID here).
    async with service.open_interactive(run("cat"), tty=False) as session:
        if how == "aclose":
            await session.aclose()
        elif how == "close-frame":
            await session.send(Close())
        else:
            saved = session
    if how == "block-exit":
        session = saved
    with pytest.raises(ExecError) as caught:
        await session.send(_UnknownFrame())
    assert caught.value.code is ExecErrorCode.ABORTED
    assert caught.value.message == "Exec request was aborted"


async def test_an_unknown_frame_on_an_open_session_is_invalid(service: Any) -> None:
    async with service.open_interactive(run("cat"), tty=False) as session:
        with pytest.raises(ExecError) as caught:
            await session.send(_UnknownFrame())
    assert caught.value.code is ExecErrorCode.INVALID
    assert caught.value.message == "Unknown interactive exec frame"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_task_cancel_raises_cancelled_error(adapter: Any, sandbox: Any) -> None:
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        started = asyncio.Event()

        async def interactive() -> None:
            async with service.open_interactive(run("sleep", "30"), tty=False):
                started.set()
                await asyncio.Event().wait()

        for job in (service.execute(run("sleep", "30")), interactive()):
            task = asyncio.ensure_future(job)
            if not started.is_set():
                # execute: let it reach the socket; interactive: wait until the block runs.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(started.wait(), 0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
            started.clear()
        # The caller's own cancellation state is untouched: it was the task's, not ours.
        current = asyncio.current_task()
        assert current is not None
        assert current.cancelling() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_timeout_raises_timeout_error(adapter: Any, sandbox: Any) -> None:
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)

        async def read_all() -> None:
            async with asyncio.timeout(0.5):
                async with service.open_interactive(run("sleep", "30"), tty=False) as session:
                    async for _ in session:
                        pass

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await service.execute(run("sleep", "30"))
        with pytest.raises(TimeoutError):
            await read_all()
        current = asyncio.current_task()
        assert current is not None
        assert current.cancelling() == 0  # asyncio.timeout uncancelled what it cancelled
        # And the service still works after both.
        result = await service.execute(run("echo", "after"))
        assert result.stdout == b"after\n"


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_cancel_scopes_cancel_and_nothing_leaks_out(adapter: Any, sandbox: Any) -> None:
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        with trio.move_on_after(0.5) as scope:
            await service.execute(run("sleep", "30"))
        assert scope.cancelled_caught
        with trio.move_on_after(0.5) as scope:
            async with service.open_interactive(run("sleep", "30"), tty=False) as session:
                async for _ in session:
                    pass
        assert scope.cancelled_caught
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(0.5):
                await service.execute(run("sleep", "30"))
        result = await service.execute(run("echo", "after"))
        assert result.stdout == b"after\n"
