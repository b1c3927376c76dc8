"""Pod processes die with the sandbox however it ends, SIGKILL included (issue 11, item 12)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

import kuber_exec_trio
from kuber_exec_core import ExecRequest, Stdout, Workspace

REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"),
    deployment="web",
    # The pod process prints its pid, then a child of its own (a grandchild of the sandbox)
    # prints its pid too; both must die.
    command=["sh", "-c", "echo $$; sh -c 'echo $$; exec sleep 300' & wait"],
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper that never comes counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("tty", [False, True], ids=["pipes", "tty"])
def test_pod_processes_die_with_a_sigkilled_sandbox(tmp_path: Path, tty: bool) -> None:
    sandbox = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kuber_exec_sandbox",
            "--kubeconfig-out",
            str(tmp_path / "kubeconfig"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    pids: list[int] = []
    try:
        assert sandbox.stdout is not None
        first = sandbox.stdout.readline()
        assert first.startswith("kuber-exec sandbox API server: "), first
        url = first.split(": ", 1)[1].strip()

        async def main() -> list[int]:
            # Hold the session open while the sandbox is killed.
            config = kuber_exec_trio.ClusterConfig(url)
            async with kuber_exec_trio.KubernetesBackend(config, ping_interval=None) as backend:
                service = kuber_exec_trio.ExecService(backend)
                output = b""
                with trio.fail_after(30):
                    async with service.open_interactive(REQUEST, tty=tty, stdin=False) as session:
                        async for frame in session:
                            assert isinstance(frame, Stdout), frame
                            output += frame.data
                            if len(output.split()) >= 2:
                                break
                        found = [int(word) for word in output.split()]
                        assert all(alive(pid) for pid in found)
                        os.kill(sandbox.pid, signal.SIGKILL)
                        sandbox.wait(timeout=30)
                        return found
            raise AssertionError("unreachable")

        pids = trio.run(main)
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
        sandbox.wait(timeout=30)
        assert sandbox.stdout is not None
        sandbox.stdout.close()
    assert len(pids) == 2
    # The watchdog (another process) kills them: poll the condition, with a deadline.
    end = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.01)
    survivors = [pid for pid in pids if alive(pid)]
    for pid in survivors:  # do not leave them running if the test fails
        os.kill(pid, signal.SIGKILL)
    assert survivors == []
