"""kuber-exec's client, both adapters, against containerd's real CRI streaming server.

``RuntimeBackend`` (``runtime_backend.py``) puts containerd behind the ``Backend`` seam, so the
real ``ExecService.execute`` / ``open_interactive`` of ``kuber_exec_trio`` and
``kuber_exec_asyncio`` run unchanged: targeting resolves to the synthetic pod, then each exec gets
a fresh CRI URL and opens it with the adapter's ``connect_exec``. The wire-level cases drive
``connect_exec`` with the core's ``ExecSession`` / ``ExecuteRun`` directly.

Wire facts observed here (containerd 1.6.20, runc 1.1.5), beyond those in test_cri_harness.py:

* The refusal of an unsupported offer (``v5.channel.k8s.io`` alone, as ``execute(stdin=...)``
  offers) is the 26 bytes ``HTTP/1.1 403 Forbidden\r\n\r\n`` and then the server closes TCP at
  once: no ``Content-Length``, so the (empty) body ends at the close. trio-websocket never
  reported such a refusal (it waited for the connect timeout, 30 s, then ``TooSlowError``);
  fixed in ``kuber_exec_trio.connect_exec`` (commit b662d96), and its own transport since reads
  the response to the end of the stream. The command never starts.
* With only stdin requested, the first message is ``b"\x03"`` (the empty no-op on the status
  channel), and after it nothing but the status: the core yields no frame for it.
* Exit codes 3 and 255 arrive in the ``ExitCode`` cause; ``v4.base64.channel.k8s.io`` carries the
  same Status JSON, so the exit code is structured there too. ``base64.channel.k8s.io`` and
  ``channel.k8s.io`` report "command terminated with non-zero exit code: error executing command
  [...], exit code 3" as text (``EXEC_FAILED``), a missing executable as "Internal error
  occurred: error executing command in container: ..." and success only by the clean Close 1000.
* busybox ``printf`` octal escapes write all 256 byte values; the protocols carry them intact.
* Output messages: at most 32768 bytes of payload, mostly multiples of 4096 (the size of each
  pipe read): ``head -c 52428800 /dev/zero`` came as 8405 messages (7151 of 4096 bytes, 425 of
  32768); ``cat`` of a 1 MiB file repeated, as 561 messages (244 of 32768, 239 of 4096). 50 MiB
  went through ``execute`` in about 1 s per adapter.
* TTY: a resize sent before any stdin is applied (``stty size`` prints ``rows columns``), and a
  later one too; everything comes on stdout with ``\r\n``; the runtime sent nothing on stderr.
* A client Close frame is answered at once with Close 1000 and a TCP close, even while the
  process keeps running (a raw-socket probe with ``sleep``).
* Client close (a cancelled session; either a Close frame or just a TCP close): containerd logs
  ``Container exec "<exec id>" stdin closed``. Without a TTY it then closes the process's stdin
  (the shim drops the write end of the stdin pipe: ``cat`` reads EOF and exits). With a TTY the
  terminal is left alone (containerd only stops copying output). In both cases the process is
  neither signalled nor killed: ``sleep`` keeps running in the container after the client has
  gone (its output goes nowhere); only its own exit ends it.
* kuber-exec side of a cancel: both adapters closed their socket promptly (trio used to wait the
  whole 5 s close timeout for a Close reply its cancelled reader could not read; fixed in
  commit 040f300) and left no file descriptor open.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from kuber_exec_anyio import Backend
from kuber_exec_anyio._drivers import collect_execute
from kuber_exec_core import (
    NEED_DATA,
    SESSION_ENDED,
    Error,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecResult,
    ExecSession,
    ExecStreams,
    ExecuteRun,
    Exit,
    Resize,
    ResolvedTarget,
    ServerFrame,
    Stderr,
    Stdin,
    Stdout,
    Subprotocol,
)
from support import collect_frames as collect
from support import eventually

from .cri_exchange import binary, exchange
from .cri_runtime import CriRuntime
from .runtime_backend import (
    CONTAINER,
    DEPLOYMENT,
    DEPLOYMENT_UID,
    NAMESPACE,
    POD,
    POD_UID,
    RuntimeBackend,
    request,
)

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
#: The large-output command prints this many numbered copies of a random 1 MiB block: 50 MiB+.
BLOCKS = 50
LARGE_CAP = 64 * MIB
BLOCK_PATH = "/tmp/kuber-exec-random-block"
LARGE_SCRIPT = (
    f'i=0; while [ $i -lt {BLOCKS} ]; do printf "block %02d\\n" $i; cat {BLOCK_PATH}; '
    "i=$((i+1)); done"
)
#: ``printf`` format (busybox octal escapes) for every byte value 0..255, in order.
ALL_BYTES_FORMAT = "".join(f"\\{value:03o}" for value in range(256))
RUNTIME_TARGET = ResolvedTarget(
    namespace=NAMESPACE,
    deployment=DEPLOYMENT,
    deployment_uid=DEPLOYMENT_UID,
    pod=POD,
    pod_uid=POD_UID,
    container=CONTAINER,
)


# -- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def backend(adapter: ModuleType, cri_runtime: CriRuntime) -> RuntimeBackend:
    return RuntimeBackend(cri_runtime, adapter.connect_exec)


@pytest.fixture
def service(adapter: ModuleType, backend: RuntimeBackend) -> Any:
    seam: Backend = backend  # RuntimeBackend satisfies the protocol (checked by mypy)
    return adapter.ExecService(seam, ExecLimits(max_output_cap_bytes=LARGE_CAP))


@pytest.fixture(scope="session")
def random_block(cri_runtime: CriRuntime) -> Iterator[bytes]:
    """A random 1 MiB file at ``BLOCK_PATH`` in the container; its bytes, read with a plain
    WebSocket client (not kuber-exec), for the large-output tests to compare against."""
    url = cri_runtime.exec_url(
        ["sh", "-c", f"head -c {MIB} /dev/urandom > {BLOCK_PATH} && cat {BLOCK_PATH}"]
    )
    _, messages, _ = exchange(url, ["v4.channel.k8s.io"])
    frames = binary(messages)
    assert frames[-1] == b'\x03{"metadata":{},"status":"Success"}'
    block = b"".join(frame[1:] for frame in frames if frame[0] == 1)
    assert len(block) == MIB
    yield block
    exchange(cri_runtime.exec_url(["rm", "-f", BLOCK_PATH]), ["v4.channel.k8s.io"])


def large_output_digest(block: bytes) -> tuple[int, str]:
    """Length and sha256 of ``LARGE_SCRIPT``'s output, computed block by block."""
    digest = hashlib.sha256()
    size = 0
    for index in range(BLOCKS):
        header = f"block {index:02d}\n".encode()
        digest.update(header)
        digest.update(block)
        size += len(header) + len(block)
    return size, digest.hexdigest()


