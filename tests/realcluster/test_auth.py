"""Authentication and authorization by the real apiserver: client certificate, ServiceAccount
bearer token, exec credential plugin (through the official kubeconfig loader), RBAC refusals."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from .kube import WS_MAIN, WS_OTHER, Cluster, kubectl, service_for

pytestmark = pytest.mark.anyio


def shell(adapter: ModuleType, script: str, *, project: str = "kx-target", uid: str = WS_MAIN,
          deployment: str = "shell") -> Any:  # fmt: skip
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project=project, uid=uid),
        deployment=deployment,
        command=["sh", "-c", script],
        container=None,
    )


@pytest.mark.parametrize("user", ["admin", "executor", "exec-plugin"])
async def test_each_credential_kind_can_exec(
    adapter: ModuleType, cluster: Cluster, workloads: Any, user: str
) -> None:
    calls_before = (
        cluster.exec_plugin_calls.read_text().count("\n")
        if cluster.exec_plugin_calls.exists()
        else 0
    )
    async with service_for(adapter, cluster, user) as service:
        result = await service.execute(shell(adapter, "echo $WHO; exit 2"))
    assert (result.stdout, result.exit_code) == (b"shell\n", 2)
    if user == "exec-plugin":
        # The official loader ran the plugin (it prints an ExecCredential with the token).
        calls = cluster.exec_plugin_calls.read_text().count("\n")
        assert calls > calls_before


async def test_a_serviceaccount_without_pods_exec_gets_the_servers_reason(
    adapter: ModuleType, cluster: Cluster, workloads: Any
) -> None:
    async with service_for(adapter, cluster, "reader") as service:
        # It may read everything resolution needs...
        target = await service.resolve_target(shell(adapter, "true"))
        assert target.pod.startswith("shell-")
        # ...but not exec: the apiserver's 403 Status message is quoted.
        with pytest.raises(adapter.ExecError) as caught:
            await service.execute(shell(adapter, "true"))
    error = caught.value
    # The upgrade itself was refused with the server's 403 Forbidden: the same code as the
    # pre-flight's denial, with the server's words (no rule at all: `get` is refused first).
    assert error.code is adapter.ExecErrorCode.TARGET_FORBIDDEN, error
    assert (error.http_status, error.status_reason) == (403, "Forbidden")
    assert "403" in error.message
    assert "system:serviceaccount:kx-target:reader" in error.message
    assert 'cannot get resource "pods/exec"' in error.message
    assert "forbidden" in error.message


async def test_a_token_for_another_namespace_is_refused_on_the_rest_reads(
    adapter: ModuleType, cluster: Cluster, workloads: Any
) -> None:
    async with service_for(adapter, cluster, "stranger") as service:
        # At home it works...
        result = await service.execute(
            shell(adapter, "echo $WHO", project="kx-other", uid=WS_OTHER, deployment="elsewhere")
        )
        assert result.stdout == b"elsewhere\n"
        # ...in kx-target the first REST read (the Deployment) is refused.
        with pytest.raises(adapter.ExecError) as caught:
            await service.resolve_target(shell(adapter, "true"))
    error = caught.value
    # The apiserver's 403 on the Deployment read, quoted (not an ownership refusal).
    assert error.code is adapter.ExecErrorCode.FAILED, error
    assert "403" in error.message
    assert "system:serviceaccount:kx-other:stranger" in error.message
    assert 'cannot get resource "deployments"' in error.message
    assert 'in the namespace "kx-target"' in error.message


@pytest.mark.parametrize("user", ["admin", "executor", "exec-plugin", "reader"])
def test_kubectl_reads_with_the_same_kubeconfigs(
    cluster: Cluster, workloads: Any, user: str
) -> None:
    # The Go loader accepts the kubeconfigs the Python one does (the exec plugin's included).
    done = kubectl(
        cluster, "get", "deployment", "shell", "-n", cluster.main_ns, "-o", "name", user=user
    )
    assert done.stdout == b"deployment.apps/shell\n"


def test_kubectl_is_refused_with_the_stranger_token_too(cluster: Cluster, workloads: Any) -> None:
    done = kubectl(
        cluster, "get", "deployment", "shell", "-n", cluster.main_ns, user="stranger", check=False
    )
    assert done.returncode != 0
    assert b"forbidden" in done.stderr
