"""``SharedKeepalive``, one pinger for every exec connection of a backend, on both runtimes: each
connection is pinged every interval until it is removed or over, a slow or broken peer delays
or ends only itself, and a backend's sessions cost no keepalive task each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import anyio
import pytest

from kuber_exec_anyio._connection._connection import WebSocketExecConnection
from kuber_exec_anyio._connection._keepalive import SharedKeepalive
from kuber_exec_core import Exit, Stdin, Stdout, Subprotocol
from kuber_exec_sandbox import Sandbox
from support import backend_for, eventually
from support import demo_request as run

pytestmark = pytest.mark.anyio

INTERVAL = 0.01
WAIT = 10


class Peer:
    """A connection whose pings answer as told: at once, never, with an error, or 'over'."""

    def __init__(self, answer: str = "pong", *, over_after: int | None = None) -> None:
        self.answer = answer
        self.over_after = over_after
        self.pings = 0
        self.cancelled_pings = 0
        self.failures: list[Exception] = []
        self._pinged = anyio.Event()

    async def ping_once(self, pong_timeout: float) -> bool:
        self.pings += 1
        self._pinged.set()
        if self.answer == "never":
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.cancelled_pings += 1
                raise
        if self.answer == "error":
            raise RuntimeError("a bug in the transport")
        return self.over_after is None or self.pings < self.over_after

    def keepalive_failed(self, error: Exception) -> None:
        self.failures.append(error)

    async def pinged(self, times: int) -> None:
        """Wait until this peer has been pinged ``times`` times in all."""
        with anyio.fail_after(WAIT):
            while self.pings < times:
                self._pinged = anyio.Event()
                await self._pinged.wait()


@asynccontextmanager
async def pinging(*peers: Peer, pong_timeout: float = 1.0) -> AsyncIterator[SharedKeepalive]:
    """A running ``SharedKeepalive`` with ``peers`` added (in order); stopped on leaving."""
    keepalive = SharedKeepalive(INTERVAL, pong_timeout=pong_timeout)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(keepalive.run)
        for peer in peers:
            keepalive.add(peer)
        yield keepalive
        tasks.cancel_scope.cancel()


async def test_each_connection_is_pinged_every_interval_until_removed() -> None:
    first, second = Peer(), Peer()
    async with pinging(first, second) as keepalive:
        await first.pinged(3)
        await second.pinged(3)
        keepalive.remove(first)
        pings = first.pings
        await second.pinged(second.pings + 3)
        assert first.pings == pings
        assert len(keepalive) == 1


async def test_the_pinger_sleeps_with_nothing_to_ping_and_wakes_for_a_new_connection() -> None:
    peer = Peer()
    async with pinging() as keepalive:
        await anyio.wait_all_tasks_blocked()
        keepalive.add(peer)
        await peer.pinged(2)
        keepalive.remove(peer)
        await anyio.wait_all_tasks_blocked()  # empty again: waiting for the next connection
        keepalive.add(peer)
        await peer.pinged(peer.pings + 2)


async def test_a_connection_that_is_over_is_no_longer_pinged() -> None:
    ended, steady = Peer(over_after=2), Peer()
    async with pinging(ended, steady) as keepalive:
        await ended.pinged(2)
        await steady.pinged(steady.pings + 4)
        assert ended.pings == 2
        assert len(keepalive) == 1


async def test_a_peer_that_never_answers_delays_no_other_and_removing_it_cancels_its_ping() -> None:
    silent, steady = Peer("never"), Peer()
    async with pinging(silent, steady, pong_timeout=60.0) as keepalive:
        await silent.pinged(1)
        await steady.pinged(5)  # while the silent peer's ping is still waiting
        assert (silent.pings, silent.cancelled_pings) == (1, 0)
        keepalive.remove(silent)
        await anyio.wait_all_tasks_blocked()
        assert silent.cancelled_pings == 1
        assert len(keepalive) == 1


async def test_a_ping_that_raises_ends_only_its_own_connection() -> None:
    broken, steady = Peer("error"), Peer()
    async with pinging(broken, steady):
        await broken.pinged(1)
        await steady.pinged(4)
        assert broken.pings == 1
        assert [str(error) for error in broken.failures] == ["a bug in the transport"]


def test_its_repr_counts_connections_and_says_nothing_else() -> None:
    keepalive = SharedKeepalive(5.0, pong_timeout=30.0)
    assert repr(keepalive) == "<SharedKeepalive every 5 s: 0 waiting, 0 pinging>"


async def tasks_of_two_open_sessions(
    adapter: ModuleType, sandbox: Sandbox, ping_interval: float | None
) -> tuple[int, int]:
    """How many tasks two open sessions add, and how many connections the backend pings."""
    async with backend_for(adapter, sandbox, ping_interval=ping_interval) as backend:  # type: ignore[arg-type]
        service: Any = adapter.ExecService(backend, cleanup=False)
        request = run("sh", "-c", "echo up; exec cat")
        before = len(anyio.get_running_tasks())
        async with (
            service.open_interactive(request, tty=False) as first,
            service.open_interactive(request, tty=False) as second,
        ):
            for session in (first, second):
                with anyio.fail_after(WAIT):
                    assert await session.__anext__() == Stdout(b"up\n")
            added = len(anyio.get_running_tasks()) - before
            pinged = 0 if backend._keepalive is None else len(backend._keepalive)
            for session in (first, second):
                await session.send(Stdin(b"", eof=True))
                with anyio.fail_after(WAIT):
                    assert [frame async for frame in session] == [Exit(0)]
        assert backend._keepalive is None or len(backend._keepalive) == 0
    return added, pinged


async def test_open_sessions_of_a_backend_start_no_keepalive_task_each(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    # The connections' pings all come from the backend's one pinger (before: one more task per
    # connection), so pinged sessions run as many tasks as sessions that are never pinged.
    without_pings = await tasks_of_two_open_sessions(adapter, sandbox, None)
    with_pings = await tasks_of_two_open_sessions(adapter, sandbox, 0.05)
    assert without_pings == (without_pings[0], 0)
    assert with_pings == (without_pings[0], 2)
    await eventually(lambda: sandbox.live_processes == 0, "the remote cats were not reaped")


class _Wire:
    """A transport whose messages come when the test says, and which counts pings (pongs at
    once)."""

    subprotocol = "v5.channel.k8s.io"

    def __init__(self) -> None:
        self.pings = 0
        self.send_message, self.incoming = anyio.create_memory_object_stream[bytes](10)

    async def receive(self) -> bytes:
        return await self.incoming.receive()

    async def ping(self) -> None:
        self.pings += 1


async def test_only_an_idle_connection_is_pinged() -> None:
    # A server blocked writing output to a slow reader cannot read a ping (it waits to write
    # the pong); the bytes it leaves unread turn its close into a TCP reset that loses the
    # output's tail. So output since the last turn, or a consumer behind, skips the ping.
    wire = _Wire()
    connection = WebSocketExecConnection(wire, Subprotocol.V5)  # type: ignore[arg-type]
    assert await connection.ping_once(1.0) is True  # nobody receives: the consumer is behind
    assert wire.pings == 0
    async with wire.send_message, wire.incoming, anyio.create_task_group() as reader:
        received: list[object] = []

        async def read(count: int) -> None:
            for _ in range(count):
                received.append(await connection.receive_message())

        reader.start_soon(read, 2)
        await wire.send_message.send(b"\x01output")
        await anyio.wait_all_tasks_blocked()  # received, and waiting for the next message
        assert await connection.ping_once(1.0) is True  # output since the last turn
        assert wire.pings == 0
        assert await connection.ping_once(1.0) is True  # idle now: pinged, and answered
        assert wire.pings == 1
        await wire.send_message.send(b"\x01more")
    assert received == [b"\x01output", b"\x01more"]
