"""The commands the benchmark server "runs": argv interpreted in memory, never a process.

Each program writes whole channel messages through a :class:`ProgramIO` and ends the session
with a Status (v4/v5 JSON, as the kubelet sends it). Output is zero bytes, like ``/dev/zero``.

=====================================  ========================================================
argv                                   what the session does
=====================================  ========================================================
``bench-stdout BYTES [MESSAGE_BYTES]``  BYTES of stdout in messages of MESSAGE_BYTES (default
                                       32 KiB, the kubelet's copy buffer), then success
``head -c BYTES /dev/zero``            the same in 32 KiB messages (the sandbox's command, so
                                       one benchmark command serves both servers)
``true`` / ``false``                   success at once / exit code 1 at once
``sleep SECONDS``                      success after SECONDS (``infinity``: never); an idle
                                       session that still answers pings
``cat``                                stdin echoed to stdout; success once stdin closes (v5)
``echo WORDS...``                      the words and a newline on stdout, then success
``/bin/sh -c PROLOGUE kuber-exec-ID ...`` kuber-exec's supervised start (docs/cleanup.md): the
                                       start mark on stdout, then the command (or the
                                       missing-executable mark and exit 127)
``/bin/sh -c SCRIPT kuber-exec-cleanup`` the cleanup exec: ``none`` (nothing runs here after
                                       its session), then success; for the batch script, a
                                       ``ID none`` line per session
anything else                          ``InternalError``: executable file not found
=====================================  ========================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from fast_wire import frame

from kuber_exec_core.server import status_exit_code, status_failure, status_success
from kuber_exec_core.supervision import (
    CLEANUP_MARKER,
    SHELL,
    CleanupRequest,
    batch_cleanup_command,
)

__all__ = [
    "DEFAULT_MESSAGE_BYTES",
    "MAX_MESSAGE_BYTES",
    "Program",
    "ProgramIO",
    "start_program",
    "stdout_frames",
]

STDOUT, STDERR = 1, 2
#: The kubelet copies a process's output with Go's 32 KiB io.Copy buffer: one message per read.
DEFAULT_MESSAGE_BYTES = 32 * 1024
#: Larger messages are allowed up to what kuber-exec's clients accept (32 MiB) minus headroom.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Output is sent from one shared buffer holding this many bytes of whole frames.
_BATCH_BYTES = 1024 * 1024
_SUCCESS = status_success()
_batches: dict[int, tuple[memoryview, int]] = {}


class ProgramIO(Protocol):
    """What a program may do with its session (the server's connection implements it)."""

    @property
    def stdout(self) -> bool:
        """Whether the client asked for stdout."""

    def write(self, data: bytes) -> None:
        """Queue whole frames (encoded with :func:`fast_wire.frame`)."""

    def stream(self, chunks: Iterator[memoryview | bytes]) -> None:
        """Queue a lazily pulled sequence of whole frames (pulled as the socket drains)."""

    def finish(self, status: bytes) -> None:
        """After everything queued: the Status on channel 3, then Close 1000; nothing after."""

    def call_later(self, seconds: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``seconds`` unless the session has ended."""


class Program:
    """A running command; by default it ignores stdin."""

    def stdin(self, data: bytes) -> None:
        """Bytes the client sent on channel 0 (never empty)."""

    def stdin_closed(self) -> None:
        """The v5 client closed stdin."""


class _Cat(Program):
    def __init__(self, io: ProgramIO) -> None:
        self._io = io

    def stdin(self, data: bytes) -> None:
        if self._io.stdout:
            self._io.write(frame(bytes((STDOUT,)) + data))

    def stdin_closed(self) -> None:
        self._io.finish(_SUCCESS)


def _batch(message_bytes: int) -> tuple[memoryview, int]:
    """A buffer of whole stdout frames of ``message_bytes`` zero bytes each, and its frame count."""
    cached = _batches.get(message_bytes)
    if cached is None:
        one = frame(bytes((STDOUT,)) + bytes(message_bytes))
        count = max(1, _BATCH_BYTES // len(one))
        cached = _batches[message_bytes] = (memoryview(one * count), count)
    return cached


def stdout_frames(total: int, message_bytes: int = DEFAULT_MESSAGE_BYTES) -> Iterator[memoryview]:
    """``total`` zero bytes of stdout as frames of ``message_bytes`` (the last one shorter), in
    slices of one shared buffer: nothing is copied per session."""
    batch, count = _batch(message_bytes)
    frame_bytes = len(batch) // count
    full, rest = divmod(total, message_bytes)
    while full >= count:
        yield batch
        full -= count
    if full:
        yield batch[: full * frame_bytes]
    if rest:
        yield memoryview(frame(bytes((STDOUT,)) + bytes(rest)))


def _count(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _usage(io: ProgramIO, message: str) -> Program:
    io.write(frame(bytes((STDERR,)) + message.encode() + b"\n"))
    io.finish(status_exit_code(2))
    return Program()


def _bench_stdout(io: ProgramIO, total: int, message_bytes: int) -> Program:
    if io.stdout:
        io.stream(stdout_frames(total, message_bytes))
    io.finish(_SUCCESS)
    return Program()


def _sleep(io: ProgramIO, argument: str) -> Program:
    try:
        seconds = float(argument)
    except ValueError:
        return _usage(io, f"sleep: invalid time interval {argument!r}")
    if not seconds >= 0:
        return _usage(io, f"sleep: invalid time interval {argument!r}")
    if not math.isinf(seconds):
        io.call_later(seconds, lambda: io.finish(_SUCCESS))
    return Program()


_KNOWN = frozenset({"bench-stdout", "head", "true", "false", "sleep", "cat", "echo"})
_CLEANUP_TAG = "kuber-exec-cleanup"
# The batch cleanup's script (the same text for every batch): its sessions are its 16-character
# arguments (the others are its grace and class tokens).
_BATCH_CLEANUP = batch_cleanup_command([CleanupRequest("0" * 16)], grace=0)[2]


def start_program(argv: Sequence[str], io: ProgramIO) -> Program:
    """Start ``argv`` on ``io``; the returned program receives the session's stdin."""
    match list(argv):
        case [shell, "-c", script, tag, *arguments] if shell == SHELL and tag == _CLEANUP_TAG:
            if io.stdout:
                if script == _BATCH_CLEANUP:
                    ids = [argument for argument in arguments if len(argument) == 16]
                    verdicts = "".join(f"{session} none\n" for session in ids).encode()
                else:
                    verdicts = b"none\n"
                io.write(frame(bytes((STDOUT,)) + verdicts))
            io.finish(_SUCCESS)
            return Program()
        case [shell, "-c", _script, tag, *command] if shell == SHELL and tag.startswith(
            CLEANUP_MARKER
        ):
            found = bool(command) and command[0] in _KNOWN
            mark = b"K" + tag.removeprefix(CLEANUP_MARKER).encode() + (b"." if found else b"!")
            if io.stdout:
                io.write(frame(bytes((STDOUT,)) + mark))
            if not found:
                io.finish(status_exit_code(127))
                return Program()
            argv = command
    match list(argv):
        case ["bench-stdout", total_text]:
            argv = [*argv, str(DEFAULT_MESSAGE_BYTES)]
        case ["head", "-c", total_text, "/dev/zero"]:
            argv = ["bench-stdout", total_text, str(DEFAULT_MESSAGE_BYTES)]
    match list(argv):
        case ["bench-stdout", total_text, size_text]:
            total, size = _count(total_text), _count(size_text)
            if total is None or size is None or not 1 <= size <= MAX_MESSAGE_BYTES:
                return _usage(
                    io,
                    f"bench-stdout: BYTES and MESSAGE_BYTES (1 to {MAX_MESSAGE_BYTES}) are counts",
                )
            return _bench_stdout(io, total, size)
        case ["true"]:
            io.finish(_SUCCESS)
        case ["false"]:
            io.finish(status_exit_code(1))
        case ["sleep", seconds]:
            return _sleep(io, seconds)
        case ["cat"]:
            return _Cat(io)
        case ["echo", *words]:
            if io.stdout:
                io.write(frame(bytes((STDOUT,)) + " ".join(words).encode() + b"\n"))
            io.finish(_SUCCESS)
        case [name, *_]:
            io.finish(
                status_failure(
                    "error executing command in container: failed to exec in container: "
                    f'exec: "{name}": executable file not found in $PATH'
                )
            )
        case []:
            io.finish(status_failure("error executing command in container: no command given"))
    return Program()
