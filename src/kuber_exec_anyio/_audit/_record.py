"""Audit events: who ran what where, for how long, and how it ended.

``ExecService(backend, audit=hook)``. The hook is a plain callable, called synchronously on the
event loop's thread with one :class:`AuditEvent` when an exec or interactive session starts (its
target resolved) and once when it ends, however it ends. It must not block:
:class:`~kuber_exec_anyio.JsonLinesAuditLog` (``audit._log``) is such a hook, which hands events
to a bounded queue drained by its own thread. An exception from a hook is logged (logger
``kuber_exec``) and never reaches the exec. :class:`AuditRecord` builds one call's two events:
an exec's, an interactive session's, or a copy's (:meth:`AuditRecord.for_copy`).
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Literal

import attrs

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    ExecRequest,
    Impersonation,
    ResolvedTarget,
    Workspace,
)
from kuber_exec_core.supervision import CleanupOutcome

__all__ = ["AuditEvent", "AuditHook", "AuditRecord", "CopyPaths"]

logger = logging.getLogger("kuber_exec")

AuditKind = Literal["execute", "interactive", "copy", "attach", "logs", "debug"]
AuditPhase = Literal["started", "ended", "joined", "attached", "detached", "left"]
#: The phases of a shared session's viewers (:mod:`kuber_exec_anyio._shared`).
ViewerPhase = Literal["joined", "attached", "detached", "left"]
VIEWER_PHASES: frozenset[str] = frozenset(("joined", "attached", "detached", "left"))
AuditOutcome = Literal["exit", "error", "closed"]
Direction = Literal["upload", "download"]


@attrs.frozen(kw_only=True)
class AuditEvent:
    """One audit row: an exec or interactive session started, or ended.

    Every session gets one ``started`` event once its target is resolved and one ``ended``
    event, with the same ``session_id``; an attempt refused before its target was resolved (an
    invalid request, another workspace's Deployment, the concurrency limit) gets only the
    ``ended`` event, with the error.

    An attach (``kind="attach"``, command ``("attach",)``), a log read (``kind="logs"``,
    command ``("logs",)``) and a debug session (``kind="debug"``: its command is the debug
    container's, ``image`` the image it runs and ``debug_container`` its name; ``container``
    is the container it targets) get a pair each too.

    A copy (``copy_to_pod``, ``copy_from_pod``, the CLI's ``cp``, the browser terminal's drop
    and download) gets its own pair with ``kind="copy"``, besides the events of the execs it
    runs; its ``command`` is ``("copy", direction)`` and its ``direction``, ``local_path``,
    ``remote_path`` and ``sha256`` say what moved (``None`` on every other kind).

    Attributes:
        kind: ``"execute"``, ``"interactive"`` or ``"copy"``.
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
        cleanup: on ``ended``, what the cleanup did when the exec ended without its process's
            exit (:class:`~kuber_exec_core.supervision.CleanupOutcome`: ``"none"``,
            ``"terminated"``, ``"killed"``, ``"failed"``, ``"unsupervised"`` for an image
            without a shell, or ``"pending"``: not settled within the caller's bound, it went on
            in the background, and its verdict is logged, not in this event); ``None`` when no
            cleanup was called for.
        user: the user the exec acted for (``ExecRequest.on_behalf_of.user``), ``None`` when
            it ran as the service itself.
        groups: that user's impersonated groups.
        recording: the name of the session's recording (its file, see
            ``open_interactive(recording=...)``), ``None`` when it is not recorded.
        recording_error: on ``ended``, why the recording failed (the session went on), or
            ``None``.
        direction: a copy's ``"upload"`` or ``"download"``.
        local_path: a copy's local file or directory (``None`` for a stream).
        remote_path: a copy's path in the container (the final one, on ``ended``).
        sha256: on a copy's ``ended``: the sha256 (hex) of the bytes moved (the file's, or
            the tar stream's for a directory).
        sha256_verified: on a copy's ``ended``: whether the container computed the same one
            (``False`` when it has no ``sha256sum``).
        viewer, role: on a shared session's viewer events (phases ``joined``: a viewer is
            admitted for the first time; ``attached`` and ``detached``: each of its
            connections comes and goes; ``left``: it is gone for good), the viewer's public id
            and its role (``owner``, ``peer``, ``observer``); ``None`` on every other event.
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
    cleanup: CleanupOutcome | None = None
    user: str | None = None
    groups: tuple[str, ...] = ()
    recording: str | None = None
    recording_error: str | None = None
    direction: Literal["upload", "download"] | None = None
    local_path: str | None = None
    remote_path: str | None = None
    sha256: str | None = None
    sha256_verified: bool | None = None
    viewer: str | None = None
    role: str | None = None
    image: str | None = None
    debug_container: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The event as JSON-ready values (the schema of :class:`JsonLinesAuditLog`'s lines)."""
        row: dict[str, object] = {
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
            "cleanup": None if self.cleanup is None else self.cleanup.value,
            "user": self.user,
            "groups": list(self.groups),
            "recording": self.recording,
            "recording_error": self.recording_error,
        }
        if self.kind == "copy":
            row.update(
                direction=self.direction,
                local_path=self.local_path,
                remote_path=self.remote_path,
                sha256=self.sha256,
                sha256_verified=self.sha256_verified,
            )
        if self.phase in VIEWER_PHASES:
            row.update(viewer=self.viewer, role=self.role)
        if self.kind == "debug":
            row.update(image=self.image, debug_container=self.debug_container)
        return row


#: An audit hook: called on the event loop's thread; must not block; exceptions are logged.
AuditHook = Callable[[AuditEvent], None]


@attrs.define(kw_only=True)
class CopyPaths:
    """What a copy's events say it moves: its direction and paths (``remote_path`` becomes the
    final one once the destination is known)."""

    direction: Direction
    local_path: str | None
    remote_path: str


def _command(request: ExecRequest) -> tuple[str, ...]:
    command = request.command
    if isinstance(command, tuple | list):
        return tuple(str(argument) for argument in command)
    return (str(command),)


# The start of a record whose events nobody receives (see AuditRecord.__init__).
_NEVER = datetime.datetime.min.replace(tzinfo=datetime.UTC)


class AuditRecord:
    """The audit trail of one call: builds and emits its ``started`` and ``ended`` events."""

    def __init__(
        self,
        hook: AuditHook | None,
        kind: AuditKind,
        request: ExecRequest,
        *,
        tty: bool,
        recording: str | None = None,
        copy: CopyPaths | None = None,
        image: str | None = None,
    ) -> None:
        self._hook = hook
        #: A debug session's image, and its container's name once chosen.
        self.image = image
        self.debug_container: str | None = None
        self._kind: AuditKind = kind
        self._request = request
        self._tty = tty
        # Only events need these (a uuid4 and a wall-clock read are a measurable share of a
        # short exec's own work): without a hook they are never read.
        self._session_id = "" if hook is None else uuid.uuid4().hex
        self._started_at = _NEVER if hook is None else datetime.datetime.now(datetime.UTC)
        self._started_monotonic = time.monotonic()
        self._target: ResolvedTarget | None = None
        self._cleanup: CleanupOutcome | None = None
        self._recording = recording
        self._recording_error: str | None = None
        #: A copy's direction and paths (``None`` for an exec or a session).
        self.copy = copy
        self.ended = False

    @classmethod
    def for_copy(
        cls, hook: AuditHook | None, request: ExecRequest, paths: CopyPaths
    ) -> AuditRecord:
        """The record of one copy (``kind="copy"``): ``request`` names its workspace,
        Deployment, container and user, and its command, ``("copy", direction)``; the execs
        the copy runs are audited by the service as usual. Without a hook it costs no id and
        no clock read. Its ``ended`` event comes from :meth:`copied` or :meth:`interrupted`."""
        return cls(hook, "copy", request, tty=False, copy=paths)

    def started(self, target: ResolvedTarget) -> None:
        """The target resolved: emit ``started``."""
        self._target = target
        self._emit("started")

    def retargeted(self, target: ResolvedTarget) -> None:
        """The exec is retried on ``target`` before its command started (the first pod was
        gone): the ``ended`` event names it. No event of its own."""
        self._target = target

    def cleaned_up(self, outcome: CleanupOutcome) -> None:
        """The cleanup ran (or could not): the ``ended`` event carries ``outcome``."""
        self._cleanup = outcome

    def recording_failed(self, message: str) -> None:
        """The session's recording failed (the session goes on): the ``ended`` event says so."""
        self._recording_error = message

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

    def copied(self, *, size: int, sha256: str, verified: bool) -> None:
        """A copy moved ``size`` bytes whose sha256 is ``sha256`` (``verified``: the container
        computed the same): emit ``ended`` with ``outcome="exit"`` and exit code 0."""
        self._end("exit", exit_code=0, **self._moved(size), sha256=sha256, sha256_verified=verified)

    def interrupted(self, error: BaseException, *, moved: int = 0) -> None:
        """Emit ``ended`` for an exception, unless an ``ended`` event already went out;
        ``moved``: the bytes a copy had moved by then."""
        if self.ended:
            return
        if isinstance(error, ExecError):
            code, message = error.code, error.message
        elif isinstance(error, Exception):
            code, message = ExecErrorCode.FAILED, f"{type(error).__name__}: {error}"
        else:  # Cancellation, KeyboardInterrupt, GeneratorExit.
            code, message = ExecErrorCode.ABORTED, "cancelled"
        self.failed(code, message, **self._moved(moved))

    def viewer(self, phase: ViewerPhase, viewer: str, role: str) -> None:
        """Emit a shared session's viewer event (``viewer``: its public id)."""
        self._emit(phase, viewer=viewer, role=role)

    def _moved(self, size: int) -> dict[str, int]:
        # A copy's bytes: sent to the container (an upload) or received from it.
        if self.copy is None or not size:
            return {}
        return {"bytes_in": size} if self.copy.direction == "upload" else {"bytes_out": size}

    def _end(self, outcome: AuditOutcome, **fields: object) -> None:
        if self.ended:
            return
        self.ended = True
        self._emit("ended", outcome=outcome, cleanup=self._cleanup, **fields)

    def _emit(self, phase: AuditPhase, **fields: object) -> None:
        if self._hook is None:
            return
        try:
            event = self._event(phase, fields)
            self._hook(event)
        except Exception:
            what = "exec" if self.copy is None else "copy"
            logger.exception("the audit hook failed on a %s event (the %s goes on)", phase, what)

    def _event(self, phase: AuditPhase, fields: Mapping[str, object]) -> AuditEvent:
        request = self._request
        target = self._target
        duration = time.monotonic() - self._started_monotonic if phase == "ended" else None
        identity = getattr(request, "on_behalf_of", None)
        acting = identity if isinstance(identity, Impersonation) else None
        if self._kind == "debug":
            fields = {"image": self.image, "debug_container": self.debug_container, **fields}
        copy = self.copy
        if copy is not None:
            fields = {
                "direction": copy.direction,
                "local_path": copy.local_path,
                "remote_path": copy.remote_path,
                **fields,
            }
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
            user=None if acting is None else acting.user,
            groups=() if acting is None else acting.groups,
            recording=self._recording,
            recording_error=self._recording_error,
            **fields,  # type: ignore[arg-type]
        )
