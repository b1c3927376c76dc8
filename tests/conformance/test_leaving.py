"""Leaving, cancelling or hitting a cap returns at once whatever is blocked, on both runtimes
(issue 11, items 3 to 5): the socket is still closed and nothing leaks.

The backends here wait up to 30 s for a Close reply (``close_timeout=30``): a leave that tried a
closing handshake which cannot complete would take that long, so the bounds below (2 s, against
the 5 s every one of these took before) tell "skipped or completed at once" from "waited".
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kuber_exec_core import ExecOutputLimitError, Stdin, Stdout
from support import backend_for, eventually, open_fds, running_tasks
from support import demo_request as run

pytestmark = pytest.mark.anyio

BOUND = 2.0
PATIENT = {"close_timeout": 30.0}


async def no_leaks(sandbox: Any, baseline_fds: int) -> None:
    await eventually(lambda: sandbox.live_processes == 0, "a remote process was not reaped")
    await eventually(lambda: open_fds() <= baseline_fds, "a socket leaked")


async def test_leaving_while_a_stdin_send_is_blocked(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    baseline_fds, baseline_tasks = open_fds(), running_tasks(anyio_backend)
    async with backend_for(adapter, sandbox, **PATIENT) as backend:
        service = adapter.ExecService(backend)
        sent = 0
        async with service.open_interactive(run("cat"), tty=False) as session:
            # Nobody reads cat's output, so cat stops reading stdin and a send blocks: a send
            # that has not finished within 0.5 s is blocked (it is cancelled there).
            blocked = False
            while not blocked:
                with anyio.move_on_after(0.5) as deadline:
                    await session.send(Stdin(b"z" * 65536))
                    sent += 1
                blocked = deadline.cancelled_caught
            left = anyio.current_time()
        elapsed = anyio.current_time() - left
    assert sent > 0
    assert elapsed < BOUND, f"leaving took {elapsed:.2f} s"
    assert running_tasks(anyio_backend) == baseline_tasks
    await no_leaks(sandbox, baseline_fds)


async def test_leaving_with_a_full_frame_queue(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    baseline_fds, baseline_tasks = open_fds(), running_tasks(anyio_backend)
    async with backend_for(adapter, sandbox, **PATIENT) as backend:
        service = adapter.ExecService(backend)
        async with service.open_interactive(run("yes"), tty=False, queue_capacity=2) as session:
            assert isinstance(await session.__anext__(), Stdout)
            # The reader is blocked on the full queue: every buffer behind it fills.
            frames = session._frames
            await eventually(lambda: frames.senders_waiting == 1, "the queue did not fill")
            left = anyio.current_time()
        elapsed = anyio.current_time() - left
    assert elapsed < BOUND, f"leaving took {elapsed:.2f} s"
    assert running_tasks(anyio_backend) == baseline_tasks
    await no_leaks(sandbox, baseline_fds)


async def test_a_cap_error_while_stdin_is_still_being_sent(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    baseline_fds, baseline_tasks = open_fds(), running_tasks(anyio_backend)
    async with backend_for(adapter, sandbox, **PATIENT) as backend:
        service = adapter.ExecService(backend)
        for _ in range(3):
            start = anyio.current_time()
            with pytest.raises(ExecOutputLimitError):
                await service.execute(run("cat"), stdin=b"y" * 10_000_000, stdout_cap=1)
            elapsed = anyio.current_time() - start
            assert elapsed < BOUND, f"the cap error took {elapsed:.2f} s"
    assert running_tasks(anyio_backend) == baseline_tasks
    await no_leaks(sandbox, baseline_fds)


async def test_a_cancelled_caller_returns_at_once(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    baseline_fds, baseline_tasks = open_fds(), running_tasks(anyio_backend)
    baseline_processes = sandbox.live_processes
    async with backend_for(adapter, sandbox, **PATIENT) as backend:
        service = adapter.ExecService(backend)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tasks:

                async def cancel_once_sending() -> None:
                    # Cancel once the command runs: it reads no stdin, so the sends of its
                    # 10 MB block behind the pipe from the start.
                    started = lambda: sandbox.live_processes > baseline_processes  # noqa: E731
                    await eventually(started, "the command to start")
                    scope.cancel()

                tasks.start_soon(cancel_once_sending)
                # sleep reads no stdin: the sends block (and the sandbox, like a real server,
                # waits on the process's stdin pipe until the process ends by itself).
                await service.execute(run("sleep", "1"), stdin=b"y" * 10_000_000)
        cancelled = anyio.current_time()
    assert scope.cancelled_caught
    assert anyio.current_time() - cancelled < BOUND
    assert running_tasks(anyio_backend) == baseline_tasks
    await no_leaks(sandbox, baseline_fds)


async def test_stdin_the_command_never_reads_raises_nothing_raw(adapter: Any, sandbox: Any) -> None:
    # echo exits without reading its 10 MB of stdin: the server closes under the send. Before,
    # asyncio raised AttributeError from transport.abort() in about one run in five.
    baseline_fds = open_fds()
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        for _ in range(10):
            result = await service.execute(run("echo", "hi"), stdin=b"y" * 10_000_000)
            assert (result.exit_code, result.stdout) == (0, b"hi\n")
    await no_leaks(sandbox, baseline_fds)


async def drain(transport: Any) -> None:
    """Receive until the transport raises (the connection has ended)."""
    while True:
        await transport.receive()


async def test_the_transport_reports_the_servers_finished_close_handshake(
    adapter: Any, sandbox: Any, anyio_backend: str
) -> None:
    # The shared close skips its handshake when the transport says it is over (issue 19's
    # latency work): true only once the server's Close arrived and the library answered it.
    from kuber_exec_anyio.transport import TransportClosed, TransportOptions
    from kuber_exec_asyncio._transport import open_asyncio_transport
    from kuber_exec_core import ExecStreams
    from kuber_exec_core.kube import exec_path
    from kuber_exec_trio._transport import open_trio_transport

    opener = open_trio_transport if anyio_backend == "trio" else open_asyncio_transport
    async with backend_for(adapter, sandbox) as backend:
        target = await adapter.ExecService(backend).resolve_target(run("true"))
    url = sandbox.url.replace("http", "ws", 1) + exec_path(target, ["true"], ExecStreams())
    options = TransportOptions(
        url=url,
        subprotocols=("v5.channel.k8s.io",),
        ssl_context=None,
        headers=(),
        connect_timeout=10.0,
    )
    async with opener(options) as transport:
        assert not transport.closing_handshake_done  # open: the server has not closed yet
        with anyio.fail_after(10), pytest.raises(TransportClosed):
            await drain(transport)
        # receive() ends once the server's Close is read; the library's reply follows at once.
        await eventually(lambda: transport.closing_handshake_done, "the handshake never ended")
