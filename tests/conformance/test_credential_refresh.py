"""A ``401`` reloads the credentials once (the exec plugin runs again) and tries once more.

The kubeconfig's user is an exec credential plugin (a Python script printing an
``ExecCredential`` with the token in a file, counting its runs); the sandbox requires a token
and rotates it on demand (``Sandbox.set_token``), as when a token is revoked before the expiry
the plugin gave.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from kuber_exec_core import (
    Deployment,
    ExecError,
    ExecRequest,
    ExecStreams,
    LabelSelector,
    Pod,
    ResolvedTarget,
    Subprotocol,
    Workspace,
)
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread, write_kubeconfig

pytestmark = pytest.mark.anyio

REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"),
    deployment="web",
    command=["sh", "-c", "echo fresh"],
)
PLUGIN = textwrap.dedent(
    """
    import json, pathlib, sys
    token_file, runs_file = map(pathlib.Path, sys.argv[1:3])
    with runs_file.open("a") as runs:
        runs.write("run\\n")
    print(json.dumps({
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": token_file.read_text().strip()},
    }))
    """
)


class Plugin:
    def __init__(self, directory: Path) -> None:
        self.token_file = directory / "token"
        self.runs_file = directory / "runs"
        self.script = directory / "plugin.py"
        self.script.write_text(PLUGIN)
        self.runs_file.write_text("")

    @property
    def runs(self) -> int:
        return len(self.runs_file.read_text().splitlines())

    def kubeconfig(self, url: str, path: Path) -> Path:
        command = [str(self.script), str(self.token_file), str(self.runs_file)]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": url}}],
            "users": [
                {
                    "name": "u",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": sys.executable,
                            "args": command,
                            "interactiveMode": "Never",
                        }
                    },
                }
            ],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path.write_text(json.dumps(config))
        return path


@pytest.fixture
def guarded() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster(), token="token-1") as running:
        yield running


class RotateBeforeUpgrade:
    """A backend that reads through ``inner`` and rotates the sandbox's token just before the
    exec upgrade: the 401 comes at the upgrade, after every REST read succeeded."""

    def __init__(self, inner: Any, sandbox: Sandbox, plugin: Plugin, new_token: str) -> None:
        self.inner, self.sandbox, self.plugin, self.new_token = inner, sandbox, plugin, new_token

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        deployment: Deployment | None = await self.inner.get_deployment(namespace, name)
        return deployment

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        pods: Sequence[Pod] = await self.inner.list_pods(namespace, selector)
        return pods

    def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AbstractAsyncContextManager[Any]:
        self.sandbox.set_token(self.new_token)
        connection: AbstractAsyncContextManager[Any] = self.inner.exec(
            target, command, streams, subprotocols
        )
        return connection


async def test_a_401_at_the_upgrade_refreshes_once_then_succeeds(
    adapter: Any, guarded: Sandbox, tmp_path: Path
) -> None:
    plugin = Plugin(tmp_path)
    plugin.token_file.write_text("token-1")
    path = plugin.kubeconfig(guarded.url, tmp_path / "kubeconfig")
    backend = adapter.KubernetesBackend.from_kubeconfig(str(path))
    assert plugin.runs == 1
    async with backend:
        plugin.token_file.write_text("token-2")  # what the plugin hands out from now on
        service = adapter.ExecService(RotateBeforeUpgrade(backend, guarded, plugin, "token-2"))
        result = await service.execute(REQUEST)
        assert result.stdout == b"fresh\n"
        assert plugin.runs == 2  # one refresh
        assert backend.config.credentials_generation == 1
        # The fresh token serves the next exec without another refresh.
        assert (await adapter.ExecService(backend).execute(REQUEST)).exit_code == 0
    assert plugin.runs == 2


async def test_a_401_on_a_rest_read_refreshes_once_too(
    adapter: Any, guarded: Sandbox, tmp_path: Path
) -> None:
    plugin = Plugin(tmp_path)
    plugin.token_file.write_text("token-1")
    path = plugin.kubeconfig(guarded.url, tmp_path / "kubeconfig")
    backend = adapter.KubernetesBackend.from_kubeconfig(str(path))
    async with backend:
        guarded.set_token("token-3")
        plugin.token_file.write_text("token-3")
        assert (await adapter.ExecService(backend).execute(REQUEST)).stdout == b"fresh\n"
    assert plugin.runs == 2


async def test_a_second_401_fails_clearly_after_one_refresh(
    adapter: Any, guarded: Sandbox, tmp_path: Path
) -> None:
    plugin = Plugin(tmp_path)
    plugin.token_file.write_text("token-1")
    path = plugin.kubeconfig(guarded.url, tmp_path / "kubeconfig")
    backend = adapter.KubernetesBackend.from_kubeconfig(str(path))
    async with backend:
        # The plugin keeps handing out the revoked token.
        service = adapter.ExecService(RotateBeforeUpgrade(backend, guarded, plugin, "token-9"))
        with pytest.raises(ExecError) as raised:
            await service.execute(REQUEST)
    assert raised.value.http_status == 401
    assert "token-1" not in raised.value.message
    assert "token-9" not in raised.value.message
    assert plugin.runs == 2  # exactly one refresh, no loop


async def test_a_static_token_is_reread_from_the_rewritten_kubeconfig(
    adapter: Any, guarded: Sandbox
) -> None:
    # The sandbox's own kubeconfig holds a static token; a 401 reads the file again, so a
    # kubeconfig rewritten with the rotated token (as a sidecar does) is picked up.
    backend = adapter.KubernetesBackend.from_kubeconfig(str(guarded.kubeconfig_path))
    async with backend:
        guarded.set_token("rotated")
        with pytest.raises(ExecError) as raised:
            await adapter.ExecService(backend).execute(REQUEST)
        assert raised.value.http_status == 401
        assert backend.config.credentials_generation == 1
        write_kubeconfig(guarded.kubeconfig_path, guarded.url, token="rotated")
        assert (await adapter.ExecService(backend).execute(REQUEST)).stdout == b"fresh\n"
    assert backend.config.credentials_generation == 2


async def test_concurrent_401s_share_one_refresh(
    adapter: Any, guarded: Sandbox, tmp_path: Path
) -> None:
    plugin = Plugin(tmp_path)
    plugin.token_file.write_text("token-1")
    path = plugin.kubeconfig(guarded.url, tmp_path / "kubeconfig")
    backend = adapter.KubernetesBackend.from_kubeconfig(str(path))
    results: list[Any] = []
    async with backend:
        guarded.set_token("token-5")
        plugin.token_file.write_text("token-5")
        service = adapter.ExecService(backend)

        async def run() -> None:
            results.append(await service.execute(REQUEST))

        async with anyio.create_task_group() as tasks:
            for _ in range(6):
                tasks.start_soon(run)
    assert [r.stdout for r in results] == [b"fresh\n"] * 6
    assert plugin.runs == 2  # one load, one refresh for all six
    assert backend.config.credentials_generation == 1