async def read_until(session: Any, needle: bytes) -> bytes:
    """Read stdout frames until ``needle`` appears; return everything read."""
    seen = b""
    with anyio.fail_after(15):
        async for frame in session:
            assert isinstance(frame, Stdout), frame
            seen += frame.data
            if needle in seen:
                return seen
    raise AssertionError(f"the session ended before {needle!r}: {seen!r}")


async def read_until_match(session: Any, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
    """Read stdout frames until ``pattern`` matches what was read; return the match.

    A timeout fails with what was read, so a failure says what the shell printed."""
    seen = b""
    with anyio.move_on_after(15) as waited:
        async for frame in session:
            assert isinstance(frame, Stdout), frame
            seen += frame.data
            if found := pattern.search(seen):
                return found
    ended = "15 s passed" if waited.cancelled_caught else "the session ended"
    raise AssertionError(f"{ended} before {pattern.pattern!r}: {seen!r}")


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def processes_with_argv(argv: list[str]) -> list[int]:
    """Host pids whose command line is exactly ``argv`` (the container's pid namespace is a
    child of ours, so its processes are visible here)."""
    wanted = [part.encode() for part in argv]
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.split(b"\0")[:-1] == wanted:
            pids.append(int(entry.name))
    return pids


def pipe_writers(pipe: str) -> list[tuple[int, int]]:
    """(pid, fd) of every open file description writing to ``pipe`` (``pipe:[inode]``)."""
    writers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) != pipe:
                    continue
                flags = (entry / "fdinfo" / fd.name).read_text().split("flags:")[1].split()[0]
                if int(flags, 8) & os.O_ACCMODE != os.O_RDONLY:
                    writers.append((int(entry.name), int(fd.name)))
        except OSError:
            continue  # the process or the fd went away while we looked
    return writers


