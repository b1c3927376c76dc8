"""tests/web: the service's audit events and limits (both runtimes) and the browser terminal.

The sandbox runs the demo cluster (namespace ``demo``: Deployment ``web`` of workspace
``demo-uid``, Deployment ``other`` of ``other-uid``) on trio in a background thread.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kuber_exec_anyio import ExecRequest, Workspace
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread

DEMO = Workspace(project="demo", uid="demo-uid")
WEB_PACKAGE = Path(__file__).resolve().parents[2] / "src" / "kuber_exec_web"


@pytest.fixture(scope="session", autouse=True)
def _xterm_installed() -> None:
    """xterm.js and asciinema-player in src/kuber_exec_web/node_modules: ``npm ci`` from the
    lockfile when missing (as ``make`` does), so a fresh clone's test run has what the app
    serves."""
    modules = WEB_PACKAGE / "node_modules"
    player = modules / "asciinema-player" / "dist" / "bundle" / "asciinema-player.min.js"
    if (modules / "@xterm" / "xterm" / "lib" / "xterm.js").is_file() and player.is_file():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(
            "npm is needed to install xterm.js for the browser terminal (apt-get install npm)"
        )
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=WEB_PACKAGE,
        check=True,
        timeout=300,
    )


def run(*command: str, deployment: str = "web") -> ExecRequest:
    """A request of the demo workspace."""
    return ExecRequest(workspace=DEMO, deployment=deployment, command=list(command))


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running


@asynccontextmanager
async def service_for(adapter: ModuleType, sandbox: Sandbox, **options: Any) -> AsyncIterator[Any]:
    """The adapter's ``ExecService`` on ``sandbox``, with ``options`` (audit, session_limits)."""
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        yield adapter.ExecService(backend, **options)
