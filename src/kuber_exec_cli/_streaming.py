"""One interactive session wired to this process's stdin, stdout and stderr.

Contract of :func:`stream_session`: output is written as it arrives, bytes untouched, flushed per
frame; the output caps are applied here with ``ExecService.execute``'s semantics and error (the
bytes up to a stream's cap are written, the first byte over it ends the run with
``EXEC_OUTPUT_LIMIT``); local stdin is pumped to the session when asked; with a TTY the remote
terminal follows the local one's size, and the local terminal is in raw mode while typing into
it. It returns the remote exit code and raises ``ExecError`` for everything else (possibly in
an exception group of one, as task groups raise).

Why an interactive session even without ``-i``/``-t``: ``execute`` captures the output and
returns it at the end; a command line must show output as it arrives (a build log, a ``tail
-f``). Memory stays bounded by the session's frame queue whatever the caps, so they default to
no cap.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, BinaryIO

import anyio
import attrs

from kuber_exec_asyncio import (
    Error,
    ExecError,
    ExecErrorCode,
    ExecOutputLimitError,
    ExecRequest,
    ExecService,
    Exit,
    InteractiveSession,
    Resize,
    Stderr,
    Stdin,
    Stdout,
)
from kuber_exec_core import StreamName

if TYPE_CHECKING:
    from kuber_exec_asyncio import Recording

from ._local import LocalStreams
from ._terminal import raw_terminal, terminal_size, watch_window_size

__all__ = ["LocalStreams", "stream_session"]


async def stream_session(
    service: ExecService,
    request: ExecRequest,
    streams: LocalStreams,
    *,
    stdin: bool,
    tty: bool,
    stdout_cap: int | None = None,
    stderr_cap: int | None = None,
    on_open: Callable[[InteractiveSession], None] | None = None,
    recording: Recording | None = None,
    opened: AbstractAsyncContextManager[InteractiveSession] | None = None,
) -> int:
    """Run ``request`` as an interactive session wired to ``streams``; return its exit code.

    Output is written as it arrives (flushed per frame), bytes untouched. With ``stdin``, local
    stdin is forwarded and closed at its end (v5 only: on an older subprotocol this fails before
    forwarding anything, since the command could never see the end of its input). Without
    ``stdin``, no stdin stream is requested (with a TTY one is, as kubectl does, and left open:
    closing a terminal's input hangs it up). With ``tty``: the initial window size right after
    connecting, a ``Resize`` on every SIGWINCH, and with ``stdin`` the local terminal in raw
    mode, restored however this returns. With ``recording``, the session is recorded
    (``open_interactive(recording=...)``). ``opened`` replaces ``open_interactive``
    with a session opened otherwise (an attach; ``request`` and ``recording`` are then unused).

    Raises:
        ExecError: any code ``open_interactive`` raises; ``EXEC_OUTPUT_LIMIT`` past a cap;
            the session's ``Error`` frame; ``EXEC_FAILED`` for an exit code outside 0-255.
    """
    # Without -i the command gets no stdin stream at all (end of input at once, on every
    # subprotocol); with a TTY stdin stays requested, as kubectl does: some runtimes lose a
    # TTY's output when it has no stdin.
    size_fd = _size_fd(streams, stdin=stdin) if tty else None
    if recording is not None and size_fd is not None and (size := terminal_size(size_fd)):
        # The header's size is known before the session opens: the first Resize is sent only
        # after connecting, and output that comes before it would fix the header at 80x24.
        recording = attrs.evolve(recording, columns=size[0], rows=size[1])
    if opened is None:
        opened = service.open_interactive(request, tty=tty, stdin=stdin or tty, recording=recording)
    async with opened as session:
        if on_open is not None:
            on_open(session)
        if stdin and not tty and not session.protocol.can_close_stdin:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"-i needs the v5.channel.k8s.io subprotocol (Kubernetes 1.30+) to close the "
                f"command's stdin at the end of input, and this server negotiated "
                f"{session.protocol.value}, which cannot (the command had started and was "
                f"disconnected); use -it for an interactive shell, or run it without -i",
            )
        raw: AbstractContextManager[None] = (
            raw_terminal(streams.stdin_fd) if tty and stdin else nullcontext()
        )
        stdout = _Sink(streams.stdout, "stdout", stdout_cap)
        stderr = _Sink(streams.stderr, "stderr", stderr_cap)
        # A task's error leaves the task group in an exception group; not unwrapped here, since
        # supervision reports by the one error inside a group, wherever the group came from.
        with raw:
            async with anyio.create_task_group() as tasks:
                if size_fd is not None:

                    async def resize(columns: int, rows: int) -> None:
                        await _send(session, Resize(columns=columns, rows=rows))

                    # started() comes after the initial size is sent: it precedes any stdin.
                    await tasks.start(watch_window_size, size_fd, resize)
                if stdin:
                    tasks.start_soon(_forward_stdin, session, streams.stdin_fd)
                exit_code = await _write_output(session, stdout, stderr)
                tasks.cancel_scope.cancel()
    return exit_code


def _size_fd(streams: LocalStreams, *, stdin: bool) -> int | None:
    # The terminal whose size the remote one follows: the one typed into with -it, else
    # whichever of stdout/stdin is a terminal (-t alone, output to the screen).
    candidates = [streams.stdin_fd] if stdin else [streams.stdout.fileno(), streams.stdin_fd]
    for fd in candidates:
        if os.isatty(fd):
            return fd
    return None


class _Sink:
    """One local output stream, with an optional cap in the manner of ``execute``."""

    def __init__(self, stream: BinaryIO, name: StreamName, cap: int | None) -> None:
        self._stream = stream
        self._name: StreamName = name
        self._cap = cap
        self._written = 0

    def write(self, data: bytes) -> None:
        if self._cap is not None and self._written + len(data) > self._cap:
            self._emit(data[: self._cap - self._written])
            raise ExecOutputLimitError(self._name, self._cap)
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        if data:
            # Blocking writes on purpose: a slow reader of our stdout slows the session down
            # (the session's bounded queue fills and the socket stops being read).
            self._stream.write(data)
            self._stream.flush()
            self._written += len(data)


async def _write_output(session: InteractiveSession, stdout: _Sink, stderr: _Sink) -> int:
    async for frame in session:
        if isinstance(frame, Stdout):
            stdout.write(frame.data)
        elif isinstance(frame, Stderr):
            stderr.write(frame.data)
        elif isinstance(frame, Exit):
            if not 0 <= frame.exit_code <= 255:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"the remote command ended with {frame.exit_code}, which is not a process "
                    "exit status (0-255)",
                )
            return frame.exit_code
        elif isinstance(frame, Error):
            raise frame.to_exception()
    # Iteration ends without a terminal frame only after a client close, which we never send
    # while reading.
    raise ExecError(ExecErrorCode.ABORTED, "the session ended without an exit status")


async def _send(session: InteractiveSession, frame: Stdin | Resize) -> bool:
    """Send ``frame``; ``False`` when the session has ended or broken (the reader reports how)."""
    try:
        await session.send(frame)
    except ExecError as error:
        if error.code in (ExecErrorCode.ABORTED, ExecErrorCode.FAILED):
            return False
        raise
    return True


async def _forward_stdin(session: InteractiveSession, fd: int) -> None:
    # Imported with -i only: its thread machinery (anyio.from_thread) is a few ms of every start.
    from ._stdin import StdinReader

    reader = StdinReader(fd)
    while True:
        for data in await reader.read():
            if not data:
                if session.protocol.can_close_stdin:
                    await _send(session, Stdin(b"", eof=True))
                return
            if not await _send(session, Stdin(data)):
                return
