"""``_terminal`` in this process, on a pty of its own: raw mode, sizes, window changes."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios
from collections.abc import Iterator

import pytest
import trio

from kuber_exec_cli._terminal import raw_terminal, terminal_size, watch_window_size

from .clirun import skip_or_fail


@pytest.fixture
def pty_pair() -> Iterator[tuple[int, int]]:
    try:
        master, slave = os.openpty()
    except OSError as error:
        skip_or_fail(f"no pseudo-terminal available: {error}")
    try:
        yield master, slave
    finally:
        os.close(master)
        os.close(slave)


def set_size(fd: int, columns: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def test_raw_mode_is_undone_after_an_exception(pty_pair: tuple[int, int]) -> None:
    _, slave = pty_pair
    before = termios.tcgetattr(slave)
    seen_in_the_block: list[list[object]] = []

    def fail_in_raw_mode() -> None:
        with raw_terminal(slave):
            seen_in_the_block.append(termios.tcgetattr(slave))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_in_raw_mode()
    lflag = seen_in_the_block[0][3]
    assert isinstance(lflag, int)
    assert not lflag & (termios.ECHO | termios.ICANON | termios.ISIG)
    assert termios.tcgetattr(slave) == before


def test_raw_mode_needs_a_terminal() -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(termios.error):
            raw_terminal(read_end).__enter__()
    finally:
        os.close(read_end)
        os.close(write_end)


def test_terminal_size(pty_pair: tuple[int, int]) -> None:
    master, slave = pty_pair
    set_size(master, 0, 0)
    assert terminal_size(slave) is None  # an unsized pty: nothing a Resize could carry
    set_size(master, 132, 43)
    assert terminal_size(slave) == (132, 43)
    read_end, write_end = os.pipe()
    try:
        assert terminal_size(read_end) is None
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.trio
async def test_window_changes_are_reported(pty_pair: tuple[int, int]) -> None:
    master, slave = pty_pair
    set_size(master, 80, 24)
    sizes_in, sizes_out = trio.open_memory_channel[tuple[int, int]](10)

    async def on_size(columns: int, rows: int) -> None:
        await sizes_in.send((columns, rows))

    async with trio.open_nursery() as nursery:
        await nursery.start(watch_window_size, slave, on_size)
        # started() came after the initial size was handed over.
        assert sizes_out.receive_nowait() == (80, 24)
        set_size(master, 100, 30)
        os.kill(os.getpid(), signal.SIGWINCH)
        assert await sizes_out.receive() == (100, 30)
        # A signal without a change (or a change to an unknown size) sends nothing.
        os.kill(os.getpid(), signal.SIGWINCH)
        set_size(master, 0, 0)
        os.kill(os.getpid(), signal.SIGWINCH)
        set_size(master, 90, 20)
        os.kill(os.getpid(), signal.SIGWINCH)
        assert await sizes_out.receive() == (90, 20)
        nursery.cancel_scope.cancel()
