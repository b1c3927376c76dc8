"""execute: output, exit codes, caps, stdin, failures, for both adapters."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from kuber_exec_core import ExecError, ExecErrorCode, ExecOutputLimitError
from support import backend_for
from support import demo_request as run

pytestmark = pytest.mark.anyio

PYTHON = sys.executable


async def test_stdout_and_stderr_are_separate(service: Any) -> None:
    result = await service.execute(run("sh", "-c", "printf out; printf err >&2"))
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"out", b"err")
    assert result.stdout_text == "out"
    assert result.target.deployment == "web"


async def test_hostname_is_the_pod_name(service: Any) -> None:
    result = await service.execute(run("sh", "-c", 'printf "%s" "$HOSTNAME"'))
    assert result.stdout.decode() == result.target.pod


async def test_non_zero_exit_code(service: Any) -> None:
    result = await service.execute(run("sh", "-c", "echo bye; exit 7"))
    assert result.exit_code == 7
    assert result.reason == "NonZeroExitCode"
    assert result.stdout == b"bye\n"
    assert not result.ok


async def test_missing_executable_is_exec_failed(service: Any) -> None:
    with pytest.raises(ExecError) as caught:
        await service.execute(run("/nonexistent/kuber-exec-test"))
    assert caught.value.code is ExecErrorCode.FAILED
    assert "Internal error occurred" in caught.value.message


async def test_binary_output_is_untouched(service: Any) -> None:
    script = "import sys; sys.stdout.buffer.write(bytes(range(256)) * 3)"
    result = await service.execute(run(PYTHON, "-c", script))
    assert result.stdout == bytes(range(256)) * 3


async def test_utf8_split_across_messages_survives(service: Any) -> None:
    # 40000 two-byte characters: the server's 32 KiB messages split one of them.
    script = "import sys; sys.stdout.buffer.write('é'.encode() * 40000)"
    result = await service.execute(run(PYTHON, "-c", script))
    assert result.stdout_text == "é" * 40000


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_cap_stops_at_the_first_excess_byte(service: Any, stream: str) -> None:
    target = "" if stream == "stdout" else " >&2"
    caps = {f"{stream}_cap": 10}
    ok = await service.execute(run("sh", "-c", f"printf 0123456789{target}"), **caps)
    assert getattr(ok, stream) == b"0123456789"
    with pytest.raises(ExecOutputLimitError) as caught:
        await service.execute(run("sh", "-c", f"printf 0123456789X{target}"), **caps)
    assert (caught.value.stream, caught.value.limit_bytes) == (stream, 10)
    assert caught.value.code is ExecErrorCode.OUTPUT_LIMIT
    assert caught.value.message == f"{stream} exceeded the 10 byte output limit"


async def test_cap_ends_an_endless_command(service: Any) -> None:
    with pytest.raises(ExecOutputLimitError):
        await service.execute(run("sh", "-c", "yes"), stdout_cap=100_000)


@pytest.mark.parametrize("cap", [0, -1, 1024 * 1024 + 1])
async def test_invalid_cap(service: Any, cap: int) -> None:
    with pytest.raises(ExecError) as caught:
        await service.execute(run("true"), stderr_cap=cap)
    assert caught.value.code is ExecErrorCode.INVALID
    assert caught.value.message == "stderrCapBytes must be between 1 and 1048576"


async def test_stdin_is_sent_then_closed(service: Any) -> None:
    result = await service.execute(run("cat"), stdin=b"hello\x00\xff")
    assert result.stdout == b"hello\x00\xff"


async def test_large_stdin_echoed_back_does_not_deadlock(service: Any) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: more than every buffer on the way
    result = await service.execute(run("cat"), stdin=payload)
    assert result.stdout == payload


async def test_empty_stdin_is_eof(service: Any) -> None:
    result = await service.execute(run("sh", "-c", "cat; echo done"), stdin=b"")
    assert result.stdout == b"done\n"


async def test_stdin_on_a_v4_server_is_refused_before_the_command_starts(
    adapter: Any, v4_sandbox: Any
) -> None:
    async with backend_for(adapter, v4_sandbox) as backend:
        service = adapter.ExecService(backend)
        with pytest.raises(ExecError) as caught:
            await service.execute(run("cat"), stdin=b"data")
        assert caught.value.code is ExecErrorCode.INVALID
        assert "v5.channel.k8s.io" in caught.value.message
        # Without stdin, v4 works, exit codes included.
        result = await service.execute(run("sh", "-c", "echo v4; exit 3"))
    assert (result.stdout, result.exit_code) == (b"v4\n", 3)
