"""The local terminal, for ``kuber-exec exec -t``: raw mode, its size, and window changes.

Raw mode hands every keystroke (Ctrl-C, Ctrl-D, arrows) to the remote terminal, which does its
own echo and line editing. The saved settings are put back when the ``raw_terminal`` block is
left for any reason: a normal return, an exception, or a cancellation (the command line
turns SIGINT, SIGTERM and SIGHUP into a cancellation, so they restore it too). Only SIGKILL
leaves a raw terminal behind; ``stty sane`` repairs it.
"""

from __future__ import annotations

import os
import signal
import termios
import tty
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio

__all__ = ["raw_terminal", "terminal_size", "watch_window_size"]

#: (columns, rows), as ``Resize`` takes them.
TerminalSize = tuple[int, int]


@contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """Put the terminal on ``fd`` in raw mode for the block, then restore its settings.

    Raises:
        termios.error: ``fd`` is not a terminal (nothing was changed).
    """
    saved = termios.tcgetattr(fd)
    # TCSANOW, not setraw's default TCSAFLUSH: keys typed ahead while connecting still count.
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        # TCSANOW again: TCSADRAIN would wait for pending output, forever if the terminal is
        # stopped (Ctrl-S), and this must never hang on the way out.
        termios.tcsetattr(fd, termios.TCSANOW, saved)


def terminal_size(fd: int) -> TerminalSize | None:
    """The size of the terminal on ``fd`` as (columns, rows), or ``None`` when unknown.

    A pseudo-terminal nobody has sized reports 0 x 0; a ``Resize`` must be 1..65535, so that
    counts as unknown too.
    """
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    if not (1 <= size.columns <= 65_535 and 1 <= size.lines <= 65_535):
        return None
    return (size.columns, size.lines)


async def watch_window_size(
    fd: int,
    on_size: Callable[[int, int], Awaitable[None]],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_size(columns, rows)`` now, then after every SIGWINCH that changed it; forever.

    Use with ``TaskGroup.start``: it reports started once the initial size has been handed to
    ``on_size``, so that the caller can send anything else (keystrokes) after it. The signal
    receiver is opened before the first size is read, so a change in between is not lost;
    repeated signals are coalesced (only the latest size matters). A size that is unknown
    (0 x 0) is skipped. Must run in the main thread (signal handling).
    """
    with anyio.open_signal_receiver(signal.SIGWINCH) as window_changes:
        last = terminal_size(fd)
        if last is not None:
            await on_size(*last)
        task_status.started()
        async for _ in window_changes:
            size = terminal_size(fd)
            if size is not None and size != last:
                await on_size(*size)
                last = size