@pytest.fixture
def remote_sleeps() -> Iterator[Callable[[], list[str]]]:
    """Make ``sleep`` argvs with unique durations; kill whatever of them is left at the end."""
    made: list[list[str]] = []

    def make() -> list[str]:
        argv = ["sleep", str(random.randrange(10**8, 10**9))]
        made.append(argv)
        return argv

    yield make
    for argv in made:
        for pid in processes_with_argv(argv):
            os.kill(pid, 9)


# -- execute ---------------------------------------------------------------------------------


async def test_stdout_and_stderr_are_separate(service: Any, backend: RuntimeBackend) -> None:
    result = await service.execute(request("sh", "-c", "printf out; printf err >&2; printf more"))
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"outmore", b"err")
    assert result.target == RUNTIME_TARGET
    (call,) = backend.calls
    # The user's argv, after kuber-exec's supervising prologue (docs/cleanup.md).
    assert call.command[0] == "/bin/sh"
    assert call.command[4:] == ("sh", "-c", "printf out; printf err >&2; printf more")
    assert call.streams == ExecStreams(stdin=False, stdout=True, stderr=True, tty=False)
    assert call.offered == (Subprotocol.V5, Subprotocol.V4)  # the runtime picks v4


async def test_every_byte_value_survives(service: Any) -> None:
    script = f"printf '{ALL_BYTES_FORMAT}'; printf '{ALL_BYTES_FORMAT}' >&2; printf '\\377\\000'"
    result = await service.execute(request("sh", "-c", script))
    assert result.stdout == bytes(range(256)) + b"\xff\x00"
    assert result.stderr == bytes(range(256))
    assert result.exit_code == 0


async def test_random_binary_output_matches_the_containers_digest(service: Any) -> None:
    # tee sends the random bytes to stderr and to sha256sum, whose digest comes on stdout.
    script = "head -c 300000 /dev/urandom | tee /dev/stderr | sha256sum"
    result = await service.execute(request("sh", "-c", script))
    assert len(result.stderr) == 300000
    assert result.stdout.split()[0].decode() == hashlib.sha256(result.stderr).hexdigest()


@pytest.mark.parametrize("code", [3, 255])
async def test_exit_code_comes_from_the_exit_code_cause(service: Any, code: int) -> None:
    result = await service.execute(request("sh", "-c", f"echo bye; exit {code}"))
    assert (result.exit_code, result.reason) == (code, "NonZeroExitCode")
    assert result.message.endswith(f"exit code {code}")  # containerd's wording, not parsed
    assert result.stdout == b"bye\n"
    assert not result.ok


async def test_missing_executable_is_exec_failed_with_the_runtime_message(service: Any) -> None:
    with pytest.raises(ExecError) as caught:
        await service.execute(request("kuber-no-such-command"))
    assert caught.value.code is ExecErrorCode.FAILED
    message = caught.value.message
    assert message.startswith("Internal error occurred: error executing command in container")
    assert '"kuber-no-such-command": executable file not found in $PATH' in message


async def test_missing_executable_ends_an_interactive_session_with_one_error(
    service: Any,
) -> None:
    async with service.open_interactive(request("kuber-no-such-command"), tty=False) as session:
        frames = await collect(session)
    assert len(frames) == 1
    assert isinstance(frames[0], Error)
    assert frames[0].code is ExecErrorCode.FAILED
    assert "executable file not found" in frames[0].message


