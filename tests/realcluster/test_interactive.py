"""Interactive sessions on the real path: a TTY whose size follows Resize, and cancellation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from .kube import processes_with, shell_request

pytestmark = pytest.mark.anyio


def shell(adapter: ModuleType, *command: str) -> Any:
    return shell_request(adapter, list(command))


async def read_until(session: Any, adapter: ModuleType, needle: bytes, seen: bytearray) -> None:
    with anyio.fail_after(30):
        async for frame in session:
            if isinstance(frame, adapter.Stdout | adapter.Stderr):
                seen += frame.data
                if needle in seen:
                    return
            else:
                pytest.fail(f"session ended before {needle!r}: {frame!r}; output {bytes(seen)!r}")
    pytest.fail(f"session ended before {needle!r}; output {bytes(seen)!r}")


async def test_tty_session_with_resize_visible_to_stty_size(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    async with admin_service.open_interactive(
        shell(adapter, "sh"), tty=True, stdin=True
    ) as session:
        seen = bytearray()
        await session.send(adapter.Resize(columns=123, rows=45))
        await session.send(adapter.Stdin(b"stty size; echo kx-mark-$((40+2))\n"))
        await read_until(session, adapter, b"kx-mark-42", seen)
        assert b"45 123" in seen
        await session.send(adapter.Resize(columns=80, rows=24))
        await session.send(adapter.Stdin(b"stty size; echo kx-mark-$((40+3))\n"))
        await read_until(session, adapter, b"kx-mark-43", seen)
        assert b"24 80" in seen.split(b"kx-mark-42", 1)[1]
        await session.send(adapter.Stdin(b"tty; exit 7\n"))
        frames = []
        with anyio.fail_after(30):
            async for frame in session:
                frames.append(frame)
        assert isinstance(frames[-1], adapter.Exit), frames[-1]
        assert frames[-1].exit_code == 7
        tail = b"".join(f.data for f in frames if isinstance(f, adapter.Stdout))
        assert b"/dev/pts/" in tail


# The real server (kubelet 1.20 proxying to containerd 1.6) keeps the process after a client
# close: it runs on, or blocks writing to a pipe or pty nobody reads; no signal reaches it (no
# signal channel). kuber-exec's cleanup (docs/cleanup.md) ends it before the call returns.


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique word for the command line of the process under test; any process still carrying
    it at the end (left behind in a pod) is killed by PID."""
    word = f"kx-cancel-{uuid.uuid4().hex[:12]}"
    yield word
    for pid in processes_with(word):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def wait_gone(word: str, within: float = 15) -> list[int]:
    """The processes still carrying ``word`` after at most ``within`` seconds (polling /proc)."""
    deadline = time.monotonic() + within
    while processes_with(word) and time.monotonic() < deadline:  # noqa: ASYNC110  (/proc polling)
        await anyio.sleep(0.2)
    return processes_with(word)


async def stream_then_cancel(
    adapter: ModuleType, service: Any, word: str, *, tty: bool, ctrl_c: bool
) -> int:
    """Run ``yes WORD`` interactively, cancel after 1 MB (Ctrl-C first if asked)."""
    received = 0
    with anyio.move_on_after(30) as scope:
        async with service.open_interactive(shell(adapter, "yes", word), tty=tty) as session:
            async for frame in session:
                if isinstance(frame, adapter.Stdout):
                    received += len(frame.data)
                    if received > 1_000_000:
                        assert processes_with(word), "the process should be running now"
                        if ctrl_c:
                            await session.send(adapter.Stdin(b"\x03"))
                            # The terminal's SIGINT ends `yes`: wait until it has, then cancel.
                            assert await wait_gone(word) == []
                        scope.cancel()
    assert scope.cancelled_caught
    return received


async def test_ctrl_c_then_cancel_mid_stream_leaves_no_process_behind(
    adapter: ModuleType, workloads: Any, admin_service: Any, marker: str
) -> None:
    assert await stream_then_cancel(adapter, admin_service, marker, tty=True, ctrl_c=True) > 10**6
    assert await wait_gone(marker) == []


@pytest.mark.parametrize("tty", [True, False], ids=["tty", "pipes"])
async def test_cancelling_mid_stream_leaves_no_process_behind(
    adapter: ModuleType, workloads: Any, admin_service: Any, marker: str, tty: bool
) -> None:
    assert await stream_then_cancel(adapter, admin_service, marker, tty=tty, ctrl_c=False) > 10**6
    assert processes_with(marker) == []  # ended before the cancelled block was left


@pytest.fixture
def sleep_seconds() -> Iterator[str]:
    """A unique ``sleep`` argument (busybox sleep takes a fraction): every process of a tree
    started with it carries it; any left at the end is killed by PID."""
    word = f"1000.{uuid.uuid4().int % 10**9:09d}"
    yield word
    for pid in processes_with(word):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_cleanup_off_leaves_the_process_as_the_server_does(
    adapter: ModuleType, workloads: Any, admin_service: Any, sleep_seconds: str
) -> None:
    # The behaviour the cleanup exists for, still there with cleanup=False.
    with anyio.move_on_after(3) as scope:
        await admin_service.execute(shell(adapter, "sleep", sleep_seconds), cleanup=False)
    assert scope.cancelled_caught
    assert processes_with(sleep_seconds)


async def test_a_process_tree_that_ignores_term_is_killed(
    adapter: ModuleType, workloads: Any, admin_service: Any, sleep_seconds: str
) -> None:
    # `trap '' TERM` is inherited: both sleeps ignore TERM, so the cleanup's KILL ends them.
    script = f"trap '' TERM; sleep {sleep_seconds} & sleep {sleep_seconds}"
    with anyio.move_on_after(3) as scope:
        await admin_service.execute(shell(adapter, "sh", "-c", script))
    assert scope.cancelled_caught
    assert processes_with(sleep_seconds) == []


async def test_cancelling_an_execute_mid_stream_leaves_no_process_behind(
    adapter: ModuleType, workloads: Any, admin_service: Any, marker: str
) -> None:
    # A slow writer (a shell loop whose script carries the marker), cancelled while it runs.
    script = f"while :; do echo {marker}; sleep 0.05; done"
    with anyio.move_on_after(3) as scope:
        await admin_service.execute(shell(adapter, "sh", "-c", script))
    assert scope.cancelled_caught
    assert processes_with(marker) == []


async def test_a_tty_session_is_recorded_as_asciicast(
    adapter: ModuleType, workloads: Any, admin_service: Any, tmp_path: Path
) -> None:
    path = tmp_path / "session.cast"
    recording = adapter.Recording(destination=path, title="realcluster")
    output = bytearray()
    async with admin_service.open_interactive(
        shell(adapter, "sh"), tty=True, recording=recording
    ) as session:
        await session.send(adapter.Resize(columns=100, rows=30))
        await session.send(adapter.Stdin(b"echo kx-rec-$((6*7)); exit 0\n"))
        with anyio.fail_after(30):
            async for frame in session:
                if isinstance(frame, adapter.Stdout):
                    output += frame.data
    header, *events = (json.loads(line) for line in path.read_text().splitlines())
    assert (header["version"], header["title"]) == (2, "realcluster")
    recorded = "".join(data for _, kind, data in events if kind == "o")
    assert recorded.encode() == bytes(output)
    assert "kx-rec-42" in recorded
    # The resize: in the header when it came before any output, else as an "r" event.
    resizes = [data for _, kind, data in events if kind == "r"]
    assert resizes == ["100x30"] or (header["width"], header["height"], resizes) == (100, 30, [])
