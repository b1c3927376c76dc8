"""Attach, logs and ephemeral debug containers on the real clusters (docs/debug.md).

A shell-less pod (``kuber-distroless``: one static binary, no shell, built and imported by
``scripts/realcluster/cluster.py``) is the target. On 1.37 a debug container (the tier's busybox,
``imagePullPolicy: Never``) gives a shell that sees the pod's processes, on both runtimes and
through the CLI; attach and logs work on 1.37 and 1.20; on 1.20 (ephemeral containers off) debug
is a clear error naming the version.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import ModuleType
from typing import Any

import anyio
import pytest

from .kube import (
    MANAGED_BY,
    WORKSPACE_UID,
    WS_MAIN,
    Cluster,
    is_ready,
    kubectl,
    pods_of,
    poll,
    service_for,
)

pytestmark = pytest.mark.anyio

NAME = "shellless"


def manifest(cluster: Cluster) -> dict[str, Any]:
    image = cluster.info["distroless_image"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": NAME,
            "namespace": cluster.main_ns,
            "labels": {"app": NAME, MANAGED_BY: "kuber", WORKSPACE_UID: WS_MAIN},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "Default",
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "app",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "stdin": True,
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture(scope="module")
def shellless(cluster: Cluster) -> str:
    """The shell-less Deployment, rolled out (applied once per cluster)."""
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest(cluster)).encode())

    def ready() -> bool:
        pods = [p for p in pods_of(cluster, cluster.main_ns, f"app={NAME}")]
        return any(is_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)

    poll(ready, timeout=120, what="the shell-less pod")
    return NAME


def request(adapter: ModuleType) -> Any:
    return adapter.ContainerRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN), deployment=NAME
    )


async def read_until(session: Any, adapter: ModuleType, needle: bytes) -> bytes:
    seen = b""
    with anyio.fail_after(60):
        async for frame in session:
            if isinstance(frame, adapter.Stdout | adapter.Stderr):
                seen += bytes(frame.data)
                if needle in seen:
                    return seen
    pytest.fail(f"the session ended before {needle!r}: {seen!r}")


async def test_exec_cannot_help_in_a_shellless_pod(
    adapter: ModuleType, cluster: Cluster, shellless: str
) -> None:
    async with service_for(adapter, cluster, "admin") as service:
        exec_request = adapter.ExecRequest(
            workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
            deployment=NAME,
            command=["sh", "-c", "echo hi"],
        )
        with pytest.raises(adapter.ExecError) as raised:
            await service.execute(exec_request)
    assert "sh" in raised.value.message


async def test_attach_to_the_main_process(
    adapter: ModuleType, cluster: Cluster, shellless: str
) -> None:
    async with (
        service_for(adapter, cluster, "admin") as service,
        adapter.open_attach(service, request(adapter)) as session,
    ):
        marker = f"kx-attach-{adapter.__name__}"
        await session.send(adapter.Stdin(f"{marker}\n".encode()))
        seen = await read_until(session, adapter, f"got: {marker}".encode())
    assert f"kx-distroless got: {marker}\n".encode() in seen


async def test_logs_of_the_main_process(
    adapter: ModuleType, cluster: Cluster, shellless: str
) -> None:
    async with service_for(adapter, cluster, "admin") as service:
        options = adapter.LogOptions(timestamps=True)
        async with adapter.stream_logs(service, request(adapter), options) as log:
            lines = (await log.read_all()).splitlines()
        assert lines[0].split(b" ", 1)[1] == b"kx-distroless up"
        seen = b""
        follow = adapter.LogOptions(follow=True, tail_lines=1)
        async with adapter.stream_logs(service, request(adapter), follow) as log:
            with anyio.fail_after(30):
                async for chunk in log:
                    seen += chunk
                    if seen.endswith(b"\n"):
                        break
        assert seen.startswith(b"kx-distroless")


async def test_a_shell_in_a_debug_container(
    adapter: ModuleType, cluster: Cluster, shellless: str, server_minor: int
) -> None:
    spec = adapter.DebugContainer(
        image=cluster.image, image_pull_policy="Never", command=["sh"], env={"KX": "dbg"}
    )
    async with service_for(adapter, cluster, "admin") as service:
        events: list[Any] = []
        service.audit = events.append
        if server_minor < 23:
            with pytest.raises(adapter.ExecError) as off:
                async with adapter.open_debug(service, request(adapter), spec):
                    pass
            assert off.value.code is adapter.ExecErrorCode.FAILED
            assert f"this cluster (Kubernetes 1.{server_minor}) does not serve ephemeral" in (
                off.value.message
            )
            return
        statuses: list[Any] = []
        async with adapter.open_debug(
            service, request(adapter), spec, on_status=statuses.append
        ) as debugging:
            assert debugging.session is not None
            await debugging.session.send(
                adapter.Stdin(b"ps -o args | grep -c '^/app$'; echo kx-$KX-$((6*7))\n")
            )
            seen = await read_until(debugging.session, adapter, b"kx-dbg-42")
            await debugging.session.send(adapter.Stdin(b"exit\n"))
        # The target's process is visible from the debug container (a shared process namespace).
        assert b"1\r\n" in seen or b"1\n" in seen
        assert statuses[-1].state == "running"
        assert [(e.kind, e.phase) for e in events] == [("debug", "started"), ("debug", "ended")]
        assert events[0].image == cluster.image


async def test_debug_needs_patch_on_ephemeralcontainers(
    adapter: ModuleType, cluster: Cluster, shellless: str, server_minor: int
) -> None:
    if server_minor < 23:
        pytest.skip("ephemeral containers are off on this release (the feature-off test covers it)")
    spec = adapter.DebugContainer(image=cluster.image, image_pull_policy="Never")
    async with service_for(adapter, cluster, "executor") as service:
        with pytest.raises(adapter.ExecError) as raised:
            async with adapter.open_debug(service, request(adapter), spec):
                pass
    assert raised.value.code is adapter.ExecErrorCode.TARGET_FORBIDDEN
    assert "needs the 'patch' verb on 'pods/ephemeralcontainers'" in raised.value.message


def test_the_cli_debugs_a_shellless_pod(
    cluster: Cluster, shellless: str, server_minor: int
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kuber_exec_cli",
            "debug",
            "--kubeconfig",
            cluster.kubeconfig("admin"),
            "--project",
            "kx-target",
            "--workspace-uid",
            WS_MAIN,
            "--image",
            cluster.image,
            "--image-pull-policy",
            "Never",
            NAME,
            "--",
            "sh",
            "-c",
            "ps -o args | grep '^/app$'; exit 3",
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if server_minor < 23:
        assert done.returncode == 125
        assert b"does not serve ephemeral containers" in done.stderr
        return
    assert (done.returncode, done.stdout) == (3, b"/app\n"), done.stderr
