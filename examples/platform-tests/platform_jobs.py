"""A platform's job runner: what the platform code under test does with each exec outcome.

``run_job`` runs a workspace's script in its Deployment and turns every way that can end into
one of the platform's own answers: the job's output, a failed job, a retry for a connection that
broke, "unavailable" while no pod is ready, "forbidden", or "timed out". It is runtime-neutral
(anyio): the same function runs in a trio app and an asyncio app.
"""

from __future__ import annotations

import enum
from typing import Any

import anyio
import attrs

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Workspace

__all__ = ["JobOutcome", "JobStatus", "run_job"]


class JobStatus(enum.Enum):
    """What the platform tells its user about a job."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the script ran and exited non-zero (or was killed)
    RETRY = "retry"  # the connection broke before the job's end was known
    UNAVAILABLE = "unavailable"  # no ready pod right now
    FORBIDDEN = "forbidden"  # the Deployment is not the workspace's
    TIMED_OUT = "timed out"


@attrs.frozen
class JobOutcome:
    status: JobStatus
    output: bytes = b""
    exit_code: int | None = None
    detail: str = ""


async def run_job(
    service: Any,
    workspace: Workspace,
    deployment: str,
    script: str,
    *,
    time_limit: float = 60.0,
) -> JobOutcome:
    """Run ``sh -c script`` in the workspace's Deployment, within ``time_limit`` seconds."""
    request = ExecRequest(workspace=workspace, deployment=deployment, command=["sh", "-c", script])
    with anyio.move_on_after(time_limit) as deadline:
        try:
            result = await service.execute(request)
        except ExecError as error:
            return _from_error(error)
    if deadline.cancelled_caught:
        return JobOutcome(JobStatus.TIMED_OUT, detail=f"no answer within {time_limit:g} s")
    status = JobStatus.SUCCEEDED if result.exit_code == 0 else JobStatus.FAILED
    return JobOutcome(status, result.stdout, result.exit_code)


def _from_error(error: ExecError) -> JobOutcome:
    if error.code is ExecErrorCode.TARGET_NOT_READY:
        return JobOutcome(JobStatus.UNAVAILABLE, detail=error.message)
    if error.code is ExecErrorCode.TARGET_FORBIDDEN:
        return JobOutcome(JobStatus.FORBIDDEN, detail=error.message)
    if error.code is ExecErrorCode.FAILED:
        return JobOutcome(JobStatus.RETRY, detail=error.message)
    raise error  # a bug in the platform (EXEC_INVALID): let it show
