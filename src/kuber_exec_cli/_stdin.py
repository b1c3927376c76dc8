"""Local stdin, read for ``-i`` in batches, without ever blocking the event loop or the exit.

Contract of :class:`StdinReader`: each :meth:`~StdinReader.read` returns the next chunks of
``fd`` in order, ending with ``b""`` at the end of input (an unreadable or hung-up stdin is an
end too), and reads nothing ahead of what was asked for (bytes taken from a shared terminal or
pipe and then dropped would be lost to whoever reads it next). A regular file (``< FILE``) is
read in place, as ``cp`` reads its files: it never waits for a writer. A pipe or terminal is
read in a daemon thread, each trip taking what is ready (a pipe's writer is usually ahead), up
to a batch: not through the event loop's own reader, which would set ``O_NONBLOCK`` on a file
description the shell and other processes share, and not in anyio's worker threads, which are
joined as the interpreter exits: a read blocked on a quiet terminal would hold up the exit
after the remote command ended. A read that is cancelled leaves its thread blocked; what it
reads later is dropped, as when the process exits.
"""

from __future__ import annotations

import os
import queue
import select
import stat
import threading
from collections.abc import Callable

import anyio
import anyio.lowlevel
from anyio.from_thread import run_sync as run_on_loop

__all__ = ["StdinReader"]

# Local reads of stdin: two client-go sized messages each (docs/protocol.md), the service's
# default max_stdin_frame_bytes. Each read from a pipe or terminal is a trip to the reading
# thread, and at 32 KiB those trips made `exec -i < 100MB` half as fast as kubectl's.
_STDIN_CHUNK_BYTES = 64 * 1024
_STDIN_CHUNKS_PER_TRIP = 8

_Deliver = Callable[[list[bytes]], None]


class StdinReader:
    """Batches of ``fd``'s bytes on request (see the module)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._regular = _is_regular_file(fd)
        self._requests: queue.SimpleQueue[tuple[_Deliver, anyio.lowlevel.EventLoopToken]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    async def read(self) -> list[bytes]:
        """The next chunks, in order; the last one of the input is ``b""``."""
        if self._regular:
            return [_read_chunk(self._fd)]
        read: list[list[bytes]] = []
        done = anyio.Event()

        def deliver(chunks: list[bytes]) -> None:
            read.append(chunks)
            done.set()

        self._requests.put((deliver, anyio.lowlevel.current_token()))
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="kuber-exec stdin", daemon=True
            )
            self._thread.start()
        await done.wait()
        return read[0]

    def _serve(self) -> None:
        while True:
            deliver, token = self._requests.get()
            chunks = _read_ready(self._fd)
            try:
                run_on_loop(deliver, chunks, token=token)
            except (anyio.RunFinishedError, RuntimeError):
                # The command is over: nobody reads any more (RuntimeError: the event loop
                # closed between anyio's check and the call).
                return


def _is_regular_file(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:  # No stdin at all (EBADF): read through the thread, which says so.
        return False


def _read_chunk(fd: int) -> bytes:
    try:
        return os.read(fd, _STDIN_CHUNK_BYTES)
    except OSError:
        # EIO: the terminal hung up; EBADF: no stdin at all. Both mean no more input.
        return b""


def _read_ready(fd: int) -> list[bytes]:
    """One blocking read, then more while ``fd`` has bytes ready (at most a batch): the chunks
    read, ending with ``b""`` at the end of input."""
    chunks = [_read_chunk(fd)]
    while chunks[-1] and len(chunks) < _STDIN_CHUNKS_PER_TRIP:
        try:
            ready, _, _ = select.select([fd], [], [], 0)
        except (OSError, ValueError):
            break
        if not ready:
            break
        chunks.append(_read_chunk(fd))
    return chunks
