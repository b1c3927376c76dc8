"""Interactive sessions: frame order, stdin/EOF, TTY and resize, close, for both adapters."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from kuber_exec_core import (
    Close,
    Error,
    ExecError,
    ExecErrorCode,
    Exit,
    Resize,
    Stderr,
    Stdin,
    Stdout,
    Subprotocol,
)
from support import backend_for
from support import collect_frames as collect
from support import demo_request as run
from support import output_of as output

pytestmark = pytest.mark.anyio


async def test_data_then_exactly_one_terminal_frame(service: Any) -> None:
    command = run("sh", "-c", "printf a; printf b >&2; printf c; exit 4")
    async with service.open_interactive(command, tty=False) as session:
        assert session.protocol is Subprotocol.V5
        assert session.target.deployment == "web"
        frames = await collect(session)
        assert frames[-1] == Exit(4, "NonZeroExitCode", frames[-1].message)  # type: ignore[attr-defined]
        assert not any(isinstance(f, Exit | Error) for f in frames[:-1])
        assert (output(frames, Stdout), output(frames, Stderr)) == (b"ac", b"b")
        # After the end: iteration stays over, sending is refused as aborted.
        assert await collect(session) == []
        with pytest.raises(ExecError) as caught:
            await session.send(Stdin(b"late"))
        assert caught.value.code is ExecErrorCode.ABORTED


async def test_stdin_then_eof(service: Any) -> None:
    async with service.open_interactive(run("sh", "-c", "cat; echo end"), tty=False) as session:
        await session.send(Stdin(b"one "))
        await session.send(Stdin("two", eof=True))
        frames = await collect(session)
    assert output(frames, Stdout) == b"one twoend\n"
    assert frames[-1] == Exit(0)


async def test_stdin_after_eof_and_bad_frames_are_refused(service: Any) -> None:
    async with service.open_interactive(run("cat"), tty=False) as session:
        with pytest.raises(ExecError) as too_big:
            await session.send(Stdin(b"x" * (64 * 1024 + 1)))
        assert too_big.value.message == "stdin frame exceeds 65536 bytes"
        with pytest.raises(ExecError) as no_tty:
            await session.send(Resize(80, 24))
        assert no_tty.value.code is ExecErrorCode.INVALID
        with pytest.raises(ExecError) as unknown:
            await session.send(object())
        assert unknown.value.message == "Unknown interactive exec frame"
        await session.send(Stdin(b"", eof=True))
        with pytest.raises(ExecError) as after_eof:
            await session.send(Stdin(b"more"))
        assert after_eof.value.message == "stdin is already closed"
        assert (await collect(session))[-1] == Exit(0)


async def test_tty_follows_resize(service: Any) -> None:
    async with service.open_interactive(run("sh")) as session:
        await session.send(Resize(123, 45))
        await session.send(Stdin(b"stty size; exit 5\n"))
        frames = await collect(session)
    assert not any(isinstance(f, Stderr) for f in frames)
    assert b"45 123" in output(frames, Stdout)
    assert frames[-1] == Exit(5, "NonZeroExitCode", frames[-1].message)  # type: ignore[attr-defined]
    with pytest.raises(ExecError) as caught:
        await session.send(Resize(0, 10))
    assert caught.value.code is ExecErrorCode.ABORTED


async def test_resize_bounds(service: Any) -> None:
    async with service.open_interactive(run("sh")) as session:
        for columns, rows in [(0, 1), (1, 0), (65536, 1), (True, 1)]:
            with pytest.raises(ExecError) as caught:
                await session.send(Resize(columns, rows))
            assert caught.value.message == (
                "Terminal dimensions must be integers between 1 and 65535"
            )
        await session.send(Resize(65535, 1))
        await session.send(Stdin(b"exit\n"))
        assert (await collect(session))[-1] == Exit(0)


async def test_client_close_ends_iteration_and_refuses_sends(service: Any) -> None:
    async with service.open_interactive(run("sh", "-c", "echo hi; cat"), tty=False) as session:
        async for frame in session:
            assert frame == Stdout(b"hi\n")
            break
        await session.send(Close())
        assert await collect(session) == []
        with pytest.raises(ExecError) as caught:
            await session.send(Stdin(b"x"))
        assert (caught.value.code, caught.value.message) == (
            ExecErrorCode.ABORTED,
            "Exec request was aborted",
        )
        await session.aclose()  # idempotent


async def test_v4_session_cannot_close_stdin(adapter: Any, v4_sandbox: Any) -> None:
    async with backend_for(adapter, v4_sandbox) as backend:
        service = adapter.ExecService(backend)
        async with service.open_interactive(run("cat"), tty=False) as session:
            assert session.protocol is Subprotocol.V4
            await session.send(Stdin(b"ping\n"))
            async for frame in session:
                assert frame == Stdout(b"ping\n")
                break
            with pytest.raises(ExecError) as caught:
                await session.send(Stdin(b"", eof=True))
            assert caught.value.code is ExecErrorCode.INVALID
            assert "v5.channel.k8s.io" in caught.value.message
            assert "v4.channel.k8s.io" in caught.value.message


async def test_invalid_queue_capacity(service: Any) -> None:
    with pytest.raises(ExecError) as caught:
        async with service.open_interactive(run("true"), queue_capacity=0):
            pass
    assert (caught.value.code, caught.value.message) == (
        ExecErrorCode.INVALID,
        "queueCapacity must be a positive integer",
    )


async def test_binary_stdout_in_a_session(service: Any) -> None:
    script = "import sys; sys.stdout.buffer.write(bytes(range(256)))"
    async with service.open_interactive(run(sys.executable, "-c", script), tty=False) as session:
        frames = await collect(session)
    assert output(frames, Stdout) == bytes(range(256))


async def test_session_without_stdin(service: Any) -> None:
    # No stdin stream at all: the command reads end of input at once, and Stdin is refused.
    command = run("sh", "-c", "cat; echo after")
    async with service.open_interactive(command, tty=False, stdin=False) as session:
        with pytest.raises(ExecError) as caught:
            await session.send(Stdin(b"x"))
        assert caught.value.message == "stdin was not requested for this session"
        frames = await collect(session)
    assert output(frames, Stdout) == b"after\n"
    assert frames[-1] == Exit(0)
