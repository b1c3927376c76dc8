"""``FrameQueue``: the bounded queue between an interactive session's reader and its consumer.

The same contract as an anyio memory object stream of ``capacity`` items (one sending side, one
receiving side; closing the sender ends the receiver's iteration once the queue is drained;
closing the receiver breaks the sender), with less per item: every output frame of a session
passes through here, and anyio's stream (its statistics, its hand-over of an item to a waiting
receiver) was a measured share of each frame's cost. A task waits on an anyio ``Event`` only
when the queue is empty (or full).

A wake-up only says "look again": items stay in the queue until taken, so a waiter cancelled
after being woken loses nothing. Cancellation is anyio's.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import anyio

__all__ = ["FrameQueue"]

T = TypeVar("T")


class _Waiters:
    """Tasks waiting for a change: one anyio event per wait, set by :meth:`wake_all`."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[anyio.Event] = []

    def __len__(self) -> int:
        return len(self._events)

    async def wait(self) -> None:
        event = anyio.Event()
        self._events.append(event)
        try:
            await event.wait()
        finally:
            # Woken events were taken off already; a cancelled wait leaves its own.
            if event in self._events:
                self._events.remove(event)

    def wake_all(self) -> None:
        events, self._events = self._events, []
        for event in events:
            event.set()


class FrameQueue(Generic[T]):
    """A bounded single-queue channel of ``capacity`` items (at least 1), made in a task.

    Raises (from the methods):
        anyio.WouldBlock: ``put_nowait`` on a full queue, ``get_nowait`` on an empty open one.
        anyio.EndOfStream: ``get``/``get_nowait`` once the sender closed and the queue is empty.
        anyio.BrokenResourceError: ``put``/``put_nowait`` once the receiver closed.
        anyio.ClosedResourceError: ``get``/``get_nowait`` once the receiver closed;
            ``put``/``put_nowait`` once the sender closed.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self._items: deque[T] = deque()
        self._sender_closed = False
        self._receiver_closed = False
        self._getters = _Waiters()
        self._putters = _Waiters()

    def __repr__(self) -> str:
        return f"<FrameQueue {len(self._items)}/{self._capacity}>"

    @property
    def senders_waiting(self) -> int:
        """Tasks blocked in :meth:`put` on a full queue."""
        return len(self._putters)

    def put_nowait(self, item: T) -> None:
        """Queue ``item`` if there is room."""
        if self._sender_closed:
            raise anyio.ClosedResourceError
        if self._receiver_closed:
            raise anyio.BrokenResourceError
        if len(self._items) >= self._capacity:
            raise anyio.WouldBlock
        self._items.append(item)
        if self._getters:
            self._getters.wake_all()

    async def put(self, item: T) -> None:
        """Queue ``item``, waiting while the queue is full."""
        while True:
            try:
                self.put_nowait(item)
            except anyio.WouldBlock:
                await self._putters.wait()
            else:
                return

    def get_nowait(self) -> T:
        """Take the oldest item."""
        if self._receiver_closed:
            raise anyio.ClosedResourceError
        items = self._items
        if items:
            item = items.popleft()
            if self._putters:
                self._putters.wake_all()
            return item
        if self._sender_closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def get(self) -> T:
        """Take the oldest item, waiting while the queue is empty."""
        while True:
            try:
                return self.get_nowait()
            except anyio.WouldBlock:
                await self._getters.wait()

    def close_sender(self) -> None:
        """No more items: the receiver ends once it has taken what is queued. Idempotent."""
        self._sender_closed = True
        self._getters.wake_all()
        self._putters.wake_all()

    def close_receiver(self) -> None:
        """Nothing more is taken: queued items are dropped and the sender breaks. Idempotent."""
        self._receiver_closed = True
        self._items.clear()
        self._putters.wake_all()
        self._getters.wake_all()