async def test_large_output_through_execute(service: Any, random_block: bytes) -> None:
    size, digest = large_output_digest(random_block)
    assert size >= 50 * MIB
    result = await service.execute(request("sh", "-c", LARGE_SCRIPT), stdout_cap=LARGE_CAP)
    assert result.exit_code == 0
    assert len(result.stdout) == size
    assert hashlib.sha256(result.stdout).hexdigest() == digest
    assert result.stderr == b""


async def test_large_output_through_an_interactive_session(
    service: Any, random_block: bytes
) -> None:
    size, digest = large_output_digest(random_block)
    received = hashlib.sha256()
    count = 0
    ends: list[ServerFrame] = []
    async with service.open_interactive(request("sh", "-c", LARGE_SCRIPT), tty=False) as session:
        with anyio.fail_after(60):
            async for frame in session:
                if isinstance(frame, Stdout):
                    received.update(frame.data)
                    count += len(frame.data)
                else:
                    ends.append(frame)
    assert count == size
    assert received.hexdigest() == digest
    assert ends == [Exit(0)]


async def test_execute_with_stdin_needs_v5_and_never_starts_the_command(
    service: Any, backend: RuntimeBackend
) -> None:
    marker = f"/tmp/kuber-exec-stdin-{secrets.token_hex(8)}"
    with pytest.raises(ExecError) as caught:
        await service.execute(request("touch", marker), stdin=b"x")
    assert caught.value.code is ExecErrorCode.INVALID
    assert "v5.channel.k8s.io" in caught.value.message
    assert "cannot signal end of input" in caught.value.message
    assert backend.calls[0].offered == (Subprotocol.V5,)
    assert backend.calls[0].streams.stdin
    # containerd refused the upgrade (403, empty body): the process was never started.
    check = await service.execute(request("sh", "-c", f"test -e {marker}; echo $?"))
    assert check.stdout == b"1\n"


# -- interactive -----------------------------------------------------------------------------


async def test_v4_session_refuses_stdin_eof_clearly_and_stays_usable(service: Any) -> None:
    argv = ["sh", "-c", f"cat; : {secrets.token_hex(8)}"]  # a unique command line to look for
    async with service.open_interactive(request(*argv), tty=False) as session:
        assert session.protocol is Subprotocol.V4
        await session.send(Stdin(b"ping\n"))
        assert await read_until(session, b"ping\n") == b"ping\n"
        with pytest.raises(ExecError) as caught:
            await session.send(Stdin(b"", eof=True))
        assert caught.value.code is ExecErrorCode.INVALID
        assert "v5.channel.k8s.io" in caught.value.message
        assert "v4.channel.k8s.io" in caught.value.message
        # Nothing was sent: stdin is still open and the process still echoes.
        await session.send(Stdin(b"pong\n"))
        assert await read_until(session, b"pong\n") == b"pong\n"
        assert len(processes_with_argv(argv)) == 1
    # v4's only way to end the input: closing the connection. containerd then closes the
    # process's stdin, cat reads EOF, and the shell exits.
    await eventually(lambda: not processes_with_argv(argv), "the remote cat to exit")


#: How often and how many times until_terminal_size asks the terminal its size (10 s).
POLL_INTERVAL = 0.02
POLL_ATTEMPTS = 500


async def until_terminal_size(session: Any, rows: int, columns: int) -> None:
    """Ask the shell for its terminal size until it reports ``rows`` x ``columns``.

    The streaming server applies a resize (channel 4) in its own goroutine, unordered with
    the stdin (channel 0) sent after it, so a ``stty size`` right behind a Resize may still
    see the old size. Each try waits for the shell's answer; the retries are bounded.

    The answer is found by a pattern that only the command's output can match, never the
    typed line's echo: an interactive shell redraws its line on SIGWINCH, so the echo may
    come in pieces (CI saw a probe wait for an echo that never arrived whole)."""
    answers: list[bytes] = []
    for attempt in range(POLL_ATTEMPTS):
        await session.send(Stdin(b"printf 'size-%%s:%%s.' %d \"$(stty size)\"\n" % attempt))
        pattern = re.compile(rb"size-%d:(\d+ \d+)\." % attempt)
        answers.append((await read_until_match(session, pattern)).group(1))
        if answers[-1] == f"{rows} {columns}".encode():
            return
        await anyio.sleep(POLL_INTERVAL)
    raise AssertionError(f"the terminal never became {rows}x{columns}: {answers[-3:]!r}")


