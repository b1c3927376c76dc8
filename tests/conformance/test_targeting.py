"""The seed's resolveTarget, end to end over REST against the sandbox, for both adapters."""

from __future__ import annotations

from typing import Any

import pytest

from kuber_exec_core import ExecError, ExecErrorCode, ExecLimits, ExecRequest, Workspace

pytestmark = pytest.mark.anyio

WORKSPACE = Workspace(project="demo", uid="demo-uid")


def request(
    deployment: str, *, project: str = "demo", uid: str = "demo-uid", container: str | None = None
) -> ExecRequest:
    return ExecRequest(
        workspace=Workspace(project=project, uid=uid),
        deployment=deployment,
        command=["true"],
        container=container,
    )


async def expect_error(service: Any, exec_request: ExecRequest) -> ExecError:
    with pytest.raises(ExecError) as caught:
        await service.resolve_target(exec_request)
    return caught.value


async def test_ready_pod_of_the_workspace_deployment_is_chosen(service: Any) -> None:
    target = await service.resolve_target(request("web"))
    assert target.namespace == "demo"
    assert target.deployment == "web"
    assert target.container == "app"
    assert target.pod.startswith("web-")
    assert target.deployment_uid
    assert target.pod_uid


async def test_ready_first_then_name_and_foreign_pods_never(service: Any) -> None:
    target = await service.resolve_target(request("ranked", project="rank"))
    assert target.pod == "b-ready"


@pytest.mark.parametrize(
    ("exec_request", "code", "message"),
    [
        (request("nope"), ExecErrorCode.TARGET_NOT_FOUND, "Deployment nope was not found"),
        (
            request("other"),
            ExecErrorCode.TARGET_FORBIDDEN,
            "Deployment other is not owned by this workspace",
        ),
        (
            request("web", uid="someone-else"),
            ExecErrorCode.TARGET_FORBIDDEN,
            "Deployment web is not owned by this workspace",
        ),
        (
            request("unmanaged", project="targets"),
            ExecErrorCode.TARGET_FORBIDDEN,
            "Deployment unmanaged is not owned by this workspace",
        ),
        (
            request("noselector", project="targets"),
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment noselector has no usable pod selector",
        ),
        (
            request("nocontainer", project="targets"),
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment nocontainer has no container",
        ),
        (
            request("pending", project="targets"),
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment pending has no running owned pod/container",
        ),
        (
            request("empty", project="targets"),
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment empty has no running owned pod/container",
        ),
        (
            request("stopped", project="targets"),
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment stopped has no running owned pod/container",
        ),
        (
            request("web", container="missing"),
            ExecErrorCode.TARGET_NOT_FOUND,
            "Container missing was not found or running in a deployment pod",
        ),
        (
            request("stopped", project="targets", container="app"),
            ExecErrorCode.TARGET_NOT_FOUND,
            "Container app was not found or running in a deployment pod",
        ),
        (
            request("Web"),
            ExecErrorCode.INVALID,
            "Deployment name must be a valid lowercase DNS name of at most 253 characters",
        ),
        (
            request("web", uid=" "),
            ExecErrorCode.INVALID,
            "Workspace UID must be between 1 and 256 characters",
        ),
    ],
)
async def test_seed_errors(
    service: Any, exec_request: ExecRequest, code: ExecErrorCode, message: str
) -> None:
    error = await expect_error(service, exec_request)
    assert (error.code, error.message) == (code, message)


async def test_named_sidecar_container(service: Any) -> None:
    target = await service.resolve_target(request("multi", project="targets", container="sidecar"))
    assert target.container == "sidecar"


async def test_match_expressions_select_pods(service: Any) -> None:
    target = await service.resolve_target(request("expressions", project="targets"))
    assert target.pod == "expressions-web"


async def test_limits_apply_before_any_request(adapter: Any, sandbox: Any) -> None:
    from support import backend_for

    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, ExecLimits(max_command_arguments=1))
        bad = ExecRequest(workspace=WORKSPACE, deployment="web", command=["a", "b"])
        error = await expect_error(service, bad)
    assert error.code is ExecErrorCode.INVALID
    assert error.message == "Command cannot contain more than 1 arguments"


async def test_unreachable_api_server_is_exec_failed(adapter: Any) -> None:
    config = adapter.ClusterConfig("http://127.0.0.1:9")
    async with adapter.KubernetesBackend(config, request_timeout=5) as backend:
        error = await expect_error(adapter.ExecService(backend), request("web"))
    assert error.code is ExecErrorCode.FAILED
    assert "ConnectError" in error.message
