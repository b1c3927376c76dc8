"""Audit events and session limits: who ran what where, for how long, and how many at once.

``ExecService(backend, audit=hook, session_limits=SessionLimits(...))``. The hook is a plain
callable, called synchronously on the event loop's thread with one :class:`AuditEvent` when an
exec or interactive session starts (its target resolved) and once when it ends, however it ends.
It must not block: :class:`JsonLinesAuditLog` is such a hook, which hands events to a bounded
queue drained by its own thread. An exception from a hook is logged (logger ``kuber_exec``) and
never reaches the exec.

:class:`SessionLimits` caps the exec sessions open at once per workspace (over the cap: an
``ExecError`` with ``EXEC_ABORTED`` before anything is sent to the cluster) and, for interactive
sessions, the time without traffic and the total time (the session then ends with an ``Error``
frame, code ``EXEC_ABORTED``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import attrs

from kuber_exec_core import Error, ExecError, ExecErrorCode, ExecRequest, ResolvedTarget, Workspace

if TYPE_CHECKING:
    from ._session import InteractiveSession

__all__ = [
    "AuditEvent",
    "AuditHook",
    "AuditRecord",
    "JsonLinesAuditLog",
    "SessionLimits",
    "WorkspaceSlots",
    "enforce_session_limits",
]

logger = logging.getLogger("kuber_exec")

AuditKind = Literal["execute", "interactive"]
AuditPhase = Literal["started", "ended"]
AuditOutcome = Literal["exit", "error", "closed"]


@attrs.frozen(kw_only=True)
class AuditEvent:
    """One audit row: an exec or interactive session started, or ended.

    Every session gets one ``started`` event once its target is resolved and one ``ended``
    event, with the same ``session_id``; an attempt refused before its target was resolved (an
    invalid request, another workspace's Deployment, the concurrency limit) gets only the
    ``ended`` event, with the error.

    Attributes:
        kind: ``"execute"`` or ``"interactive"``.
        phase: ``"started"`` or ``"ended"``.
        session_id: a random id shared by the two events of one session.
        workspace: the requesting workspace.
        deployment: the Deployment asked for.
        pod: the pod it resolved to (``None`` if it did not resolve).
        container: the resolved container (the requested one, or ``None``, if it did not).
        command: the argv.
        tty: whether a TTY was requested.
        started_at: when the call was made (wall clock, UTC).
        duration_seconds: on ``ended``, the time since the call (monotonic clock).
        outcome: on ``ended``: ``"exit"`` (the process exited, ``exit_code``), ``"error"``
            (``error_code`` and ``error_message``) or ``"closed"`` (the client left an
            interactive session before the process ended).
        exit_code, error_code, error_message: see ``outcome``.
        bytes_in: stdin bytes sent to the process.
        bytes_out: stdout and stderr bytes received from it.
    """

    kind: AuditKind
    phase: AuditPhase
    session_id: str
    workspace: Workspace
    deployment: str
    pod: str | None
    container: str | None
    command: tuple[str, ...]
    tty: bool
    started_at: datetime.datetime
    duration_seconds: float | None = None
    outcome: AuditOutcome | None = None
    exit_code: int | None = None
    error_code: ExecErrorCode | None = None
    error_message: str | None = None
    bytes_in: int = 0
    bytes_out: int = 0

    def to_dict(self) -> dict[str, object]:
        """The event as JSON-ready values (the schema of :class:`JsonLinesAuditLog`'s lines)."""
        return {
            "kind": self.kind,
            "phase": self.phase,
            "session_id": self.session_id,
            "workspace": {"project": self.workspace.project, "uid": self.workspace.uid},
            "deployment": self.deployment,
            "pod": self.pod,
            "container": self.container,
            "command": list(self.command),
            "tty": self.tty,
            "started_at": self.started_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "duration_seconds": (
                None if self.duration_seconds is None else round(self.duration_seconds, 6)
            ),
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "error_code": None if self.error_code is None else self.error_code.value,
            "error_message": self.error_message,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        }


#: An audit hook: called on the event loop's thread; must not block; exceptions are logged.
AuditHook = Callable[[AuditEvent], None]


def _optional_positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ExecError(
            ExecErrorCode.INVALID, f"{attribute.name} must be a positive number or None"
        )
    if attribute.name == "max_sessions_per_workspace" and not isinstance(value, int):
        raise ExecError(ExecErrorCode.INVALID, f"{attribute.name} must be a positive integer")


@attrs.frozen(kw_only=True)
class SessionLimits:
    """Optional limits on exec sessions; ``None`` (the default) means no limit.

    Attributes:
        max_sessions_per_workspace: execs (``execute`` calls and interactive sessions) open at
            once per workspace; one more is refused with ``ExecError(EXEC_ABORTED, ...)`` before
            anything is sent to the cluster.
        idle_timeout: seconds an interactive session may go without a ``Stdin`` or ``Resize``
            frame sent and without output received; then it ends with an ``Error`` frame
            (``EXEC_ABORTED``).
        max_duration: seconds an interactive session may stay open in all; then it ends the
            same way.

    Raises:
        ExecError: ``EXEC_INVALID`` for a value that is not positive.
    """

    max_sessions_per_workspace: int | None = attrs.field(default=None, validator=_optional_positive)
    idle_timeout: float | None = attrs.field(default=None, validator=_optional_positive)
    max_duration: float | None = attrs.field(default=None, validator=_optional_positive)


class WorkspaceSlots:
    """Counts the execs open per workspace and refuses one over ``limit`` (``None``: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._open: dict[Workspace, int] = {}

    def open_for(self, workspace: Workspace) -> int:
        """How many execs ``workspace`` has open."""
        return self._open.get(workspace, 0)

    @contextlib.contextmanager
    def hold(self, workspace: Workspace) -> Iterator[None]:
        """Hold one slot for the block.

        Raises:
            ExecError: ``EXEC_ABORTED`` when the workspace already holds ``limit`` slots.
        """
        if self.limit is None or not isinstance(workspace, Workspace):
            yield  # No limit, or an invalid request that validation refuses next.
            return
        # No await between the check and the count: atomic on one event loop.
        count = self._open.get(workspace, 0)
        if count >= self.limit:
            raise ExecError(
                ExecErrorCode.ABORTED,
                f"workspace {workspace.project} already has {count} exec sessions open "
                f"(the limit is {self.limit}); close one and try again",
            )
        self._open[workspace] = count + 1
        try:
            yield
        finally:
            remaining = self._open[workspace] - 1
            if remaining:
                self._open[workspace] = remaining
            else:
                del self._open[workspace]


def _command(request: ExecRequest) -> tuple[str, ...]:
    command = request.command
    if isinstance(command, tuple | list):
        return tuple(str(argument) for argument in command)
    return (str(command),)


class AuditRecord:
    """The audit trail of one call: builds and emits its ``started`` and ``ended`` events."""

    def __init__(
        self, hook: AuditHook | None, kind: AuditKind, request: ExecRequest, *, tty: bool
    ) -> None:
        self._hook = hook
        self._kind: AuditKind = kind
        self._request = request
        self._tty = tty
        self._session_id = uuid.uuid4().hex
        self._started_at = datetime.datetime.now(datetime.UTC)
        self._started_monotonic = time.monotonic()
        self._target: ResolvedTarget | None = None
        self.ended = False

    def started(self, target: ResolvedTarget) -> None:
        """The target resolved: emit ``started``."""
        self._target = target
        self._emit("started")

    def retargeted(self, target: ResolvedTarget) -> None:
        """The exec is retried on ``target`` before its command started (the first pod was
        gone): the ``ended`` event names it. No event of its own."""
        self._target = target

    def exited(self, exit_code: int, *, bytes_in: int, bytes_out: int) -> None:
        """Emit ``ended`` with ``outcome="exit"``."""
        self._end("exit", exit_code=exit_code, bytes_in=bytes_in, bytes_out=bytes_out)

    def failed(
        self, code: ExecErrorCode, message: str, *, bytes_in: int = 0, bytes_out: int = 0
    ) -> None:
        """Emit ``ended`` with ``outcome="error"``."""
        self._end(
            "error",
            error_code=code,
            error_message=message,
            bytes_in=bytes_in,
            bytes_out=bytes_out,
        )

    def closed(self, *, bytes_in: int, bytes_out: int) -> None:
        """Emit ``ended`` with ``outcome="closed"`` (the client left first)."""
        self._end("closed", bytes_in=bytes_in, bytes_out=bytes_out)

    def interrupted(self, error: BaseException) -> None:
        """Emit ``ended`` for an exception, unless an ``ended`` event already went out."""
        if self.ended:
            return
        if isinstance(error, ExecError):
            self.failed(error.code, error.message)
        elif isinstance(error, Exception):
            self.failed(ExecErrorCode.FAILED, f"{type(error).__name__}: {error}")
        else:  # Cancellation, KeyboardInterrupt, GeneratorExit.
            self.failed(ExecErrorCode.ABORTED, "cancelled")

    def _end(self, outcome: AuditOutcome, **fields: object) -> None:
        if self.ended:
            return
        self.ended = True
        self._emit("ended", outcome=outcome, **fields)

    def _emit(self, phase: AuditPhase, **fields: object) -> None:
        if self._hook is None:
            return
        try:
            event = self._event(phase, fields)
            self._hook(event)
        except Exception:
            logger.exception("the audit hook failed on a %s event (the exec goes on)", phase)

    def _event(self, phase: AuditPhase, fields: Mapping[str, object]) -> AuditEvent:
        request = self._request
        target = self._target
        duration = time.monotonic() - self._started_monotonic if phase == "ended" else None
        return AuditEvent(
            kind=self._kind,
            phase=phase,
            session_id=self._session_id,
            workspace=request.workspace,
            deployment=request.deployment,
            pod=None if target is None else target.pod,
            container=request.container if target is None else target.container,
            command=_command(request),
            tty=self._tty,
            started_at=self._started_at,
            duration_seconds=duration,
            **fields,  # type: ignore[arg-type]
        )


@contextlib.contextmanager
def audited(record: AuditRecord) -> Iterator[AuditRecord]:
    """Emit ``record``'s ``ended`` event for an exception leaving the block, and re-raise it."""
    try:
        yield record
    except BaseException as error:
        record.interrupted(error)
        raise


def _seconds(value: float) -> str:
    return f"{value:g} s"


async def enforce_session_limits(session: InteractiveSession, limits: SessionLimits) -> None:
    """Until ``session`` ends: end it with an ``Error`` frame when idle or open for too long.

    Sleeps until the nearest deadline, re-reading the session's last activity each time; runs in
    the service's task group, which cancels it when the session's block is left.
    """
    opened = anyio.current_time()
    while not session._finished:
        now = anyio.current_time()
        deadline = float("inf")
        if limits.max_duration is not None:
            if now >= opened + limits.max_duration:
                session._end_with(
                    Error(
                        ExecErrorCode.ABORTED,
                        "the session reached its maximum duration of "
                        f"{_seconds(limits.max_duration)} and was closed",
                    )
                )
                return
            deadline = opened + limits.max_duration
        if limits.idle_timeout is not None:
            idle_until = session._last_activity + limits.idle_timeout
            if now >= idle_until:
                session._end_with(
                    Error(
                        ExecErrorCode.ABORTED,
                        f"the session was idle for {_seconds(limits.idle_timeout)} "
                        "(no input and no output) and was closed",
                    )
                )
                return
            deadline = min(deadline, idle_until)
        if deadline == float("inf"):
            return
        await anyio.sleep_until(deadline)


class JsonLinesAuditLog:
    """An audit hook that appends each event to ``path`` as one JSON object per line.

    Calling it never blocks the event loop: the event goes into an in-memory queue of at most
    ``max_pending`` events, which a daemon thread writes out (flushing whenever the queue runs
    empty). When the queue is full (the disk is slower than the sessions), the event is dropped,
    counted in :attr:`dropped` and a warning is logged. The file is created with mode 0600 and
    appended to. Use it as a context manager, or call :meth:`close`, to write what is pending.
    Each line is :meth:`AuditEvent.to_dict`.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_pending: int = 10_000) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending <= 0:
            raise ExecError(ExecErrorCode.INVALID, "max_pending must be a positive integer")
        self.path = Path(path)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(descriptor, "a", encoding="utf-8")
        self._queue: queue.Queue[AuditEvent | None] = queue.Queue(max_pending)
        self._closed = False
        #: Events dropped because the queue was full (or the log closed).
        self.dropped = 0
        self._thread = threading.Thread(target=self._write_loop, name="kuber-exec-audit")
        self._thread.daemon = True
        self._thread.start()

    def __repr__(self) -> str:
        return f"JsonLinesAuditLog({str(self.path)!r}, pending={self._queue.qsize()})"

    def __call__(self, event: AuditEvent) -> None:
        """Queue ``event`` for writing; never blocks."""
        if self._closed:
            self._drop("the audit log is closed")
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._drop("the audit log's queue is full (the disk is behind)")

    def _drop(self, why: str) -> None:
        self.dropped += 1
        # 1, 2, 4, 8, ...: a flood of drops does not become a flood of warnings.
        if self.dropped & (self.dropped - 1) == 0:
            logger.warning(
                "audit event dropped: %s; %d dropped so far (%s)", why, self.dropped, self.path
            )

    def flush(self) -> None:
        """Block until every queued event is written and flushed (call it off the event loop)."""
        self._queue.join()

    def close(self) -> None:
        """Write what is queued, stop the thread and close the file; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self._file.close()

    def __enter__(self) -> JsonLinesAuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_loop(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                self._write(event)
            except Exception:
                logger.exception("could not write an audit event to %s", self.path)
            finally:
                self._queue.task_done()

    def _write(self, event: AuditEvent) -> None:
        self._file.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
        if self._queue.empty():
            self._file.flush()