async def test_tty_follows_resize(service: Any, backend: RuntimeBackend) -> None:
    async with service.open_interactive(request("sh")) as session:
        assert session.protocol is Subprotocol.V4
        await session.send(Resize(80, 24))
        await until_terminal_size(session, 24, 80)
        await session.send(Resize(123, 45))
        await until_terminal_size(session, 45, 123)
        await session.send(Stdin(b"exit 5\n"))
        frames = await collect(session)
    assert not any(isinstance(frame, Stderr) for frame in frames)
    assert frames[-1] == Exit(5, "NonZeroExitCode", frames[-1].message)  # type: ignore[attr-defined]
    assert backend.calls[0].streams == ExecStreams(stdin=True, stdout=True, stderr=False, tty=True)


# -- wire level: connect_exec with the core ----------------------------------------------------


async def test_only_stdin_gets_the_initial_empty_status_frame(
    adapter: ModuleType, cri_runtime: CriRuntime
) -> None:
    url = cri_runtime.exec_url(
        ["sh", "-c", 'read line; exit "${#line}"'], stdin=True, stdout=False, stderr=False
    )
    async with adapter.connect_exec(url, [Subprotocol.V4]) as connection:
        assert connection.subprotocol is Subprotocol.V4
        session = ExecSession(Subprotocol.V4, stdin=True)
        with anyio.fail_after(10):
            first = await connection.receive_message()
        assert first == b"\x03"  # the no-op on the lowest requested channel: status
        session.receive_message(first)
        assert session.next_event() is NEED_DATA  # not a status, not a frame
        for message in session.send(Stdin(b"seven!!\n")):
            await connection.send_message(message)
        events: list[ServerFrame] = []
        with anyio.fail_after(10):
            while (event := session.next_event()) is not SESSION_ENDED:
                if event is not NEED_DATA:
                    assert isinstance(event, ServerFrame)
                    events.append(event)
                elif (message := await connection.receive_message()) is None:
                    session.connection_closed(clean=connection.closed_cleanly)
                else:
                    session.receive_message(message)
    assert len(events) == 1, events
    assert isinstance(events[0], Exit)
    assert (events[0].exit_code, events[0].reason) == (7, "NonZeroExitCode")


@pytest.mark.parametrize(
    "protocol", [Subprotocol.V4_BASE64, Subprotocol.BASE64, Subprotocol.LEGACY]
)
async def test_older_subprotocols_carry_output_intact(
    adapter: ModuleType, cri_runtime: CriRuntime, protocol: Subprotocol
) -> None:
    script = f"printf '{ALL_BYTES_FORMAT}'; printf 'é€\\n' >&2"
    result = await run_with(adapter, cri_runtime.exec_url(["sh", "-c", script]), protocol)
    assert result.stdout == bytes(range(256))
    assert result.stderr == "é€\n".encode()
    assert (result.exit_code, result.reason) == (0, None)


@pytest.mark.parametrize(
    "protocol", [Subprotocol.V4_BASE64, Subprotocol.BASE64, Subprotocol.LEGACY]
)
async def test_older_subprotocols_exit_status(
    adapter: ModuleType, cri_runtime: CriRuntime, protocol: Subprotocol
) -> None:
    url = cri_runtime.exec_url(["sh", "-c", "printf out; exit 3"])
    if protocol.has_structured_status:
        result = await run_with(adapter, url, protocol)
        assert (result.exit_code, result.reason, result.stdout) == (3, "NonZeroExitCode", b"out")
        return
    # Pre-v4: plain text on failure, no exit code to report.
    with pytest.raises(ExecError) as caught:
        await run_with(adapter, url, protocol)
    assert caught.value.code is ExecErrorCode.FAILED
    assert caught.value.message.startswith("command terminated with non-zero exit code")
    assert caught.value.message.endswith("exit code 3")


