"""``FrameQueue``, the bounded queue between a session's reader and its consumer, on both
runtimes: order, the bound, the ends of either side, and cancellation that loses nothing."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuber_exec_anyio._frame_queue import FrameQueue

pytestmark = pytest.mark.anyio


async def test_items_come_out_in_order_and_the_bound_blocks_the_sender() -> None:
    queue = FrameQueue[int](2)
    queue.put_nowait(1)
    queue.put_nowait(2)
    with pytest.raises(anyio.WouldBlock):
        queue.put_nowait(3)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(queue.put, 3)
        await anyio.wait_all_tasks_blocked()
        assert queue.senders_waiting == 1
        assert queue.get_nowait() == 1
        await anyio.wait_all_tasks_blocked()
        assert queue.senders_waiting == 0
    assert [queue.get_nowait(), queue.get_nowait()] == [2, 3]
    with pytest.raises(anyio.WouldBlock):
        queue.get_nowait()


async def test_a_closed_sender_ends_the_receiver_after_what_is_queued() -> None:
    queue = FrameQueue[str](4)
    received: list[str] = []

    async def consume() -> None:
        try:
            while True:
                received.append(await queue.get())
        except anyio.EndOfStream:
            received.append("end")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(consume)
        await anyio.wait_all_tasks_blocked()
        queue.put_nowait("a")
        queue.put_nowait("b")
        queue.close_sender()
    assert received == ["a", "b", "end"]
    with pytest.raises(anyio.ClosedResourceError):
        queue.put_nowait("c")


async def test_a_closed_receiver_breaks_a_blocked_sender_and_drops_the_queue() -> None:
    queue = FrameQueue[int](1)
    queue.put_nowait(1)
    outcome: list[str] = []

    async def produce() -> None:
        try:
            await queue.put(2)
        except anyio.BrokenResourceError:
            outcome.append("broken")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(produce)
        await anyio.wait_all_tasks_blocked()
        queue.close_receiver()
    assert outcome == ["broken"]
    with pytest.raises(anyio.ClosedResourceError):
        queue.get_nowait()


async def test_a_cancelled_getter_loses_no_item() -> None:
    queue = FrameQueue[int](4)
    with anyio.move_on_after(0) as scope:
        await queue.get()
    assert scope.cancelled_caught
    got: list[int] = []
    async with anyio.create_task_group() as tasks:

        async def wait_then_be_cancelled() -> None:
            with anyio.CancelScope() as inner:
                tasks.start_soon(cancel_after_put, inner)
                got.append(await queue.get())

        async def cancel_after_put(scope: anyio.CancelScope) -> None:
            await anyio.wait_all_tasks_blocked()
            queue.put_nowait(7)  # wakes the getter...
            scope.cancel()  # ...which is cancelled before it runs

        tasks.start_soon(wait_then_be_cancelled)
    # Either the woken getter took the item before its cancellation landed, or it is queued.
    left = [] if got else [queue.get_nowait()]
    assert got + left == [7]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        FrameQueue[int](0)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    capacity=st.integers(min_value=1, max_value=5),
    items=st.lists(st.integers(), max_size=40),
    pauses=st.lists(st.booleans(), max_size=40),
)
def test_everything_put_is_got_once_in_order_never_over_capacity(
    anyio_backend: str, capacity: int, items: list[int], pauses: list[bool]
) -> None:
    async def main() -> list[int]:
        queue = FrameQueue[int](capacity)
        got: list[int] = []

        async def produce() -> None:
            for index, item in enumerate(items):
                await queue.put(item)
                assert len(queue._items) <= capacity
                if index < len(pauses) and pauses[index]:
                    await anyio.lowlevel.checkpoint()
            queue.close_sender()

        async def consume() -> None:
            while True:
                try:
                    got.append(await queue.get())
                except anyio.EndOfStream:
                    return

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(consume)
            tasks.start_soon(produce)
        return got

    assert anyio.run(main, backend=anyio_backend) == items
