"""tests/web: the service's audit events and limits (both runtimes) and the browser terminal.

The sandbox runs the demo cluster (namespace ``demo``: Deployment ``web`` of workspace
``demo-uid``, Deployment ``other`` of ``other-uid``) on trio in a background thread.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread

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


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running
