"""``stream_logs``: a container's log as an async byte iterator (``pods/log``).

The same targeting and checks as an exec (workspace ownership, readiness, the container
rules), acting as the request's user. The body is read as it comes and handed over chunk by
chunk: nothing is buffered beyond one chunk, so a followed log of any size costs bounded memory,
and a slow consumer slows the connection (TCP pushes back on the API server). Leaving the block
(or cancelling the reader) closes the connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.debug import ContainerRequest, LogOptions, log_path

from .._audit._record import AuditRecord
from .._backend import StreamedAnswer, backend_hooks
from .._identity import act_as, stop_acting
from ._attach import request_type

if TYPE_CHECKING:
    from .._service import ExecService

__all__ = ["LogStream", "open_container_log", "stream_logs"]

LOGS_COMMAND = ("logs",)


class LogStream:
    """A container's log as it is read: ``async for chunk in stream`` gives ``bytes``.

    Iteration ends when the log does (without ``follow``: at once after what there is; with
    it: when the container's process ends). ``bytes_read`` counts what was handed over.

    Raises (while iterating):
        ExecError: ``EXEC_FAILED`` when the connection breaks off.
    """

    def __init__(self, answer: StreamedAnswer) -> None:
        self._chunks = answer.chunks()
        self.bytes_read = 0

    def __aiter__(self) -> LogStream:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._chunks.__anext__()
        self.bytes_read += len(chunk)
        return chunk

    async def read_all(self, limit: int = 64 * 1024 * 1024) -> bytes:
        """Everything until the log ends (at most ``limit`` bytes: ``EXEC_OUTPUT_LIMIT``-like
        ``EXEC_FAILED`` past it, as memory must stay bounded)."""
        data = bytearray()
        async for chunk in self:
            data += chunk
            if len(data) > limit:
                raise ExecError(ExecErrorCode.FAILED, f"the log exceeds {limit} bytes")
        return bytes(data)


def _log_error(status: int, body: bytes, where: str) -> ExecError:
    try:
        answer = json.loads(body)
        message = str(answer.get("message") or "") if isinstance(answer, dict) else ""
    except (ValueError, UnicodeDecodeError):
        message = body[:300].decode("utf-8", "replace")
    code = {
        404: ExecErrorCode.TARGET_NOT_FOUND,
        403: ExecErrorCode.TARGET_FORBIDDEN,
    }.get(status, ExecErrorCode.FAILED)
    return ExecError(
        code,
        f"reading the log of {where} failed (HTTP {status}): {message or 'no message'}",
        http_status=status,
    )


@asynccontextmanager
async def open_container_log(
    backend: object, namespace: str, pod: str, container: str, options: LogOptions
) -> AsyncIterator[LogStream]:
    """The log of one container, read for the block (no targeting: the caller's done it).

    Raises (on entry):
        ExecError: the API server's refusal (a pod gone, a container still waiting, no
            previous instance, RBAC) in words, or ``EXEC_FAILED`` when it cannot be reached.
    """
    path = log_path(namespace, pod, container, options)
    async with backend_hooks(backend).api_stream(path) as answer:
        if answer.status != 200:
            raise _log_error(
                answer.status, answer.error_body, f"container {container} of pod {namespace}/{pod}"
            )
        yield LogStream(answer)


@asynccontextmanager
async def stream_logs(
    service: ExecService, request: ContainerRequest, options: LogOptions | None = None
) -> AsyncIterator[LogStream]:
    """Read the log of the container ``request`` resolves to: ``async with stream_logs(service,
    request, LogOptions(follow=True)) as log: async for chunk in log: ...``.

    Audited as ``kind="logs"`` (``bytes_out``: the bytes handed over). Takes no session slot.

    Raises (on entry):
        ExecError: what ``ExecService.resolve_target`` raises; ``EXEC_INVALID`` for a bad
            argument; what :func:`open_container_log` raises.
    """
    request = request_type(request)
    options = LogOptions() if options is None else options
    if not isinstance(options, LogOptions):
        raise ExecError(ExecErrorCode.INVALID, "options must be a LogOptions or None")
    exec_request = request.as_exec_request(LOGS_COMMAND)
    record = AuditRecord(service.audit, "logs", exec_request, tty=False)
    token = act_as(request.on_behalf_of)
    stream: LogStream | None = None
    try:
        target = await service.resolve_target(exec_request)
        record.started(target)
        async with open_container_log(
            service.backend, target.namespace, target.pod, target.container, options
        ) as stream:
            yield stream
        record.exited(0, bytes_in=0, bytes_out=stream.bytes_read)
    except BaseException as error:
        record.interrupted(error, moved=0)
        raise
    finally:
        stop_acting(token)
