"""``ExecService``: run a command to completion, or open an interactive session, in a pod.

Written once on anyio, so the same code runs under trio and asyncio with their native
cancellation: cancelling a call (a trio cancel scope, ``task.cancel()``, ``asyncio.timeout``)
closes its socket and the runtime's own cancellation exception propagates. Every rule comes from
``kuber_exec_core``; this module only awaits the backend and moves bytes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio

from kuber_exec_core import (
    DEFAULT_SUBPROTOCOLS,
    Error,
    ExecError,
    ExecLimits,
    ExecRequest,
    ExecResult,
    ExecSession,
    ExecStreams,
    ExecuteRun,
    Exit,
    ResolvedTarget,
    Subprotocol,
    stdin_bytes,
)
from kuber_exec_core.limits import SessionDeadlines, SessionLimits
from kuber_exec_core.validation import (
    validate_flag,
    validate_output_cap,
    validate_queue_capacity,
    validate_request_type,
    validate_subprotocols,
)

from ._admission import admitted, workspace_slots
from ._audit import AuditHook, AuditRecord
from ._backend import Backend
from ._drivers import collect_execute, resolve_target, send_quietly
from ._groups import single_exception
from ._recording import Recording, prepare_recorder, recorded
from ._retarget import open_exec
from ._session import InteractiveSession, run_session

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
    """

    def __init__(
        self,
        backend: Backend,
        limits: ExecLimits | None = None,
        *,
        audit: AuditHook | None = None,
        session_limits: SessionLimits | None = None,
        subprotocols: Sequence[Subprotocol | str] | None = None,
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
        self.backend = backend
        self.limits = limits if limits is not None else ExecLimits()
        self.audit = audit
        self.session_limits = session_limits if session_limits is not None else SessionLimits()
        self._slots = workspace_slots(backend, self.session_limits.max_sessions_per_workspace)
        self.subprotocols = (
            DEFAULT_SUBPROTOCOLS if subprotocols is None else validate_subprotocols(subprotocols)
        )

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
    ) -> ExecResult:
        """Run a command to completion and capture its output (no TTY).

        ``stdin``, if given, is sent whole and then closed; that needs ``v5.channel.k8s.io``, so
        only v5 is offered and an older server refuses before the command starts.

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
        async with admitted(record, self._slots, request):
            stdout_limit = validate_output_cap(stdout_cap, "stdout", self.limits)
            stderr_limit = validate_output_cap(stderr_cap, "stderr", self.limits)
            stdin_data = None if stdin is None else stdin_bytes(stdin)
            offer = ExecuteRun.subprotocols(stdin=stdin_data is not None, offer=self.subprotocols)
            target = await self.resolve_target(request)
            record.started(target)
            streams = ExecStreams(stdin=stdin_data is not None, stdout=True, stderr=True, tty=False)
            async with open_exec(
                self.backend, request, self.limits, target, streams, offer, record.retargeted
            ) as (target, connection):
                run = ExecuteRun(
                    target,
                    connection.subprotocol,
                    stdout_cap=stdout_limit,
                    stderr_cap=stderr_limit,
                    stdin=stdin_data,
                )
                messages = run.stdin_messages()
                try:
                    with single_exception():
                        async with anyio.create_task_group() as tasks:
                            if messages:
                                # Concurrently with reading: a command that echoes a large stdin
                                # would otherwise fill every buffer and deadlock.
                                tasks.start_soon(send_quietly, connection, messages)
                            result = await collect_execute(run, connection)
                            tasks.cancel_scope.cancel()
                except ExecError as error:
                    # An output cap or a failed status: the audit event counts what did move.
                    record.failed(
                        error.code,
                        error.message,
                        bytes_in=run.session.bytes_in,
                        bytes_out=run.session.bytes_out,
                    )
                    raise
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
        closes the socket (a client close: the remote process is not signalled).

        Raises (on entry):
            ExecError: as :meth:`resolve_target`, ``EXEC_INVALID`` for a bad queue capacity,
                a ``tty``/``stdin`` that is not a ``bool`` or a bad ``recording``.
        """
        request = validate_request_type(request)
        tty = validate_flag(tty, "tty")
        stdin = validate_flag(stdin, "stdin")
        capacity = validate_queue_capacity(queue_capacity, self.limits)
        recorder = prepare_recorder(recording, request, tty=tty)
        name = None if recorder is None else recorder.name
        record = AuditRecord(self.audit, "interactive", request, tty=tty, recording=name)
        limits = self.session_limits
        async with admitted(record, self._slots, request):
            target = await self.resolve_target(request)
            record.started(target)
            streams = ExecStreams(stdin=stdin, stdout=True, stderr=not tty, tty=tty)
            async with open_exec(
                self.backend,
                request,
                self.limits,
                target,
                streams,
                self.subprotocols,
                record.retargeted,
            ) as (target, connection):
                core = ExecSession(
                    connection.subprotocol,
                    tty=tty,
                    stdin=stdin,
                    max_stdin_frame_bytes=self.limits.max_stdin_frame_bytes,
                )
                deadlines = (
                    SessionDeadlines(limits, opened_at=anyio.current_time())
                    if limits.limits_time
                    else None
                )
                session = InteractiveSession(
                    target, connection, core, capacity, deadlines, recorder
                )
                try:
                    async with (
                        recorded(recorder, record.recording_failed),
                        run_session(session, deadlines),
                    ):
                        yield session
                finally:
                    _record_end(record, session.final_frame, session.bytes_in, session.bytes_out)


def _record_end(
    record: AuditRecord, final: Exit | Error | None, bytes_in: int, bytes_out: int
) -> None:
    """The ``ended`` event: how the session ended (``None``: the client left first), and the
    bytes it moved."""
    if isinstance(final, Exit):
        record.exited(final.exit_code, bytes_in=bytes_in, bytes_out=bytes_out)
    elif isinstance(final, Error):
        record.failed(final.code, final.message, bytes_in=bytes_in, bytes_out=bytes_out)
    else:
        record.closed(bytes_in=bytes_in, bytes_out=bytes_out)
