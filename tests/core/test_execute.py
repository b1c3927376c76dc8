"""``execute``'s accounting (the seed's ``collect``): per-stream caps, the limit error at exactly
the first excess byte, the result, and the stdin rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    NEED_DATA,
    ExecError,
    ExecErrorCode,
    ExecOutputLimitError,
    ExecResult,
    ExecuteRun,
    ResolvedTarget,
    StreamName,
    Subprotocol,
)
from kuber_exec_core import testing as kt
from kuber_exec_core._execute import OutputBuffer
from kuber_exec_core.channels import Channel
from kuber_exec_core.server import status_exit_code, status_failure, status_success

TARGET = ResolvedTarget(
    namespace="ns", deployment="web", deployment_uid="d", pod="web-1", pod_uid="p", container="app"
)


def run(
    subprotocol: Subprotocol = Subprotocol.V5,
    *,
    stdout_cap: int = 100,
    stderr_cap: int = 100,
    stdin: bytes | None = None,
) -> ExecuteRun:
    return ExecuteRun(
        TARGET, subprotocol, stdout_cap=stdout_cap, stderr_cap=stderr_cap, stdin=stdin
    )


def feed(execute: ExecuteRun, *messages: bytes | str) -> None:
    for message in messages:
        execute.receive_message(message)


def out(data: bytes, subprotocol: Subprotocol = Subprotocol.V5) -> bytes | str:
    return kt.frame_message(subprotocol, Channel.STDOUT, data)


def err(data: bytes, subprotocol: Subprotocol = Subprotocol.V5) -> bytes | str:
    return kt.frame_message(subprotocol, Channel.STDERR, data)


def status(payload: bytes, subprotocol: Subprotocol = Subprotocol.V5) -> bytes | str:
    return kt.frame_message(subprotocol, Channel.ERROR, payload)


# -- OutputBuffer ---------------------------------------------------------------------------------


def test_output_buffer_cap_is_inclusive() -> None:
    buffer = OutputBuffer("stdout", 5)
    buffer.add(b"abc")
    buffer.add(b"de")
    assert buffer.size == 5
    with pytest.raises(ExecOutputLimitError) as caught:
        buffer.add(b"f")
    error = caught.value
    assert (error.code, error.message) == (
        ExecErrorCode.OUTPUT_LIMIT,
        "stdout exceeded the 5 byte output limit",
    )
    assert (error.stream, error.limit_bytes) == ("stdout", 5)
    assert isinstance(error, ExecError)
    # The excess chunk was not kept: output never exceeds the cap.
    assert buffer.size == 5
    assert buffer.getvalue() == b"abcde"
    assert buffer.getvalue() == b"abcde"


def test_output_buffer_empty() -> None:
    assert OutputBuffer("stderr", 1).getvalue() == b""


@given(
    st.lists(st.binary(max_size=30), max_size=20),
    st.integers(1, 200),
    st.sampled_from(["stdout", "stderr"]),
)
def test_output_buffer_property(chunks: list[bytes], cap: int, stream: StreamName) -> None:
    buffer = OutputBuffer(stream, cap)
    total = 0
    for chunk in chunks:
        if total + len(chunk) > cap:
            with pytest.raises(ExecOutputLimitError) as caught:
                buffer.add(chunk)
            assert caught.value.message == f"{stream} exceeded the {cap} byte output limit"
            break
        buffer.add(chunk)
        total += len(chunk)
        assert buffer.size == total <= cap
    assert buffer.getvalue() == b"".join(chunks)[:total]


# -- ExecuteRun -----------------------------------------------------------------------------------


def test_result() -> None:
    execute = run()
    assert execute.stdin_messages() == []
    assert execute.next_event() is NEED_DATA
    feed(execute, out(b""), out(b"hello "), err(b"warn\xff"), out(b"world"))
    assert execute.next_event() is NEED_DATA
    feed(execute, status(status_exit_code(3, "exit 3")))
    result = execute.next_event()
    assert isinstance(result, ExecResult)
    assert result.target == TARGET
    assert (result.exit_code, result.reason, result.message) == (3, "NonZeroExitCode", "exit 3")
    assert (result.stdout, result.stderr) == (b"hello world", b"warn\xff")
    assert result.stdout_text == "hello world"
    assert result.stderr_text == "warn\ufffd"
    assert not result.ok
    assert "11 bytes" in repr(result)


def test_limit_error_at_the_first_excess_byte() -> None:
    execute = run(stdout_cap=5, stderr_cap=1)
    feed(execute, out(b"abc"), err(b"x"), out(b"de"))
    assert execute.next_event() is NEED_DATA  # exactly at the cap: fine
    feed(execute, out(b"f"), status(status_success()))
    with pytest.raises(ExecOutputLimitError) as caught:
        execute.next_event()
    assert (caught.value.stream, caught.value.limit_bytes) == ("stdout", 5)


def test_limit_error_is_final() -> None:
    """After the limit error the run is over: asking again never yields a (truncated) result."""
    execute = run(stdout_cap=2)
    feed(execute, out(b"abc"), status(status_success()))
    with pytest.raises(ExecOutputLimitError):
        execute.next_event()
    with pytest.raises(ExecOutputLimitError):
        execute.next_event()


def test_stderr_limit() -> None:
    execute = run(stderr_cap=3)
    feed(execute, err(b"1234"))
    with pytest.raises(ExecOutputLimitError) as caught:
        execute.next_event()
    assert caught.value.message == "stderr exceeded the 3 byte output limit"


def test_failure_status_raises() -> None:
    execute = run(Subprotocol.V4)
    feed(execute, status(status_failure("boom"), Subprotocol.V4))
    with pytest.raises(ExecError) as caught:
        execute.next_event()
    assert (caught.value.code, caught.value.message) == (
        ExecErrorCode.FAILED,
        "Internal error occurred: boom",
    )


def test_no_status_raises_unknown() -> None:
    execute = run(Subprotocol.V4)
    feed(execute, out(b"partial", Subprotocol.V4))
    execute.connection_closed(clean=True, reason="going away")
    with pytest.raises(ExecError) as caught:
        execute.next_event()
    assert caught.value.code is ExecErrorCode.FAILED
    assert caught.value.message == (
        "exit status unknown: the connection closed before the exec status arrived (going away)"
    )


def test_stdin_is_sent_whole_then_closed() -> None:
    assert ExecuteRun.subprotocols(stdin=True) == (Subprotocol.V5,)
    assert ExecuteRun.subprotocols(stdin=False) == (Subprotocol.V5, Subprotocol.V4)
    data = b"x" * (32 * 1024 + 1)
    execute = run(stdin=data)
    messages = execute.stdin_messages()
    assert messages == [b"\x00" + data[: 32 * 1024], b"\x00x", b"\xff\x00"]
    with pytest.raises(ExecError) as caught:
        execute.stdin_messages()
    assert caught.value.message == "stdin is already closed"
    feed(execute, status(status_success()))
    result = execute.next_event()
    assert isinstance(result, ExecResult)
    assert result.ok


def test_stdin_on_v4_is_refused_before_sending() -> None:
    execute = run(Subprotocol.V4, stdin=b"data")
    with pytest.raises(ExecError) as caught:
        execute.stdin_messages()
    assert caught.value.code is ExecErrorCode.INVALID
    assert "v5.channel.k8s.io" in caught.value.message


chunks = st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=12)), max_size=15)


@given(
    st.sampled_from(Subprotocol),
    chunks,
    st.integers(1, 60),
    st.integers(1, 60),
    st.sampled_from(["exit", "failure", "truncated"]),
)
def test_cap_accounting(
    subprotocol: Subprotocol,
    output: list[tuple[int, bytes]],
    stdout_cap: int,
    stderr_cap: int,
    ending: str,
) -> None:
    execute = run(subprotocol, stdout_cap=stdout_cap, stderr_cap=stderr_cap)
    caps = {1: stdout_cap, 2: stderr_cap}
    sizes = {1: 0, 2: 0}
    expected_limit: tuple[str, int] | None = None
    for channel, data in output:
        execute.receive_message(kt.frame_message(subprotocol, channel, data))
        if expected_limit is None:
            sizes[channel] += len(data)
            if sizes[channel] > caps[channel]:
                expected_limit = ("stdout" if channel == 1 else "stderr", caps[channel])
    structured = subprotocol.has_structured_status
    if ending == "exit":
        payload = status_exit_code(7) if structured else None
        if payload is not None:
            execute.receive_message(kt.frame_message(subprotocol, 3, payload))
        execute.connection_closed(clean=True)
    elif ending == "failure":
        payload = status_failure("no") if structured else b"no"
        execute.receive_message(kt.frame_message(subprotocol, 3, payload))
        if not structured:
            # Pre-v4 failure text has no end marker: it is whole when the connection ends.
            execute.connection_closed(clean=True)
    else:
        execute.connection_closed(clean=False)
    if expected_limit is not None:
        with pytest.raises(ExecOutputLimitError) as caught:
            execute.next_event()
        assert (caught.value.stream, caught.value.limit_bytes) == expected_limit
        return
    if ending == "exit":
        result = execute.next_event()
        assert isinstance(result, ExecResult)
        assert result.exit_code == (7 if structured else 0)
        assert result.stdout == b"".join(d for c, d in output if c == 1)
        assert result.stderr == b"".join(d for c, d in output if c == 2)
        assert len(result.stdout) <= stdout_cap
        assert len(result.stderr) <= stderr_cap
        return
    with pytest.raises(ExecError) as failure:
        execute.next_event()
    assert failure.value.code is ExecErrorCode.FAILED
