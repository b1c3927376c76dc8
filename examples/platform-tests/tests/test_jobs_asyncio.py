"""The job runner under asyncio (anyio's pytest plugin): the faults a platform must survive."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from platform_jobs import JobOutcome, JobStatus, run_job

from kuber_exec_pytest import KuberSandbox, KuberTarget

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def job(service: Any, target: KuberTarget, script: str, **options: Any) -> JobOutcome:
    return await run_job(service, target.workspace, target.deployment, script, **options)


async def test_a_job_succeeds(kuber_service: Any, kuber_target: KuberTarget) -> None:
    outcome = await job(kuber_service, kuber_target, "echo $((6 * 7))")
    assert outcome == JobOutcome(JobStatus.SUCCEEDED, b"42\n", 0)


async def test_a_pod_that_goes_away_fails_the_job_with_137(
    kuber_sandbox: KuberSandbox, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    outcome: list[JobOutcome] = []

    async def run() -> None:
        outcome.append(await job(kuber_service, kuber_target, "exec sleep 300"))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        with anyio.fail_after(10):
            await kuber_sandbox.wait_running()  # the job's command has started
        kuber_sandbox.end_pod(kuber_target)  # its process dies, the pod is deleted
    assert outcome == [JobOutcome(JobStatus.FAILED, b"", 137)]


async def test_a_server_that_stops_answering_times_the_job_out(
    kuber_sandbox: KuberSandbox, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    kuber_sandbox.faults.hold_output()
    outcome = await job(kuber_service, kuber_target, "echo never seen", time_limit=0.5)
    assert outcome == JobOutcome(JobStatus.TIMED_OUT, detail="no answer within 0.5 s")


@pytest.mark.kuber_sandbox(offer_v5=False)
async def test_an_old_cluster_still_runs_jobs(
    kuber_service: Any, kuber_target: KuberTarget
) -> None:
    assert (await job(kuber_service, kuber_target, "echo v4")).output == b"v4\n"


async def test_a_refused_exec_is_retried(
    kuber_sandbox: KuberSandbox, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    kuber_sandbox.faults.refuse_exec(503)
    outcome = await job(kuber_service, kuber_target, "true")
    assert outcome.status is JobStatus.RETRY
    assert "HTTP 503" in outcome.detail
