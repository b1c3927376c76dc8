"""The other ways in: ``--help``, ``--version``, ``demo``, ``sandbox`` and the console script."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import kuber_exec_core

from .clirun import KUBER_EXEC, RUN_TIMEOUT_SECONDS, cli_env, run_cli, skip_or_fail, spawn_cli


def test_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0
    assert done.stdout.decode() == f"kuber-exec {kuber_exec_core.__version__}\n"


def test_top_level_help_points_a_newcomer_somewhere() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    text = done.stdout.decode()
    for expected in ("exec", "sandbox", "demo", "kuber-exec demo", "exit status", "125"):
        assert expected in text


def test_exec_help_has_examples_and_exit_statuses() -> None:
    done = run_cli("exec", "--help")
    assert done.returncode == 0
    text = done.stdout.decode()
    for expected in (
        "kuber-exec exec --sandbox web -- sh -c 'echo hello from $HOSTNAME'",
        "--workspace-uid",
        "--kubeconfig",
        "-it",
        "0-255  the remote command's exit code",
        "125",
        "EXEC_TARGET_FORBIDDEN",
        "130",
    ):
        assert expected in text, expected


def test_demo_runs_the_whole_path_and_shows_the_refusal() -> None:
    started = time.monotonic()
    done = run_cli("demo")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    text = done.stdout.decode()
    assert re.search(r"^hello from web-\S+$", text, re.MULTILINE), text
    assert "[exit code 0]" in text
    assert "kuber-exec: EXEC_TARGET_FORBIDDEN: Deployment other is not owned" in text
    assert "subprotocol v5.channel.k8s.io" in text
    # "It finishes in seconds": generous for a loaded CI machine, far below a hang.
    assert elapsed < 30, elapsed


def test_sandbox_subcommand_serves_a_cluster_that_exec_reaches(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "sandbox.kubeconfig"
    with spawn_cli(
        "sandbox", "--kubeconfig-out", str(kubeconfig), stdin=subprocess.DEVNULL
    ) as sandbox:
        assert sandbox.stdout is not None
        # Ready once it says so: it prints the kubeconfig path, then "serving until Ctrl-C".
        lines: list[str] = []
        while not lines or not lines[-1].startswith("serving until"):
            line = sandbox.stdout.readline().decode()
            assert line, f"the sandbox ended early: {lines}"
            lines.append(line.rstrip("\n"))
        assert f"kubeconfig: {kubeconfig}" in lines
        args = ("--kubeconfig", str(kubeconfig), "--project", "demo", "--workspace-uid")
        done = run_cli("exec", *args, "demo-uid", "web", "--", "sh", "-c", "echo $HOSTNAME")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(b"web-")
        sandbox.send_signal(signal.SIGINT)
        assert sandbox.stderr is not None
        assert sandbox.wait(RUN_TIMEOUT_SECONDS) == 0, sandbox.stderr.read()


def test_sandbox_help_is_the_sandboxs_own() -> None:
    done = run_cli("sandbox", "--help")
    assert done.returncode == 0
    assert b"--kubeconfig-out" in done.stdout


def test_the_console_script() -> None:
    script = Path(sys.executable).with_name("kuber-exec")
    if not script.exists():
        skip_or_fail(f"no console script next to {sys.executable} (install the package)")
    done = subprocess.run(
        [str(script), "exec", "--sandbox", "web", "--", "echo", "via the script"],
        capture_output=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=cli_env(),
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, b"via the script\n")


def test_web_without_xterm_says_so_once_with_one_code(tmp_path: Path) -> None:
    env = {**cli_env(), "KUBER_EXEC_WEB_ASSETS": str(tmp_path)}
    done = subprocess.run(
        [*KUBER_EXEC, "web", "--sandbox", "--port", "0"],
        capture_output=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=env,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.startswith(
        f"kuber-exec web: EXEC_FAILED: xterm.js is not installed in {tmp_path}: ".encode()
    )
    assert done.stderr.count(b"EXEC_FAILED") == 1
