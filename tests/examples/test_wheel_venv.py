"""What a new user installs: the wheel built from this tree, in a fresh virtual environment.

``scripts/wheel_venv.py`` builds the wheel (``pip wheel . --no-deps``; the build backend bundles
xterm.js from the npm lockfile), makes a venv with ``python -m venv`` and installs the wheel with
its extras and ``examples/platform-tests`` from the configured package index. Then the example
project's own tests (trio and asyncio, on kuber-exec's pytest plugin) run with the venv's pytest.
The venv (``build/wheel-venv``) is kept for the browser tier, which has no network and opens the
terminal the wheel serves (tests/web/test_wheel_browser.py). Slow (a fresh venv): deselect it
locally with ``-m 'not wheel'``.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "wheel_venv.py"
EXAMPLE = ROOT / "examples" / "platform-tests"
VENV_DIR = ROOT / "build" / "wheel-venv"

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def venv() -> Path:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(VENV_DIR)],
        capture_output=True,
        text=True,
        timeout=1100,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_wheel_carries_the_browser_terminal(venv: Path) -> None:
    (wheel,) = (VENV_DIR / "dist").glob("kuber_exec-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    web = "kuber_exec_web/"
    assert {
        f"{web}static/terminal.js",
        f"{web}static/terminal.css",
        f"{web}node_modules/@xterm/xterm/lib/xterm.js",
        f"{web}node_modules/@xterm/xterm/css/xterm.css",
        f"{web}node_modules/@xterm/xterm/LICENSE",
        f"{web}node_modules/@xterm/addon-fit/lib/addon-fit.js",
        f"{web}node_modules/@xterm/addon-fit/LICENSE",
        f"{web}static/replay.js",
        f"{web}node_modules/asciinema-player/dist/bundle/asciinema-player.min.js",
        f"{web}node_modules/asciinema-player/dist/bundle/asciinema-player.css",
        f"{web}node_modules/asciinema-player/LICENSE",
        "kuber_exec_pytest/plugin.py",
    } <= names
    # Only what the app serves: no TypeScript sources, no other npm packages.
    assert not [name for name in names if "/node_modules/" in name and "/src/" in name]
    packages = set()
    for name in names:
        if "/node_modules/" in name:
            parts = name.split("/node_modules/")[1].split("/")
            packages.add("/".join(parts[:2]) if parts[0].startswith("@") else parts[0])
    assert packages == {"@xterm/xterm", "@xterm/addon-fit", "asciinema-player"}


def test_the_venv_runs_the_installed_wheel_not_this_tree(venv: Path) -> None:
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import kuber_exec_web; print(kuber_exec_web.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=venv,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith(str(venv / "lib")), done.stdout


def test_the_example_projects_tests_pass_on_trio_and_asyncio(venv: Path) -> None:
    done = subprocess.run(
        [str(venv / "bin" / "pytest"), "-p", "no:cacheprovider", "-v"],
        capture_output=True,
        text=True,
        cwd=EXAMPLE,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 passed" in done.stdout, done.stdout
    assert "test_jobs_trio.py::test_a_job_succeeds PASSED" in done.stdout
    assert "test_jobs_asyncio.py::test_a_job_succeeds PASSED" in done.stdout
