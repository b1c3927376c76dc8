"""``ExecService``: run a command to completion, or open an interactive session, in a pod.

Written once on anyio, so the same code runs under trio and asyncio with their native
cancellation: cancelling a call (a trio cancel scope, ``task.cancel()``, ``asyncio.timeout``)
closes its socket and the runtime's own cancellation exception propagates. Every rule comes from
``kuber_exec_core``; this module only awaits the backend and moves bytes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from kuber_exec_core import (
    DEFAULT_SUBPROTOCOLS,
    ExecLimits,
    ExecRequest,
    ExecResult,
    ExecSession,
    ExecStreams,
    ExecuteRun,
    ResolvedTarget,
    Subprotocol,
    stdin_bytes,
)
from kuber_exec_core.limits import SessionDeadlines, SessionLimits
from kuber_exec_core.validation import (
    validate_cleanup_grace,
    validate_flag,
    validate_output_cap,
    validate_queue_capacity,
    validate_request_type,
    validate_subprotocols,
)

from ._admission import admitted, workspace_slots
from ._attempts import Attempts, ShellRegistry
from ._audit._record import AuditHook, AuditRecord
from ._backend import Backend, ExecConnection, backend_hooks
from ._cleanup import CleanupCrew, CleanupStatus
from ._drivers import await_start, collect_execute, resolve_target, send_quietly
from ._groups import single_exception
from ._kubernetes._session_slot import SessionSlot
from ._session import InteractiveSession, run_session
from ._supervise import DEFAULT_CLEANUP_GRACE, CleanupSettings, CleanupSlots

if TYPE_CHECKING:
    # Debug containers and recordings are imported when a service uses them: an app (or the
    # command line) that only execs does not load them (docs/benchmarks.md, start-up).
    from kuber_exec_core.debug import DebugPolicy

    from ._admission import Slots
    from ._audit._recording import Recording, SessionRecorder

__all__ = ["ExecService"]

logger = logging.getLogger("kuber_exec")

_BACKEND_METHODS = ("get_deployment", "list_pods", "exec")


class ExecService:
    """Runs commands in a workspace's Deployment pods, through ``backend``.

    Raises ``TypeError`` at construction when ``backend`` is not a :class:`Backend` or
    ``limits`` not an :class:`ExecLimits` (a programming error, see docs/errors.md).

    Args:
        backend: a :class:`Backend` (``KubernetesBackend`` for a real cluster).
        limits: the service's limits (the seed's defaults when ``None``).
        audit: called with an ``AuditEvent`` when an exec or session starts and when it ends;
            synchronously, so it must not block (``JsonLinesAuditLog`` queues and writes from a
            thread); its exceptions are logged and never reach the exec.
        session_limits: concurrent sessions per workspace, idle timeout and maximum duration
            of interactive sessions (none by default).
        subprotocols: the exec subprotocols to offer, in order of preference (members of
            ``Subprotocol`` or their names); default ``v5.channel.k8s.io, v4.channel.k8s.io``.
            Offer only ``v4.base64.channel.k8s.io``, ``base64.channel.k8s.io`` or
            ``channel.k8s.io`` for a server or proxy that speaks nothing else. Each keeps its
            semantics: pre-v4 reports success as a clean close without a status, and only v5
            can close stdin (``execute`` with stdin needs v5 in the offer, else
            ``EXEC_INVALID`` before anything starts; ``Stdin(eof=True)`` is refused on the
            others). Raises ``ExecError(EXEC_INVALID)`` for an unknown or repeated one.
        cleanup: start commands under the supervising prologue and, when an exec or session
            ends without its process's exit (cancelled, timed out, capped, cut off, ended by a
            limit), end the process and its children with a second, bounded exec
            (docs/cleanup.md). Per call: ``execute(..., cleanup=)``, ``open_interactive(...,
            cleanup=)``. ``EXEC_INVALID`` when not a ``bool``.
        cleanup_grace: seconds between the cleanup's TERM and its KILL (default 2); the
            caller is held at most ``2 * cleanup_grace + 2`` seconds by a cleanup (one not
            finished by then goes on in the backend's background, reported as ``pending``:
            see :attr:`cleanup_status`). ``EXEC_INVALID`` unless a finite number in [0, 60].
        debug_policy: what ``open_debug`` may add to this service's pods (default
            ``DebugPolicy()``: any image, every profile but ``sysadmin``); ``TypeError`` when
            not a :class:`~kuber_exec_core.debug.DebugPolicy` (docs/debug.md).
    """

    def __init__(
        self,
        backend: Backend,
        limits: ExecLimits | None = None,
        *,
        audit: AuditHook | None = None,
        session_limits: SessionLimits | None = None,
        subprotocols: Sequence[Subprotocol | str] | None = None,
        cleanup: bool = True,
        cleanup_grace: float = DEFAULT_CLEANUP_GRACE,
        debug_policy: DebugPolicy | None = None,
    ) -> None:
        # A programming error, not a request's: TypeError at construction (docs/errors.md).
        missing = [name for name in _BACKEND_METHODS if not callable(getattr(backend, name, None))]
        if missing:
            raise TypeError(
                f"ExecService needs a Backend (with {', '.join(_BACKEND_METHODS)}), "
                f"not {type(backend).__name__}"
            )
        if limits is not None and not isinstance(limits, ExecLimits):
            raise TypeError(f"limits must be an ExecLimits or None, not {type(limits).__name__}")
        if debug_policy is not None:
            from kuber_exec_core.debug import DebugPolicy

            if not isinstance(debug_policy, DebugPolicy):
                raise TypeError(
                    f"debug_policy must be a DebugPolicy or None, not {type(debug_policy).__name__}"
                )
        self.backend = backend
        self.limits = limits if limits is not None else ExecLimits()
        self._debug_policy = debug_policy
        self.audit = audit
        self.session_limits = session_limits if session_limits is not None else SessionLimits()
        self._slots = workspace_slots(backend, self.session_limits.max_sessions_per_workspace)
        self.subprotocols = (
            DEFAULT_SUBPROTOCOLS if subprotocols is None else validate_subprotocols(subprotocols)
        )
        self.cleanup = validate_flag(cleanup, "cleanup")
        self.cleanup_settings = CleanupSettings(grace=validate_cleanup_grace(cleanup_grace))
        self._shells = ShellRegistry()
        #: The cleanup execs in flight (at most MAX_CONCURRENT_CLEANUPS at once).
        self._cleanup_slots = CleanupSlots()
        # Batches the cleanups per container; made on first use (see _crew()).
        self._cleanup_crew: CleanupCrew | None = None

    @property
    def workspace_slots(self) -> Slots:
        """The session slots of each workspace that every session of this service holds one
        of (``SessionLimits.max_sessions_per_workspace``): a ``PortForward`` holds one too."""
        return self._slots

    @property
    def cleanup_status(self) -> CleanupStatus:
        """How this service's cleanups stand (a snapshot, counted in sessions): queued,
        running, done, failed, abandoned, the calls that returned ``pending``, and the cleanup
        execs run (docs/cleanup.md)."""
        crew = self._cleanup_crew
        return CleanupStatus() if crew is None else crew.status

    def admission(
        self, record: AuditRecord, request: ExecRequest
    ) -> AbstractAsyncContextManager[SessionSlot]:
        """The block a call of this service passes through (audit, identity, the workspace's
        session slot; :func:`~kuber_exec_anyio._admission.admitted`), for the layer's wings
        that open sessions of their own (attach, debug)."""
        return admitted(record, self._slots, request)

    def _crew(self) -> CleanupCrew:
        # On first use: its primitives belong to the event loop that runs it.
        if self._cleanup_crew is None:
            self._cleanup_crew = CleanupCrew(
                self.backend, self.subprotocols, self.cleanup_settings, self._cleanup_slots
            )
        return self._cleanup_crew

    def __repr__(self) -> str:
        return f"ExecService({self.backend!r}, {self.limits!r})"

    async def resolve_target(self, request: ExecRequest) -> ResolvedTarget:
        """Validate ``request`` and pick the pod and container.

        Raises:
            ExecError: ``EXEC_INVALID``, ``EXEC_TARGET_NOT_FOUND``, ``EXEC_TARGET_FORBIDDEN``,
                ``EXEC_TARGET_NOT_READY``, or ``EXEC_FAILED`` when the API fails.
        """
        target = await resolve_target(self.backend, request, self.limits)
        logger.info(
            "resolved %s/%s to pod %s container %s",
            target.namespace,
            target.deployment,
            target.pod,
            target.container,
        )
        return target

    async def execute(
        self,
        request: ExecRequest,
        *,
        stdout_cap: int | None = None,
        stderr_cap: int | None = None,
        stdin: bytes | bytearray | memoryview | str | None = None,
        cleanup: bool | None = None,
    ) -> ExecResult:
        """Run a command to completion and capture its output (no TTY).

        ``stdin``, if given, is sent whole and then closed; that needs ``v5.channel.k8s.io``, so
        only v5 is offered and an older server refuses before the command starts.

        ``cleanup`` (default: the service's): when the run ends without the process's exit (an
        output cap, a lost connection, the caller's cancellation or timeout), end the process
        and its children in the container before returning (docs/cleanup.md).

        Raises:
            ExecOutputLimitError: a stream passed its cap (the socket is closed at once).
            ExecError: any code of :meth:`resolve_target`; ``EXEC_INVALID`` for bad caps or
                stdin; ``EXEC_FAILED`` when the command could not run or the connection ended
                without an exit status.
            trio.Cancelled, asyncio.CancelledError: the caller was cancelled; the socket is
                closed first.
        """
        request = validate_request_type(request)
        record = AuditRecord(self.audit, "execute", request, tty=False)
        async with admitted(record, self._slots, request) as slot:
            stdout_limit = validate_output_cap(stdout_cap, "stdout", self.limits)
            stderr_limit = validate_output_cap(stderr_cap, "stderr", self.limits)
            stdin_data = None if stdin is None else stdin_bytes(stdin)
            supervise = self._supervises(cleanup)
            offer = ExecuteRun.subprotocols(stdin=stdin_data is not None, offer=self.subprotocols)
            target = await self.resolve_target(request)
            record.started(target)
            streams = ExecStreams(stdin=stdin_data is not None, stdout=True, stderr=True, tty=False)
            attempts = Attempts(
                self,
                self._shells,
                self._crew,
                request,
                record,
                slot,
                target,
                streams,
                offer,
                supervise=supervise,
                hangup=False,
                reports_errors=True,
            )
            for attempt in attempts:
                async with attempt as (target, connection):
                    run = ExecuteRun(
                        target,
                        connection.subprotocol,
                        stdout_cap=stdout_limit,
                        stderr_cap=stderr_limit,
                        stdin=stdin_data,
                        supervision=attempt.supervision,
                    )
                    attempt.runs(run.session)
                    result = await _run_execute(run, connection)
            logger.info("exec in %s/%s exited %d", target.namespace, target.pod, result.exit_code)
            record.exited(
                result.exit_code, bytes_in=run.session.bytes_in, bytes_out=run.session.bytes_out
            )
            return result

    @asynccontextmanager
    async def open_interactive(
        self,
        request: ExecRequest,
        *,
        tty: bool = True,
        stdin: bool = True,
        queue_capacity: int | None = None,
        cleanup: bool | None = None,
        recording: Recording | None = None,
    ) -> AsyncIterator[InteractiveSession]:
        """Open an interactive session (a TTY and stdin by default).

        With ``stdin=False`` the command gets no stdin stream at all (it reads end of input at
        once, on every subprotocol) and ``Stdin`` frames are refused with ``EXEC_INVALID``.

        With ``recording`` (a :class:`Recording`), the session is recorded as asciicast v2 while
        it runs (output and resizes; input only when asked); the audit events name the
        recording, and a recording that fails is logged and reported in the ``ended`` event,
        never ending the session (docs/recording.md).

        Use as ``async with service.open_interactive(request) as session:``. Leaving the block
        closes the socket; when the process had not exited by then (or the session ended by a
        limit or a lost connection), the process and its children are ended in the container
        before the block is left (``cleanup``, default the service's; docs/cleanup.md).

        Raises (on entry):
            ExecError: as :meth:`resolve_target`, ``EXEC_INVALID`` for a bad queue capacity,
                a ``tty``/``stdin``/``cleanup`` that is not a ``bool`` or a bad ``recording``.
        """
        request = validate_request_type(request)
        tty = validate_flag(tty, "tty")
        stdin = validate_flag(stdin, "stdin")
        capacity = validate_queue_capacity(queue_capacity, self.limits)
        supervise = self._supervises(cleanup)
        recorder = _recorder(recording, request, tty=tty)
        name = None if recorder is None else recorder.name
        record = AuditRecord(self.audit, "interactive", request, tty=tty, recording=name)
        limits = self.session_limits
        async with admitted(record, self._slots, request) as slot:
            target = await self.resolve_target(request)
            record.started(target)
            streams = ExecStreams(stdin=stdin, stdout=True, stderr=not tty, tty=tty)
            attempts = Attempts(
                self,
                self._shells,
                self._crew,
                request,
                record,
                slot,
                target,
                streams,
                self.subprotocols,
                supervise=supervise,
                hangup=tty,
                reports_errors=False,
            )
            for attempt in attempts:
                async with attempt as (target, connection):
                    core = ExecSession(
                        connection.subprotocol,
                        tty=tty,
                        stdin=stdin,
                        max_stdin_frame_bytes=self.limits.max_stdin_frame_bytes,
                        supervision=attempt.supervision,
                    )
                    attempt.runs(core)
                    # A terminal is handed over once the mark is read: it would echo input
                    # typed earlier ahead of the mark (and a ^C would reach the prologue), and
                    # a session that could not start is retried unseen. Without a terminal,
                    # early stdin waits in the pipe: nothing to wait for.
                    initial = await await_start(core, connection) if tty else []
                    if core.is_finished and await attempt.retry():
                        continue
                    deadlines = (
                        SessionDeadlines(limits, opened_at=anyio.current_time())
                        if limits.limits_time
                        else None
                    )
                    session = InteractiveSession(
                        target,
                        connection,
                        core,
                        capacity,
                        deadlines,
                        recorder,
                        initial_frames=initial,
                        audit=record,
                    )
                    attempt.hand_over()
                    async with (
                        _recorded(recorder, record.recording_failed),
                        run_session(session, deadlines),
                    ):
                        yield session

    @property
    def debug_policy(self) -> DebugPolicy:
        """What debug containers ``open_debug`` may add (docs/debug.md): the one given, or
        ``DebugPolicy()``."""
        if self._debug_policy is None:
            from kuber_exec_core.debug import DebugPolicy

            self._debug_policy = DebugPolicy()
        return self._debug_policy

    def _supervises(self, cleanup: bool | None) -> bool:
        wanted = self.cleanup if cleanup is None else validate_flag(cleanup, "cleanup")
        # A backend whose server runs no commands (the testing kit's MemoryBackend) has no
        # shell for the prologue nor processes to clean up (BackendHooks.runs_commands).
        return wanted and backend_hooks(self.backend).runs_commands


async def _run_execute(run: ExecuteRun, connection: ExecConnection) -> ExecResult:
    messages = run.stdin_messages()
    if not messages:
        # Nothing to send: no sender task (its task group is a measurable share of a short
        # command's cost).
        return await collect_execute(run, connection)
    with single_exception():
        async with anyio.create_task_group() as tasks:
            # Concurrently with reading: a command that echoes a large stdin would otherwise
            # fill every buffer and deadlock.
            tasks.start_soon(send_quietly, connection, messages)
            result = await collect_execute(run, connection)
            tasks.cancel_scope.cancel()
    return result


def _recorder(
    recording: Recording | None, request: ExecRequest, *, tty: bool
) -> SessionRecorder | None:
    # The recording machinery (asciicast, its writer) is imported by a session that asks for it.
    if recording is None:
        return None
    from ._audit._recording import prepare_recorder

    return prepare_recorder(recording, request, tty=tty)


def _recorded(
    recorder: SessionRecorder | None, on_failure: Callable[[str], None]
) -> AbstractAsyncContextManager[None]:
    """The recorder running for the block, or nothing when there is none."""
    if recorder is None:
        return contextlib.nullcontext()
    return recorder.running(on_failure)
