"""Exec through the whole real path: apiserver -> kubelet -> containerd -> runc, on
v5.channel.k8s.io (a current release) or v4.channel.k8s.io (1.20, which offers no v5; what it
cannot do, such as closing stdin, is in test_current.py)."""

from __future__ import annotations

import hashlib
from types import ModuleType
from typing import Any

import pytest

from .kube import WS_MAIN

pytestmark = pytest.mark.anyio


def shell(adapter: ModuleType, script: str, *, container: str | None = None) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=["sh", "-c", script],
        container=container,
    )


@pytest.mark.parametrize(("script", "code"), [("true", 0), ("exit 3", 3), ("kill -KILL $$", 137)])
async def test_exit_codes(
    adapter: ModuleType, workloads: Any, admin_service: Any, script: str, code: int
) -> None:
    result = await admin_service.execute(shell(adapter, script))
    assert result.exit_code == code
    assert result.target.pod.startswith("shell-")


async def test_stdout_and_stderr_are_separate(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    result = await admin_service.execute(
        shell(adapter, "echo out; echo err >&2; echo out2; echo err2 >&2; exit 5")
    )
    assert result.stdout == b"out\nout2\n"
    assert result.stderr == b"err\nerr2\n"
    assert result.exit_code == 5


async def test_every_byte_value_arrives_intact(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    # busybox printf with octal escapes: bytes 0..255, twice, on stdout and reversed on stderr.
    escapes = "".join(f"\\{b:03o}" for b in range(256))
    reversed_escapes = "".join(f"\\{b:03o}" for b in reversed(range(256)))
    result = await admin_service.execute(
        shell(adapter, f"printf '{escapes}{escapes}'; printf '{reversed_escapes}' >&2")
    )
    assert result.stdout == bytes(range(256)) * 2
    assert result.stderr == bytes(reversed(range(256)))
    assert result.exit_code == 0


async def test_fifty_megabytes_arrive_intact(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    size = 50 * 1024 * 1024
    # Random bytes; the pod's own sha256sum (on stderr) checks what we received.
    script = (
        f"head -c {size} /dev/urandom > /tmp/kx-50m && sha256sum /tmp/kx-50m >&2 && "
        "cat /tmp/kx-50m; rm -f /tmp/kx-50m"
    )
    limits = adapter.ExecLimits(max_output_cap_bytes=64 << 20, default_output_cap_bytes=64 << 20)
    service = adapter.ExecService(admin_service.backend, limits)
    result = await service.execute(shell(adapter, script))
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout) == size
    assert result.stderr.split()[0].decode() == hashlib.sha256(result.stdout).hexdigest()


async def test_output_caps(adapter: ModuleType, workloads: Any, admin_service: Any) -> None:
    with pytest.raises(adapter.ExecOutputLimitError) as caught:
        await admin_service.execute(shell(adapter, "head -c 200000 /dev/zero"), stdout_cap=100_000)
    assert caught.value.code is adapter.ExecErrorCode.OUTPUT_LIMIT
    with pytest.raises(adapter.ExecOutputLimitError):
        await admin_service.execute(shell(adapter, "head -c 5000 /dev/zero >&2"), stderr_cap=1000)
    # At the cap exactly is fine.
    result = await admin_service.execute(shell(adapter, "head -c 1000 /dev/zero"), stdout_cap=1000)
    assert result.stdout == bytes(1000)


async def test_command_not_found_is_a_failure_with_the_runtimes_message(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    request = adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=["/no/such/command-kx"],
        container=None,
    )
    with pytest.raises(adapter.ExecError) as caught:
        await admin_service.execute(request)
    error = caught.value
    assert error.code is adapter.ExecErrorCode.FAILED
    # containerd/runc's words, through the kubelet and the apiserver's Status on channel 3.
    assert "/no/such/command-kx" in error.message
    assert "no such file or directory" in error.message
