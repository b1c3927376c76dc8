"""``support.eventually``: one wait for sync and async tests, bounded, naming what it waited for."""

from __future__ import annotations

import threading

import anyio
import pytest

from support import eventually


def test_in_sync_code_it_waits_in_the_call() -> None:
    flag = threading.Event()
    threading.Timer(0.05, flag.set).start()
    eventually(flag.is_set, "the timer")
    assert flag.is_set()


def test_in_sync_code_it_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="waiting for nothing at all"):
        eventually(lambda: False, "nothing at all", timeout=0.05)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_in_async_code_it_is_awaited_without_blocking_the_loop(backend: str) -> None:
    async def main() -> None:
        done = False

        async def later() -> None:
            nonlocal done
            await anyio.sleep(0.05)
            done = True  # only runs if the wait yields to the loop

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(later)
            await eventually(lambda: done, "the task")
        with pytest.raises(AssertionError, match="waiting for never"):
            await eventually(lambda: False, "never", timeout=0.05)

    anyio.run(main, backend=backend)
