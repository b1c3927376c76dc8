"""Cancellation, leaks, dead peers, dying servers and slow consumers, for both adapters."""

from __future__ import annotations

import tracemalloc
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from kuber_exec_core import Error, ExecErrorCode, Exit, Stdin, Stdout
from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread
from support import backend_for, eventually, open_fds, running_tasks
from support import demo_request as run

from .proxy import FreezingProxy

pytestmark = pytest.mark.anyio


class CancellingBackend:
    """Wraps a backend and cancels ``scope`` at its ``at``-th await point (1-based)."""

    def __init__(self, backend: Any, at: int) -> None:
        self._backend = backend
        self._at = at
        self.count = 0
        self.scope: anyio.CancelScope | None = None

    async def _point(self) -> None:
        self.count += 1
        if self.count == self._at and self.scope is not None:
            self.scope.cancel()
        await anyio.lowlevel.checkpoint()  # the await point itself

    async def get_deployment(self, namespace: str, name: str) -> Any:
        await self._point()
        return await self._backend.get_deployment(namespace, name)

    async def list_pods(self, namespace: str, selector: Any) -> Any:
        await self._point()
        return await self._backend.list_pods(namespace, selector)

    def exec(self, *args: Any) -> Any:
        outer = self

        class _Exec:
            async def __aenter__(self) -> Any:
                await outer._point()
                self._context = outer._backend.exec(*args)
                connection = await self._context.__aenter__()
                return _Connection(connection, outer)

            async def __aexit__(self, *exc: Any) -> Any:
                return await self._context.__aexit__(*exc)

        return _Exec()


class _Connection:
    def __init__(self, connection: Any, owner: CancellingBackend) -> None:
        self._connection = connection
        self._owner = owner
        self.subprotocol = connection.subprotocol

    @property
    def closed_cleanly(self) -> bool:
        return bool(self._connection.closed_cleanly)

    @property
    def close_reason(self) -> str | None:
        return self._connection.close_reason  # type: ignore[no-any-return]

    async def send_message(self, message: Any) -> None:
        await self._owner._point()
        await self._connection.send_message(message)

    async def receive_message(self) -> Any:
        await self._owner._point()
        return await self._connection.receive_message()


