"""The job runner under trio (pytest-trio): each outcome, produced by shaping the sandbox."""

from __future__ import annotations

from typing import Any

import pytest
from platform_jobs import JobOutcome, JobStatus, run_job

from kuber_exec_pytest import KuberSandbox, KuberTarget
from kuber_exec_sandbox import PodSpec


async def job(service: Any, target: KuberTarget, script: str, **options: Any) -> JobOutcome:
    return await run_job(service, target.workspace, target.deployment, script, **options)


# Runs on the sandbox, and on a real cluster with --kuber-kubeconfig and --kuber-target.
@pytest.mark.trio
async def test_a_job_succeeds(kuber_service: Any, kuber_target: KuberTarget) -> None:
    outcome = await job(kuber_service, kuber_target, "echo built; exit 0")
    assert outcome == JobOutcome(JobStatus.SUCCEEDED, b"built\n", 0)


@pytest.mark.trio
async def test_a_failing_script_is_a_failed_job(
    kuber_service: Any, kuber_target: KuberTarget
) -> None:
    outcome = await job(kuber_service, kuber_target, "echo half; exit 3")
    assert outcome == JobOutcome(JobStatus.FAILED, b"half\n", 3)


@pytest.mark.trio
async def test_no_ready_pod_is_unavailable(kuber_sandbox: KuberSandbox, kuber_service: Any) -> None:
    # Its only pod is still starting: scheduled, its container not running yet.
    target = kuber_sandbox.add_workspace("api", pods=[PodSpec(phase="Pending", running=False)])
    outcome = await job(kuber_service, target, "true")
    assert outcome.status is JobStatus.UNAVAILABLE


@pytest.mark.trio
async def test_another_workspaces_deployment_is_forbidden(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    theirs = kuber_sandbox.add_workspace("billing", uid="someone-else")
    mine = kuber_sandbox.add_workspace("api")
    outcome = await job(kuber_service, KuberTarget(mine.workspace, theirs.deployment), "true")
    assert outcome.status is JobStatus.FORBIDDEN


@pytest.mark.trio
async def test_a_connection_dropped_mid_job_is_retried(
    kuber_sandbox: KuberSandbox, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    kuber_sandbox.faults.drop_exec_after(5)
    outcome = await job(kuber_service, kuber_target, "echo one two three")
    assert outcome.status is JobStatus.RETRY
    # The platform retries; the fault was armed for one exec only.
    assert (await job(kuber_service, kuber_target, "echo again")).output == b"again\n"
