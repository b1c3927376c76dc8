"""``SharedKeepalive``: one task that pings every open exec connection of a backend.

A keepalive task per connection would cost each short exec a task group, a task start and a
cancellation (a measurable share of ``execute("true")``), and 10,000 idle sessions 10,000
sleeping tasks. Here a connection is only an entry in an ordered table: every connection
of one backend has the same interval, so the order they were added in is the order they fall
due, and the one task sleeps until the first is due. Each ping then runs in a short task of its
own (a pong may take up to ``pong_timeout``, and one slow peer must not delay the others' pings);
removing a connection cancels its ping in flight, as cancelling its own keepalive task did.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Protocol

import anyio

from ._transport import TransportClosed, WebSocketTransport

__all__ = ["Activity", "Pingable", "SharedKeepalive"]

logger = logging.getLogger("kuber_exec.keepalive")


class Pingable(Protocol):
    """A connection the keepalive can ping (``WebSocketExecConnection``)."""

    async def ping_once(self, pong_timeout: float) -> bool:
        """One ping; ``False`` once the connection is over (closed, or found dead now)."""
        ...

    def keepalive_failed(self, error: Exception) -> None:
        """End the connection: pinging it raised ``error`` (a bug, not a dead peer)."""
        ...


class Activity:
    """The messages a pinged connection received, for the rule every keepalive turn follows:
    ping only an idle connection (the reader waits and nothing came since the last turn), and
    take a late pong for a dead peer only when nothing came meanwhile either. Why: a server
    blocked writing to a slow reader cannot read a ping, and closing with it unread resets the
    connection and loses the output queued behind it (``WebSocketExecConnection``)."""

    def __init__(self) -> None:
        self.received = 0
        self._at_turn = 0

    def arrived(self) -> None:
        """A message came (one integer add: this is on the receive path)."""
        self.received += 1

    def idle_turn(self, receiving: bool) -> bool:
        """Whether this keepalive turn should ping: the reader waits, and no message came since
        the last turn."""
        last, self._at_turn = self._at_turn, self.received
        return receiving and self.received == last

    async def turn(
        self,
        transport: WebSocketTransport,
        receiving: Callable[[], bool],
        pong_timeout: float,
    ) -> Turn:
        """One keepalive turn of a connection over ``transport`` whose reader waits while
        ``receiving()``: a ping when it is idle, and whether the peer is still there (see the
        class)."""
        if not self.idle_turn(receiving()):
            return Turn.ALIVE  # not idle: data came since the last turn, or the reader is behind
        received = self.received
        with anyio.move_on_after(pong_timeout) as deadline:
            try:
                await transport.ping()
            except TransportClosed:
                return Turn.CLOSED
        if deadline.cancelled_caught and receiving() and self.received == received:
            return Turn.DEAD
        return Turn.ALIVE


class Turn(enum.Enum):
    """How a keepalive turn (:meth:`Activity.turn`) found its connection."""

    ALIVE = "alive"
    #: The transport closed while pinging.
    CLOSED = "closed"
    #: No pong within the timeout while the reader waited, and no message meanwhile.
    DEAD = "dead"


class SharedKeepalive:
    """Pings each added connection every ``interval`` seconds from one task (:meth:`run`).

    A connection is pinged ``interval`` seconds after it is added, then ``interval`` seconds
    after each pong, until it is removed or :meth:`Pingable.ping_once` says it is over. Adding
    and removing are synchronous and cost no task. Made and run in a task (anyio's primitives).
    """

    def __init__(self, interval: float, pong_timeout: float) -> None:
        self._interval = interval
        self._pong_timeout = pong_timeout
        # Connection -> when its next ping is due, in due order (see the module docstring).
        self._due: dict[Pingable, float] = {}
        self._pinging: dict[Pingable, anyio.CancelScope] = {}
        self._wake: anyio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"<SharedKeepalive every {self._interval:g} s: {len(self._due)} waiting, "
            f"{len(self._pinging)} pinging>"
        )

    def __len__(self) -> int:
        """Connections kept alive (waiting for their next ping, or being pinged)."""
        return len(self._due) + len(self._pinging)

    def add(self, connection: Pingable) -> None:
        """Keep ``connection`` alive from now on."""
        self._schedule(connection)

    def remove(self, connection: Pingable) -> None:
        """Stop pinging ``connection`` (a ping in flight is cancelled). Idempotent."""
        self._due.pop(connection, None)
        scope = self._pinging.pop(connection, None)
        if scope is not None:
            scope.cancel()

    async def run(self) -> None:
        """Ping the connections as they fall due, until cancelled."""
        async with anyio.create_task_group() as pings:
            while True:
                if not self._due:
                    self._wake = anyio.Event()
                    await self._wake.wait()
                    self._wake = None
                    continue
                connection, due = next(iter(self._due.items()))
                # A connection added meanwhile falls due after this one: nothing to wake for.
                # One removed meanwhile costs an early wake-up, then its successor is looked at.
                if due > anyio.current_time():
                    await anyio.sleep_until(due)
                    continue
                del self._due[connection]
                scope = anyio.CancelScope()
                self._pinging[connection] = scope
                pings.start_soon(self._ping, connection, scope)

    async def _ping(self, connection: Pingable, scope: anyio.CancelScope) -> None:
        alive = False
        with scope:
            try:
                alive = await connection.ping_once(self._pong_timeout)
            except Exception as error:  # one connection's bug ends only that connection
                logger.exception("the keepalive ping failed")
                connection.keepalive_failed(error)
        if self._pinging.get(connection) is scope:
            del self._pinging[connection]
            if alive:
                self._schedule(connection)

    def _schedule(self, connection: Pingable) -> None:
        self._due[connection] = anyio.current_time() + self._interval
        if self._wake is not None:
            self._wake.set()
