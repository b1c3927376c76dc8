"""A burst of sessions on one backend all open: queued work waits, it does not fail on a pool
deadline (issue 11, item 6). Count-based: no timing assertion (benchmarks/load.py measures)."""

from __future__ import annotations

import collections
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from kuber_exec_core import ExecError, ExecRequest, Workspace
from support import open_fds

pytestmark = pytest.mark.anyio

SESSIONS = 1000
REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=["sleep", "600"]
)


@pytest.fixture(scope="module")
def busy_sandbox_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A sandbox in a process of its own (its thousand sockets, pipes and pods are not ours)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 8 * SESSIONS
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.fail(f"RLIMIT_NOFILE's hard limit {hard} is below the {needed} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    directory = tmp_path_factory.mktemp("load")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kuber_exec_sandbox",
            "--kubeconfig-out",
            str(Path(directory) / "kubeconfig"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("kuber-exec sandbox API server: "), first
        yield first.split(": ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=120)
        assert process.stdout is not None
        process.stdout.close()


async def test_a_thousand_concurrent_sessions_on_one_backend_all_open(
    adapter: Any, busy_sandbox_url: str
) -> None:
    baseline_fds = open_fds()
    opened = 0
    failures: collections.Counter[str] = collections.Counter()
    everyone = anyio.Event()
    release = anyio.Event()
    config = adapter.ClusterConfig(busy_sandbox_url)
    async with adapter.KubernetesBackend(config) as backend:
        service = adapter.ExecService(backend)

        def settled() -> None:
            if opened + sum(failures.values()) == SESSIONS:
                everyone.set()

        async def one() -> None:
            nonlocal opened
            try:
                async with service.open_interactive(REQUEST, tty=False, stdin=False):
                    opened += 1
                    settled()
                    await release.wait()
            except ExecError as error:
                failures[f"{error.code.value}: {error.message[:100]}"] += 1
                settled()

        async with anyio.create_task_group() as tasks:
            for _ in range(SESSIONS):
                tasks.start_soon(one)
            with anyio.fail_after(600):  # a hang guard, not a timing assertion
                await everyone.wait()
            release.set()
    assert dict(failures) == {}
    assert opened == SESSIONS
    assert open_fds() <= baseline_fds + 5  # every socket closed again
