"""Recording interactive sessions (``open_interactive(recording=…)``) on the sandbox, both adapters.

What a recording holds is checked with asciinema itself: ``asciinema cat`` (from PyPI) must
print exactly the bytes the session's output frames carried. A recording that fails (a full
disk: ``/dev/full``, and a real full tmpfs when this runs as root) ends nothing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    Exit,
    Resize,
    Stdin,
    Stdout,
)
from support import backend_for
from support import collect_frames as collect
from support import demo_request as run
from support import output_of as output

pytestmark = pytest.mark.anyio


def events(path: Path) -> tuple[dict[str, Any], list[list[Any]]]:
    header, *rest = (json.loads(line) for line in path.read_bytes().splitlines())
    return header, rest


async def asciinema_cat(path: Path) -> bytes:
    """``asciinema cat`` (PyPI's asciinema, not ours) on ``path``: what it prints."""
    done = await anyio.run_process(
        [sys.executable, "-m", "asciinema", "cat", str(path)],
        # No controlling terminal: asciinema would put /dev/tty in raw mode.
        start_new_session=True,
        env={**os.environ, "PYTHONUTF8": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
async def audited(adapter: Any, sandbox: Any) -> Any:
    """A service whose audit events land in ``service.events``."""
    collected: list[Any] = []
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, audit=collected.append)
        service.events = collected
        yield service


# A multi-byte text whose characters the PTY may well split across frames, and bytes that
# are not UTF-8 only where the checks say so.
_SCRIPT = (
    "read go; stty -echo; printf 'h\\303\\251llo \\342\\202\\254 '; stty size; "
    "i=0; while [ $i -lt 200 ]; do printf '\\360\\237\\230\\200%d ' $i; i=$((i+1)); done; "
    "echo; echo ready; read secret; echo got; exit 3"
)


async def test_asciinema_cat_prints_the_sessions_output_bytes_exactly(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "session.cast"
    recording = adapter.Recording(destination=path, title="t", env={"TERM": "xterm"})
    async with audited.open_interactive(run("sh", "-c", _SCRIPT), recording=recording) as session:
        # The size first (nothing is output before "go"), then the password once echo is off.
        await session.send(Resize(101, 33))
        await session.send(Stdin(b"go\n"))
        frames = []
        with anyio.fail_after(30):
            async for frame in session:
                frames.append(frame)
                if b"ready\r\n" in output(frames):
                    break
        await session.send(Stdin(b"hunter2\n"))
        frames += await collect(session)
    assert frames[-1] == Exit(3, "NonZeroExitCode", frames[-1].message)
    shown = output(frames)
    assert b"33 101" in shown
    assert b"got" in shown
    assert await asciinema_cat(path) == shown
    header, recorded = events(path)
    # The first resize, sent before any output, is the header's size.
    assert (header["width"], header["height"], header["title"]) == (101, 33, "t")
    assert header["command"].startswith("sh -c ")
    assert header["env"] == {"TERM": "xterm"}
    # Input is off by default: what was typed (a password, with echo off) is nowhere.
    assert {event[1] for event in recorded} == {"o"}
    assert b"hunter2" not in path.read_bytes()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    started, ended = audited.events
    assert started.recording == ended.recording == str(path)
    assert ended.recording_error is None
    assert ended.to_dict()["recording"] == str(path)


async def test_input_and_resizes_are_recorded_when_asked(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "input.cast"
    recording = adapter.Recording(destination=str(path), record_input=True)
    async with audited.open_interactive(run("sh"), recording=recording) as session:
        await session.send(Stdin(b"echo one\n"))
        await session.send(Resize(90, 20))
        await session.send(Stdin(b"stty size; exit\n"))
        frames = await collect(session)
    assert await asciinema_cat(path) == output(frames)
    header, recorded = events(path)
    assert (header["width"], header["height"]) == (80, 24)  # no resize before the first input
    assert [event[2] for event in recorded if event[1] == "i"] == [
        "echo one\n",
        "stty size; exit\n",
    ]
    assert [event[2] for event in recorded if event[1] == "r"] == ["90x20"]
    times = [event[0] for event in recorded]
    assert times == sorted(times)
    assert times[-1] < 30


async def test_a_session_without_a_tty_records_stdout_and_stderr(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "plain.cast"
    command = run("sh", "-c", "printf out; printf err >&2; printf more")
    recording = adapter.Recording(destination=path)
    async with audited.open_interactive(command, tty=False, recording=recording) as session:
        frames = await collect(session)
    text = "".join(event[2] for event in events(path)[1] if event[1] == "o")
    assert sorted(text) == sorted("outerrmore")
    assert (await asciinema_cat(path)).decode() == text
    assert output(frames).decode() == text


async def test_at_the_cap_a_marker_ends_the_recording_and_the_session_goes_on(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "capped.cast"
    recording = adapter.Recording(destination=path, max_bytes=4096)
    command = run("sh", "-c", "yes | head -c 200000; echo; echo done")
    async with audited.open_interactive(command, recording=recording) as session:
        frames = await collect(session)
    assert frames[-1] == Exit(0)
    assert output(frames).endswith(b"done\r\n")
    assert 4000 < path.stat().st_size <= 4096
    _, recorded = events(path)
    assert recorded[-1][1:] == ["m", "recording stopped: the size cap of 4096 bytes was reached"]
    assert audited.events[-1].recording_error is None


async def test_a_full_disk_ends_nothing(
    audited: Any, adapter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # /dev/full is a real device: every write fails with ENOSPC, as on a full disk.
    recording = adapter.Recording(destination="/dev/full")
    with caplog.at_level(logging.WARNING, logger="kuber_exec"):
        async with audited.open_interactive(run("sh"), recording=recording) as session:
            await session.send(Stdin(b"echo still here; exit 7\n"))
            frames = await collect(session)
    assert b"still here" in output(frames)
    assert frames[-1] == Exit(7, "NonZeroExitCode", frames[-1].message)  # type: ignore[attr-defined]
    ended = audited.events[-1]
    assert ended.outcome == "exit"
    assert ended.recording == "/dev/full"
    assert ended.recording_error is not None
    assert os.strerror(errno.ENOSPC) in ended.recording_error
    assert any("the recording /dev/full failed" in r.getMessage() for r in caplog.records)


@contextlib.contextmanager
def _tiny_tmpfs() -> Iterator[Path]:
    """A 64 KiB tmpfs, mounted for the test (root); skips without, fails so under CI."""
    mountpoint = Path(tempfile.mkdtemp(prefix="kuber-rec-tmpfs-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mountpoint)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        mountpoint.rmdir()
        reason = f"cannot mount a tmpfs (needs root): {mounted.stderr.decode().strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
        mountpoint.rmdir()


async def test_a_really_full_filesystem_ends_nothing(audited: Any, adapter: Any) -> None:
    with _tiny_tmpfs() as mountpoint:
        path = mountpoint / "big.cast"
        recording = adapter.Recording(destination=path)
        command = run("sh", "-c", "yes | head -c 400000; echo; echo done")
        async with audited.open_interactive(command, recording=recording) as session:
            frames = await collect(session)
        assert frames[-1] == Exit(0)
        assert output(frames).endswith(b"done\r\n")
        assert path.stat().st_size <= 64 * 1024
    error = audited.events[-1].recording_error
    assert error is not None
    assert os.strerror(errno.ENOSPC) in error


async def test_a_destination_that_cannot_be_opened_ends_nothing(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "missing" / "x.cast"
    async with audited.open_interactive(
        run("sh", "-c", "echo ok"), recording=adapter.Recording(destination=path)
    ) as session:
        frames = await collect(session)
    assert output(frames) == b"ok\r\n"
    assert "No such file or directory" in (audited.events[-1].recording_error or "")


class MemorySink:
    """An async sink keeping what it was given (a stand-in for an upload)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.data = bytearray()
        self.closed = False
        self._fail_after = fail_after

    async def write(self, data: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        if self._fail_after is not None and len(self.data) + len(data) > self._fail_after:
            raise ConnectionResetError("the upload broke")
        self.data += data

    async def aclose(self) -> None:
        self.closed = True


async def test_a_sink_gets_the_file_and_a_failing_sink_ends_nothing(
    audited: Any, adapter: Any
) -> None:
    sink = MemorySink()
    assert isinstance(sink, adapter.RecordingSink)
    command = run("sh", "-c", "echo one; echo two")
    recording = adapter.Recording(destination=sink, name="upload-1")
    async with audited.open_interactive(command, recording=recording) as session:
        frames = await collect(session)
    assert sink.closed
    lines = [json.loads(line) for line in bytes(sink.data).splitlines()]
    assert "".join(line[2] for line in lines[1:]).encode() == output(frames)
    assert audited.events[-1].recording == "upload-1"

    broken = MemorySink(fail_after=10)
    recording = adapter.Recording(destination=broken)
    async with audited.open_interactive(command, recording=recording) as session:
        frames = await collect(session)
    assert frames[-1] == Exit(0)
    assert broken.closed
    ended = audited.events[-1]
    assert ended.recording == "MemorySink"
    assert ended.recording_error == "ConnectionResetError: the upload broke"


async def test_a_bad_recording_is_refused_before_anything_starts(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    for bad, words in [
        (str(tmp_path / "x.cast"), "recording must be a Recording or None"),
        (adapter.Recording(destination=tmp_path / "y.cast", max_bytes=10), "max_bytes"),
        (
            adapter.Recording(destination=tmp_path / "w.cast", columns=0),
            "width must be between 1 and 65535",
        ),
    ]:
        with pytest.raises(ExecError) as caught:
            async with audited.open_interactive(run("sh"), recording=bad):
                pass
        assert caught.value.code is ExecErrorCode.INVALID
        assert words in caught.value.message
    assert os.listdir(tmp_path) == []  # nothing was created
    for field, value, words in [
        ("destination", 5, "a file path or a RecordingSink"),
        ("destination", "", "a file path or a RecordingSink"),
        ("record_input", "yes", "record_input must be a bool"),
    ]:
        options: dict[str, Any] = {"destination": tmp_path / "z.cast", field: value}
        with pytest.raises(ExecError) as refused:
            adapter.Recording(**options)
        assert refused.value.code is ExecErrorCode.INVALID
        assert words in refused.value.message


class GatedSink:
    """A sink whose writes wait until the test opens the gate: a disk that is stuck."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.chunks: list[bytes] = []

    async def write(self, data: bytes) -> None:
        await self.gate.wait()
        self.chunks.append(data)

    async def aclose(self) -> None:
        pass


async def test_a_stuck_destination_holds_the_reader_back_with_bounded_memory() -> None:
    from kuber_exec_anyio._audit._recording import Recording, SessionRecorder

    sink = GatedSink()
    recorder = SessionRecorder(Recording(destination=sink), "yes", tty=True)
    frame = Stdout(b"y\r\n" * 10_000)  # 30 KB of output, 50 KB of JSON
    fed = 0

    async def feed() -> None:
        nonlocal fed
        for _ in range(100):
            await recorder.received(frame)
            fed += 1

    failures: list[str] = []
    async with recorder.running(failures.append), anyio.create_task_group() as tasks:
        tasks.start_soon(feed)
        await anyio.wait_all_tasks_blocked()
        # The writer is stuck in the sink with one chunk (at most 1 MiB) and the feeder waits
        # for room with at most 1 MiB more pending: about 2 MiB held, not the 5 MB of JSON
        # that all 100 frames make.
        assert 20 < fed < 50
        assert recorder.bytes_written < 3 * 1024 * 1024
        sink.gate.set()
    assert fed == 100
    assert failures == []
    written = b"".join(sink.chunks)
    assert len(written) == recorder.bytes_written
    assert max(len(chunk) for chunk in sink.chunks) < 1024 * 1024 + 2 * 50_000
    text = "".join(json.loads(line)[2] for line in written.splitlines()[1:])
    assert text == "y\r\n" * 10_000 * 100


async def test_a_cancelled_session_still_finishes_its_recording(
    audited: Any, adapter: Any, tmp_path: Path
) -> None:
    path = tmp_path / "cancelled.cast"
    recording = adapter.Recording(destination=path)
    command = run("sh", "-c", "printf 'caf\\303'; printf '\\251 ready\\n'; exec sleep 30")
    with anyio.fail_after(30), anyio.CancelScope() as scope:
        async with audited.open_interactive(command, recording=recording) as session:
            async for frame in session:
                if isinstance(frame, Stdout) and b"ready" in frame.data:
                    scope.cancel()
    assert scope.cancelled_caught
    # Leaving under cancellation wrote what was pending and closed the file: a whole recording.
    text = "".join(event[2] for event in events(path)[1] if event[1] == "o")
    assert "café ready" in text
    assert (await asciinema_cat(path)).decode() == text
    ended = audited.events[-1]
    assert ended.outcome != "exit"
    assert (ended.recording, ended.recording_error) == (str(path), None)
