"""Recording an interactive session as asciicast v2 while it runs (``open_interactive``).

:class:`Recording` says what to record and where (a file, or an async :class:`RecordingSink`);
:class:`SessionRecorder` records one session: the session hands it each output frame it reads
and each client frame it sends, the core's :class:`~kuber_exec_core.asciicast.AsciicastWriter`
turns them into lines, and a writer task appends the lines to the destination as they come
(off the event loop for a file, in batches of up to 256 KiB or 100 ms). Times come from the
monotonic clock, counted from the moment the session opened.

A recorder that fails ends nothing: the destination cannot be opened, a write fails (a full
disk), the sink raises: the error is logged (logger ``kuber_exec.recording``), recording stops, the
session goes on, and the session's ``ended`` audit event names the error
(``recording_error``). Memory stays bounded: when more than ``_MAX_PENDING_BYTES`` wait
besides the chunk being written, the session's reader waits for the destination (as for a slow
consumer).
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import time
import types
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Protocol, runtime_checkable

import anyio
import attrs

from kuber_exec_core import (
    ClientFrame,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    Resize,
    Stderr,
    Stdin,
    Stdout,
    StreamName,
)
from kuber_exec_core.asciicast import DEFAULT_MAX_RECORDING_BYTES, AsciicastHeader, AsciicastWriter

__all__ = ["Recording", "RecordingSink", "SessionRecorder", "prepare_recorder", "recorded"]

# A child of ``kuber_exec``: an app that reports failures from the audit event (the CLI) can
# silence this one logger.
logger = logging.getLogger("kuber_exec.recording")

# The writer task takes what is pending in one piece; past this much not yet written, the
# session's reader waits for the destination (bounded memory, whatever the output rate).
_MAX_PENDING_BYTES = 1024 * 1024
# Writes are batched: the writer takes what is pending once 256 KiB are, or 100 ms after the
# first byte of a batch (a thread hop per 3 KiB TTY frame costs more than the encoding; with
# 64 KiB batches the recorder still doubled the client's CPU time under `yes`).
_FLUSH_BYTES = 256 * 1024
_FLUSH_DELAY = 0.1
# How long the end of a session waits for the recording's last bytes and close.
_CLOSE_TIMEOUT = 10.0


@runtime_checkable
class RecordingSink(Protocol):
    """Where a recording goes when it is not a file: e.g. an object store's upload, a queue.

    ``write`` is awaited with the next bytes of the file, in order (whole lines; the first
    holds the header); ``aclose`` once at the end, also after a failure. An exception from
    either stops the recording (see :class:`Recording`); waiting in ``write`` slows the
    session down once ``1 MiB`` is pending.
    """

    async def write(self, data: bytes) -> None:
        """Append ``data`` to the recording."""

    async def aclose(self) -> None:
        """The recording is over."""


def _destination(
    instance: object,
    attribute: attrs.Attribute[str | os.PathLike[str] | RecordingSink],
    value: object,
) -> None:
    if isinstance(value, RecordingSink):
        return
    if isinstance(value, str | os.PathLike) and os.fspath(value):
        return
    raise ExecError(
        ExecErrorCode.INVALID, "a recording's destination must be a file path or a RecordingSink"
    )


def _flag(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise ExecError(ExecErrorCode.INVALID, f"{attribute.name} must be a bool")


def _env(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class Recording:
    """Record an interactive session as asciicast v2: ``open_interactive(…, recording=…)``.

    Output (stdout, and stderr without a TTY) and resizes are always recorded; input only
    with ``record_input`` (off by default: what is typed may be a password, and a TTY echoes
    what should be seen). The file never exceeds ``max_bytes``: at the cap a marker event is
    written and recording stops while the session goes on. A file is created with mode 0600
    (replaced if it exists) when the session opens.

    Raises ``ExecError(EXEC_INVALID)`` for a destination that is neither a path nor a
    :class:`RecordingSink`, a ``record_input`` that is not a ``bool``, or (from
    ``open_interactive``, before anything is contacted) a ``max_bytes`` too small for the
    header (:class:`~kuber_exec_core.asciicast.AsciicastWriter`).

    Attributes:
        destination: a file path, or a :class:`RecordingSink`.
        record_input: record what is sent to the process's stdin too (``"i"`` events).
        max_bytes: the size cap of the file (default 64 MiB).
        title: the header's ``title``.
        env: the header's ``env`` (e.g. ``{"TERM": "xterm-256color"}``, the terminal the output
            was written for).
        name: how the audit events name the recording (default: the path, or the sink's
            class name).
        columns, rows: the terminal's size for the header when the caller knows it before the
            session opens (a browser's window); a ``Resize`` sent before any output still
            sets it. Default 80x24.
    """

    destination: str | os.PathLike[str] | RecordingSink = attrs.field(validator=_destination)
    record_input: bool = attrs.field(default=False, validator=_flag)
    max_bytes: int = DEFAULT_MAX_RECORDING_BYTES
    title: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_env, eq=False, hash=False)
    name: str | None = None
    columns: int = 80
    rows: int = 24

    @property
    def label(self) -> str:
        """The recording's name in audit events and logs."""
        if self.name is not None:
            return self.name
        if isinstance(self.destination, RecordingSink):
            return type(self.destination).__name__
        return os.fspath(self.destination)


def prepare_recorder(
    recording: Recording | None, request: ExecRequest, *, tty: bool
) -> SessionRecorder | None:
    """Check ``recording`` for ``request`` before anything is contacted; ``None``: none asked.

    Raises:
        ExecError: ``EXEC_INVALID`` for something that is not a :class:`Recording`, or a header
            that does not fit under its cap.
    """
    if recording is None:
        return None
    if not isinstance(recording, Recording):
        raise ExecError(ExecErrorCode.INVALID, "recording must be a Recording or None")
    recorder = SessionRecorder(recording, _command(request), tty=tty)
    recorder.writer()  # The header's and the cap's checks, now rather than when it opens.
    return recorder


def _command(request: ExecRequest) -> str:
    command = request.command
    argv = [command] if isinstance(command, str) else [str(part) for part in command]
    return shlex.join(argv)


class SessionRecorder:
    """The recording of one session: frames in (from the session), bytes out (a task).

    Built by :func:`prepare_recorder`, run by :func:`recorded` for the session's life. The
    session calls :meth:`received` for each output frame and :meth:`sent` for each client
    frame it accepted.
    """

    def __init__(self, recording: Recording, command: str, *, tty: bool) -> None:
        self.recording = recording
        self._command = command
        self._tty = tty
        self._writer: AsciicastWriter | None = None
        self._opened_at = 0.0
        self._pending = bytearray()
        self._data = anyio.Event()
        self._full = anyio.Event()
        self._room = anyio.Event()
        self._write_lock = anyio.Lock()
        self._fd: int | None = None
        self._sink: RecordingSink | None = None
        #: Why the recording failed (``None`` while it works): logged, and in the audit event.
        self.error: str | None = None
        self._on_failure: Callable[[str], None] | None = None

    def __repr__(self) -> str:
        return f"<SessionRecorder {self.recording.label!r}>"

    @property
    def name(self) -> str:
        """The recording's name (:attr:`Recording.label`)."""
        return self.recording.label

    @property
    def bytes_written(self) -> int:
        """The recording's size so far, as encoded (what reached the destination, or will)."""
        return 0 if self._writer is None else self._writer.bytes_written

    @property
    def capped(self) -> bool:
        """Whether the recording stopped at its size cap."""
        return self._writer is not None and self._writer.capped

    def writer(self) -> AsciicastWriter:
        """A new core writer for this recording (its header as of now)."""
        return AsciicastWriter(
            AsciicastHeader(
                width=self.recording.columns,
                height=self.recording.rows,
                timestamp=int(time.time()),
                command=self._command,
                title=self.recording.title,
                env=self.recording.env,
            ),
            max_bytes=self.recording.max_bytes,
        )

    def _now(self) -> float:
        return time.monotonic() - self._opened_at

    async def received(self, frame: Stdout | Stderr) -> None:
        """An output frame the session read: recorded; waits while the destination is far
        behind."""
        writer = self._writer
        if writer is None or self.error is not None:
            return
        stream: StreamName = "stderr" if isinstance(frame, Stderr) else "stdout"
        self._append(writer.output(self._now(), frame.data, stream=stream))
        while len(self._pending) > _MAX_PENDING_BYTES and self.error is None:
            self._room = anyio.Event()
            await self._room.wait()

    def sent(self, frame: ClientFrame) -> None:
        """A client frame the session accepted: a resize (with a TTY), and stdin when asked.

        Never waits: the send path keeps its order (input is what a client typed)."""
        writer = self._writer
        if writer is None or self.error is not None:
            return
        if isinstance(frame, Resize) and self._tty:
            self._append(writer.resize(self._now(), frame.columns, frame.rows))
        elif isinstance(frame, Stdin) and self.recording.record_input and frame.data:
            self._append(writer.input(self._now(), bytes(frame.data)))

    def _append(self, data: bytes) -> None:
        if data:
            if not self._pending:
                self._data.set()
            self._pending += data
            if len(self._pending) >= _FLUSH_BYTES:
                self._full.set()
            if self._writer is not None and self._writer.capped:
                logger.info(
                    "the recording %s reached its size cap of %d bytes: the session goes on "
                    "unrecorded",
                    self.name,
                    self._writer.max_bytes,
                )

    def _fail(self, error: BaseException) -> None:
        if self.error is not None:
            return
        self.error = (
            f"{type(error).__name__}: {error}"
            if not isinstance(error, ExecError)
            else error.message
        )
        self._pending.clear()
        self._room.set()
        logger.warning("the recording %s failed (the session goes on): %s", self.name, self.error)
        if self._on_failure is not None:
            self._on_failure(self.error)

    async def _open(self) -> None:
        destination = self.recording.destination
        if isinstance(destination, RecordingSink):
            self._sink = destination
            return
        path = os.fspath(destination)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self._fd = await anyio.to_thread.run_sync(os.open, path, flags, 0o600)

    async def _write(self, data: bytes) -> None:
        if self._sink is not None:
            await self._sink.write(data)
        elif self._fd is not None:
            await anyio.to_thread.run_sync(_write_all, self._fd, data)

    async def _flush(self) -> None:
        # Under the write lock: one write at a time, in order.
        while self._pending and self.error is None:
            chunk = bytes(self._pending)
            self._pending.clear()
            self._room.set()
            try:
                await self._write(chunk)
            except Exception as error:
                self._fail(error)

    async def _write_loop(self) -> None:
        while True:
            await self._data.wait()
            self._data = anyio.Event()
            if len(self._pending) < _FLUSH_BYTES:
                with anyio.move_on_after(_FLUSH_DELAY):
                    await self._full.wait()
            self._full = anyio.Event()
            async with self._write_lock:
                await self._flush()

    async def _close_destination(self) -> None:
        try:
            if self._sink is not None:
                await self._sink.aclose()
            elif self._fd is not None:
                fd, self._fd = self._fd, None
                await anyio.to_thread.run_sync(os.close, fd)
        except Exception as error:
            self._fail(error)

    async def _finish(self) -> None:
        writer = self._writer
        if writer is not None and self.error is None:
            self._append(writer.close(self._now()))
        async with self._write_lock:
            await self._flush()
        await self._close_destination()

    @asynccontextmanager
    async def running(self, on_failure: Callable[[str], None]) -> AsyncIterator[None]:
        """Record for the block: opens the destination, runs the writer task, and on leaving
        writes the last bytes and closes the destination, within ``_CLOSE_TIMEOUT`` and even
        when the block is cancelled. A failure is handed to ``on_failure`` (the audit record)
        and logged, never raised."""
        self._on_failure = on_failure
        self._writer = self.writer()
        self._opened_at = time.monotonic()
        async with anyio.create_task_group() as tasks:
            try:
                try:
                    await self._open()
                except Exception as error:
                    self._fail(error)
                else:
                    tasks.start_soon(self._write_loop)
                yield
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT) as bound:
                    await self._finish()
                if bound.cancelled_caught:
                    self._fail(TimeoutError("the recording's last bytes were not written in time"))
                tasks.cancel_scope.cancel()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - a regular file or device never returns 0
            raise OSError(errno.EIO, "the recording's file took no bytes")
        view = view[written:]


@asynccontextmanager
async def recorded(
    recorder: SessionRecorder | None, on_failure: Callable[[str], None]
) -> AsyncIterator[None]:
    """:meth:`SessionRecorder.running` for the block, or nothing when ``recorder`` is
    ``None``."""
    if recorder is None:
        yield
        return
    async with recorder.running(on_failure):
        yield