async def test_cancellation_at_every_await_point_of_execute(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    baseline_fds = open_fds()
    baseline_tasks = running_tasks(anyio_backend)
    at = 1
    async with backend_for(adapter, sandbox) as real:
        backend_tasks = running_tasks(anyio_backend)  # the baseline's and the backend's pinger
        while True:
            backend = CancellingBackend(real, at)
            service = adapter.ExecService(backend)
            with anyio.CancelScope() as scope:
                backend.scope = scope
                result = await service.execute(run("sh", "-c", "cat; echo done"), stdin=b"in")
            if not scope.cancel_called:
                assert result.stdout == b"indone\n"
                break
            assert scope.cancelled_caught, f"cancellation at point {at} was swallowed"
            assert running_tasks(anyio_backend) == backend_tasks, "a task leaked"
            await eventually(lambda: sandbox.live_processes == 0, "a process leaked")
            at += 1
    assert at > 4, "the run had fewer await points than expected"
    assert running_tasks(anyio_backend) == baseline_tasks, "the backend left a task"
    await eventually(lambda: open_fds() <= baseline_fds, "a socket leaked")


async def test_cancellation_at_every_await_point_of_a_session(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    baseline_fds = open_fds()
    baseline_tasks = running_tasks(anyio_backend)
    at = 1
    async with backend_for(adapter, sandbox) as real:
        backend_tasks = running_tasks(anyio_backend)  # the baseline's and the backend's pinger
        while True:
            backend = CancellingBackend(real, at)
            service = adapter.ExecService(backend)
            frames = []
            with anyio.CancelScope() as scope:
                backend.scope = scope
                async with service.open_interactive(run("cat"), tty=False) as session:
                    await session.send(Stdin(b"x", eof=True))
                    frames = [frame async for frame in session]
            if not scope.cancel_called:
                assert frames[0] == Stdout(b"x")
                break
            assert scope.cancelled_caught, f"cancellation at point {at} was swallowed"
            assert running_tasks(anyio_backend) == backend_tasks, "a task leaked"
            await eventually(lambda: sandbox.live_processes == 0, "a process leaked")
            at += 1
    assert at > 4
    assert running_tasks(anyio_backend) == baseline_tasks, "the backend left a task"
    await eventually(lambda: open_fds() <= baseline_fds, "a socket leaked")


async def test_timeout_around_a_long_command_closes_everything(adapter: Any, sandbox: Any) -> None:
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        with anyio.move_on_after(0.5) as scope:
            await service.execute(run("sleep", "30"))
    assert scope.cancelled_caught
    await eventually(lambda: sandbox.live_processes == 0, "the remote process was not reaped")


async def test_server_dying_mid_stream_is_exec_failed(adapter: Any) -> None:
    context = run_sandbox_in_thread(demo_cluster())
    dying = context.__enter__()
    stopped = False
    try:
        async with backend_for(adapter, dying) as backend:
            service = adapter.ExecService(backend)
            command = run("sh", "-c", "echo started; sleep 60")
            async with service.open_interactive(command, tty=False) as session:
                frames = []
                with anyio.fail_after(30):
                    async for frame in session:
                        frames.append(frame)
                        if frame == Stdout(b"started\n"):
                            await anyio.to_thread.run_sync(context.__exit__, None, None, None)
                            stopped = True
    finally:
        if not stopped:
            context.__exit__(None, None, None)
    assert isinstance(frames[-1], Error)
    assert frames[-1].code is ExecErrorCode.FAILED
    assert "exit status unknown" in frames[-1].message


async def test_dead_peer_is_detected_by_keepalive(adapter: Any, sandbox: Any) -> None:
    proxy = FreezingProxy(sandbox.url)
    async with proxy.running():
        config = adapter.ClusterConfig(proxy.url)
        options = {"ping_interval": 0.1, "pong_timeout": 0.5}
        async with adapter.KubernetesBackend(config, **options) as backend:
            # No cleanup: its exec would go through the frozen proxy too (and wait out its
            # bound); this test is about detecting the dead peer.
            service = adapter.ExecService(backend, cleanup=False)
            command = run("sh", "-c", "echo started; sleep 60")
            async with service.open_interactive(command, tty=False) as session:
                frames = []
                with anyio.fail_after(30):
                    async for frame in session:
                        frames.append(frame)
                        if frame == Stdout(b"started\n"):
                            proxy.freeze()
    assert isinstance(frames[-1], Error)
    assert "no pong from the server within 0.5 s" in frames[-1].message
    # As on a real cluster, the frozen connection leaves the command running: end it here.
    assert sandbox.cluster.faults.kill_processes("demo", session.target.pod) == 1
    await eventually(lambda: sandbox.live_processes == 0, "the remote process was not reaped")


async def test_a_late_pong_behind_arriving_output_is_not_a_dead_peer(
    adapter: Any, sandbox: Any
) -> None:
    # Under load a pong waits behind the output the server already sent; seen from here, no
    # pong comes while messages keep arriving. Those prove the peer alive: the command ends
    # with its own exit, not "no pong" (issue 35: a 10,000-file download on a busy cluster).
    proxy = FreezingProxy(sandbox.url)
    async with proxy.running():
        config = adapter.ClusterConfig(proxy.url)
        options = {"ping_interval": 0.1, "pong_timeout": 0.3, "close_timeout": 0.2}
        async with adapter.KubernetesBackend(config, **options) as backend:
            service = adapter.ExecService(backend, cleanup=False)
            # Output every 50 ms for 2 s: never a 0.3 s gap without a message.
            lines = "for i in $(seq 40); do echo $i; sleep 0.05; done"
            async with service.open_interactive(run("sh", "-c", lines), tty=False) as session:
                frames = []
                with anyio.fail_after(30):
                    async for frame in session:
                        frames.append(frame)
                        if frame == Stdout(b"1\n"):
                            proxy.mute_client()  # no ping reaches the server from now on
    output = b"".join(f.data for f in frames if isinstance(f, Stdout))
    assert output == b"".join(b"%d\n" % i for i in range(1, 41))
    assert frames[-1] == Exit(0)


async def test_slow_consumer_keeps_memory_flat(service: Any) -> None:
    total = 200 * 1000 * 1000
    command = run("head", "-c", str(total), "/dev/zero")
    received = 0
    tracemalloc.start()
    try:
        async with service.open_interactive(command, tty=False, queue_capacity=8) as session:
            async for frame in session:
                if isinstance(frame, Stdout):
                    received += len(frame.data)
                    if received % (8 * 1024 * 1024) < len(frame.data):
                        await anyio.sleep(0.05)  # be slow: let every buffer upstream fill
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert received == total
    assert peak < 24 * 1024 * 1024, f"peak traced memory {peak} bytes"
