"""kubectl as the reference: for the same pod and command, the same output and exit status.

The machine's kubectl is 1.32. On a current server it speaks v5 over WebSocket, as kuber-exec
does; on 1.20 it offers v5 only, is refused, and falls back to SPDY, and may print a version-skew
warning on its stderr, which is kubectl's own line, not the command's."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest

from .kube import WS_MAIN, Cluster, kubectl

pytestmark = pytest.mark.anyio

SCRIPTS = [
    "echo hello",
    "printf 'no newline'; printf 'err' >&2",
    "echo out; echo err >&2; exit 3",
    "seq 1 20000",
    "head -c 300000 /dev/zero | tr '\\000' 'z'; echo; exit 42",
    "printf '\\000\\001\\377\\r\\n'",
    "kill -KILL $$",
]
# kubectl's own stderr lines (not from the command): client-go's klog warnings, and kubectl's
# report of a non-zero exit ("command terminated with exit code N"), always at the end.
_KUBECTL_NOISE = re.compile(
    rb"^(?:[WEI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\n]*\n)+"
    rb"|command terminated with exit code \d+\n\Z",
    re.MULTILINE,
)


@pytest.mark.parametrize("script", SCRIPTS)
async def test_kubectl_and_kuber_exec_agree(
    adapter: ModuleType, cluster: Cluster, workloads: Any, admin_service: Any, script: str
) -> None:
    request = adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=["sh", "-c", script],
        container=None,
    )
    ours = await admin_service.execute(request)
    theirs = kubectl(
        cluster,
        "exec",
        "-n",
        cluster.main_ns,
        ours.target.pod,
        "-c",
        ours.target.container,
        "--",
        "sh",
        "-c",
        script,
        check=False,
    )
    assert ours.stdout == theirs.stdout
    assert ours.stderr == _KUBECTL_NOISE.sub(b"", theirs.stderr)
    assert ours.exit_code == theirs.returncode
