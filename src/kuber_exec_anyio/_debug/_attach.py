"""``open_attach``: an interactive session on a container's running process (``pods/attach``).

The same targeting, ownership checks, workspace slots (Lease limits), audit and recording as
``ExecService.open_interactive``; nothing is started, so nothing is supervised nor cleaned up:
leaving the block detaches and the process runs on. Before the upgrade the container's spec is
read: stdin or a TTY it was not created with is refused with ``EXEC_INVALID`` (a runtime would
refuse it, or silently ignore the input), and ``tty=None`` follows the container's setting, as
``kubectl attach`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from kuber_exec_core import ExecError, ExecErrorCode, ExecSession, ExecStreams, ResolvedTarget
from kuber_exec_core.debug import ContainerRequest
from kuber_exec_core.limits import SessionDeadlines
from kuber_exec_core.validation import validate_flag, validate_queue_capacity

from .._attempts import _record_end
from .._audit._record import AuditRecord
from .._audit._recording import Recording, SessionRecorder, prepare_recorder, recorded
from .._backend import backend_hooks
from .._pods import container_spec_of, read_pod
from .._session import InteractiveSession, run_session

if TYPE_CHECKING:
    from .._service import ExecService

__all__ = ["attach_streams", "open_attach", "request_type", "run_attached"]

ATTACH_COMMAND = ("attach",)


def request_type(request: object) -> ContainerRequest:
    if not isinstance(request, ContainerRequest):
        raise ExecError(
            ExecErrorCode.INVALID,
            f"request must be a ContainerRequest, not {type(request).__name__}",
        )
    return request


async def attach_streams(
    service: ExecService, target: ResolvedTarget, *, tty: bool | None, stdin: bool
) -> ExecStreams:
    """The streams to attach with, checked against the container's spec (read now).

    Raises:
        ExecError: ``EXEC_INVALID`` for stdin or a TTY the container was not created with;
            ``EXEC_TARGET_NOT_FOUND`` when the pod is gone or was replaced.
    """
    pod = await read_pod(service.backend, target)
    spec = container_spec_of(pod, target.container) or {}
    created_stdin = spec.get("stdin") is True
    created_tty = spec.get("tty") is True
    where = f"container {target.container} of pod {target.namespace}/{target.pod}"
    if stdin and not created_stdin:
        raise ExecError(
            ExecErrorCode.INVALID,
            f"{where} was not created with stdin (its spec has no 'stdin: true'): attach can "
            "only read its output (stdin=False), or read its log",
        )
    if tty and not created_tty:
        raise ExecError(
            ExecErrorCode.INVALID,
            f"{where} was not created with a TTY (its spec has no 'tty: true'): attach with "
            "tty=False",
        )
    use_tty = created_tty if tty is None else tty
    return ExecStreams(stdin=stdin, stdout=True, stderr=not use_tty, tty=use_tty)


@asynccontextmanager
async def run_attached(
    service: ExecService,
    record: AuditRecord,
    target: ResolvedTarget,
    streams: ExecStreams,
    capacity: int,
    recorder: SessionRecorder | None,
) -> AsyncIterator[InteractiveSession]:
    """Attach to ``target`` with ``streams`` and run the session for the block (its audit
    ``ended`` event when it ends, however)."""
    limits = service.session_limits
    async with backend_hooks(service.backend).attach(
        target, streams, service.subprotocols
    ) as connection:
        core = ExecSession(
            connection.subprotocol,
            tty=streams.tty,
            stdin=streams.stdin,
            max_stdin_frame_bytes=service.limits.max_stdin_frame_bytes,
        )
        deadlines = (
            SessionDeadlines(limits, opened_at=anyio.current_time()) if limits.limits_time else None
        )
        session = InteractiveSession(target, connection, core, capacity, deadlines, recorder)
        try:
            async with (
                recorded(recorder, record.recording_failed),
                run_session(session, deadlines),
            ):
                yield session
        finally:
            _record_end(record, core)


@asynccontextmanager
async def open_attach(
    service: ExecService,
    request: ContainerRequest,
    *,
    stdin: bool = True,
    tty: bool | None = None,
    queue_capacity: int | None = None,
    recording: Recording | None = None,
) -> AsyncIterator[InteractiveSession]:
    """Attach to the main process of the container ``request`` resolves to.

    Use as ``async with open_attach(service, request) as session:``: iterate the session for
    ``Stdout``/``Stderr`` and one final ``Exit`` (``Exit(0)`` when the process ended: attach
    reports no exit code) or ``Error``; send ``Stdin``/``Resize``. Leaving the block detaches:
    the process runs on. Output written before attaching is not replayed (read the log).

    Args:
        stdin: send input (the container must have been created with ``stdin: true``).
        tty: ``None`` (default): as the container was created; ``True``/``False`` must match.
        queue_capacity: frames buffered for the consumer (the service's default).
        recording: record the session (asciicast v2, docs/recording.md).

    Raises (on entry):
        ExecError: what ``ExecService.resolve_target`` raises; ``EXEC_INVALID`` for stdin or a
            TTY the container was not created with, or a bad argument; ``EXEC_ABORTED`` when
            the workspace has no free session slot; ``EXEC_FAILED`` when the upgrade fails.
    """
    request = request_type(request)
    stdin = validate_flag(stdin, "stdin")
    if tty is not None:
        tty = validate_flag(tty, "tty")
    capacity = validate_queue_capacity(queue_capacity, service.limits)
    exec_request = request.as_exec_request(ATTACH_COMMAND)
    # Checked before anything is contacted; a TTY is assumed until the spec says otherwise.
    recorder = prepare_recorder(recording, exec_request, tty=tty is not False)
    record = AuditRecord(
        service.audit,
        "attach",
        exec_request,
        tty=tty is not False,
        recording=None if recorder is None else recorder.name,
    )
    async with service.admission(record, exec_request) as slot:
        target = await service.resolve_target(exec_request)
        record.started(target)
        streams = await attach_streams(service, target, tty=tty, stdin=stdin)
        slot.note_attempt(target, None, hangup=False)
        async with run_attached(service, record, target, streams, capacity, recorder) as session:
            yield session