@pytest.mark.parametrize(
    "protocol", [Subprotocol.V4_BASE64, Subprotocol.BASE64, Subprotocol.LEGACY]
)
async def test_older_subprotocols_missing_executable(
    adapter: ModuleType, cri_runtime: CriRuntime, protocol: Subprotocol
) -> None:
    with pytest.raises(ExecError) as caught:
        await run_with(adapter, cri_runtime.exec_url(["kuber-no-such-command"]), protocol)
    assert caught.value.code is ExecErrorCode.FAILED
    assert caught.value.message.startswith("Internal error occurred: error executing command")
    assert "executable file not found" in caught.value.message


async def run_with(adapter: ModuleType, url: str, protocol: Subprotocol) -> ExecResult:
    async with adapter.connect_exec(url, [protocol]) as connection:
        assert connection.subprotocol is protocol
        run = ExecuteRun(RUNTIME_TARGET, protocol, stdout_cap=MIB, stderr_cap=MIB)
        with anyio.fail_after(30):
            result: ExecResult = await collect_execute(run, connection)
    return result


# -- client cancel ---------------------------------------------------------------------------


@pytest.mark.parametrize("tty", [False, True], ids=["pipes", "tty"])
async def test_cancel_closes_promptly_and_leaves_the_remote_process(
    service: Any,
    cri_runtime: CriRuntime,
    remote_sleeps: Callable[[], list[str]],
    tty: bool,
) -> None:
    argv = remote_sleeps()
    log = cri_runtime.layout.containerd_log
    fds_before = open_fds()
    with anyio.CancelScope() as scope:
        # cleanup=False: what the runtime itself does with a client that leaves.
        async with service.open_interactive(request(*argv), tty=tty, cleanup=False) as session:
            await eventually(lambda: len(processes_with_argv(argv)) == 1, "the remote sleep")
            (pid,) = processes_with_argv(argv)
            stdin = os.readlink(f"/proc/{pid}/fd/0")
            closed_before = log.read_text().count("stdin closed")
            scope.cancel()
            cancelled_at = anyio.current_time()
            async for frame in session:
                pytest.fail(f"a frame after the cancel: {frame!r}")
    closing = anyio.current_time() - cancelled_at
    assert scope.cancelled_caught
    assert closing < 2.0, f"the client took {closing:.2f} s to close"
    await eventually(lambda: open_fds() <= fds_before, "the client's sockets to be closed")
    # The runtime: containerd notices the client close (it logs the exec's stdin as closed)...
    await eventually(
        lambda: log.read_text().count("stdin closed") > closed_before, "containerd's stdin close"
    )
    if not tty:
        # ...and closes the process's stdin pipe (the shim drops its write end)...
        assert stdin.startswith("pipe:[")
        await eventually(lambda: not pipe_writers(stdin), "the remote stdin to be closed")
    # ...but does not signal or kill the process: it keeps running after the client is gone.
    assert processes_with_argv(argv) == [pid]


@pytest.mark.parametrize("tty", [False, True], ids=["pipes", "tty"])
async def test_the_cleanup_ends_what_a_cancelled_session_left_in_the_container(
    service: Any, remote_sleeps: Callable[[], list[str]], tty: bool
) -> None:
    # As the test above, with kuber-exec's cleanup on (the default): the process tree is gone
    # when the cancelled block has been left (docs/cleanup.md).
    argv = remote_sleeps()
    script = f"{' '.join(argv)} & {' '.join(argv)}"
    with anyio.CancelScope() as scope:
        async with service.open_interactive(request("sh", "-c", script), tty=tty):
            await eventually(lambda: len(processes_with_argv(argv)) == 2, "the remote sleeps")
            scope.cancel()
            cancelled_at = anyio.current_time()
    assert scope.cancelled_caught
    assert anyio.current_time() - cancelled_at < 5.0
    assert processes_with_argv(argv) == []


async def test_the_cleanup_ends_a_timed_out_execute_in_the_container(
    service: Any, remote_sleeps: Callable[[], list[str]]
) -> None:
    argv = remote_sleeps()
    with anyio.move_on_after(1.0) as scope:
        await service.execute(request(*argv))
    assert scope.cancelled_caught
    assert processes_with_argv(argv) == []
