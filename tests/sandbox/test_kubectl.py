"""kubectl (1.30+, v5.channel.k8s.io over WebSocket) against the sandbox.

kubectl runs as a subprocess with the sandbox's kubeconfig and its own discovery cache directory.
Success cases also assert an empty stderr: no warning, no SPDY fallback noise. The one line
removed first is client-go's own race (1.30-1.32: its reader starts before its streams exist, and
it logs "Unknown stream id 1, discarding message" for the server's initial empty message); stdout
still proves that no data was lost.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import trio

from kuber_exec_sandbox import Sandbox
from support.sandbox import ready_web_pod

pytestmark = pytest.mark.kubectl


_CLIENT_GO_STREAM_RACE = re.compile(rb"^.*Unknown stream id 1, discarding message\n", re.MULTILINE)


async def run_kubectl(
    kubectl: str, sandbox: Sandbox, cache: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        result = await trio.run_process(
            [
                kubectl,
                "--kubeconfig",
                str(sandbox.kubeconfig_path),
                "--cache-dir",
                str(cache),
                *args,
            ],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    result.stderr = _CLIENT_GO_STREAM_RACE.sub(b"", result.stderr)
    return result


@pytest.mark.trio
async def test_exec_pod_echo(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl, sandbox, tmp_path, "exec", pod, "--", "echo", "hello", "world"
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"hello world\n", b"")


@pytest.mark.trio
@pytest.mark.parametrize("code", [0, 1, 3, 42])
async def test_exec_exit_codes(kubectl: str, sandbox: Sandbox, tmp_path: Path, code: int) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl,
        sandbox,
        tmp_path,
        "exec",
        pod,
        "--",
        "sh",
        "-c",
        f"echo out; echo err >&2; exit {code}",
    )
    assert result.returncode == code
    assert result.stdout == b"out\n"
    expected_err = b"err\n" + (
        f"command terminated with exit code {code}\n".encode() if code else b""
    )
    assert result.stderr == expected_err


@pytest.mark.trio
async def test_exec_stdin_reaches_eof(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl,
        sandbox,
        tmp_path,
        "exec",
        "-i",
        pod,
        "--",
        "sh",
        "-c",
        "cat; echo END",
        stdin=b"data\n",
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"data\nEND\n", b"")


@pytest.mark.trio
async def test_exec_deployment_picks_the_ready_pod(
    kubectl: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    result = await run_kubectl(
        kubectl, sandbox, tmp_path, "exec", "deploy/web", "--", "sh", "-c", "echo $HOSTNAME"
    )
    assert result.stderr == b""
    assert result.stdout.decode().strip() == ready_web_pod(sandbox.cluster)


@pytest.mark.trio
async def test_exec_missing_container(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(kubectl, sandbox, tmp_path, "exec", pod, "-c", "nope", "--", "true")
    assert result.returncode == 1
    assert result.stderr == (
        f"Error from server (BadRequest): container nope is not valid for pod {pod}\n".encode()
    )


@pytest.mark.trio
async def test_exec_missing_pod(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    result = await run_kubectl(kubectl, sandbox, tmp_path, "exec", "no-such-pod", "--", "true")
    assert result.returncode == 1
    assert result.stderr == b'Error from server (NotFound): pods "no-such-pod" not found\n'


@pytest.mark.trio
async def test_exec_missing_executable(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(kubectl, sandbox, tmp_path, "exec", pod, "--", "no-such-program")
    assert result.returncode == 1
    assert b"Internal error occurred" in result.stderr
    assert b'"no-such-program": executable file not found' in result.stderr


@pytest.mark.trio
async def test_get_pods_lists_the_demo(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    result = await run_kubectl(kubectl, sandbox, tmp_path, "get", "pods", "-l", "app=web")
    assert result.returncode == 0
    assert result.stderr == b""
    lines = result.stdout.decode().splitlines()
    assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
    web = sandbox.cluster.deployment("demo", "web")
    assert web is not None
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(
        p.name for p in sandbox.cluster.pods_of(web)
    )
