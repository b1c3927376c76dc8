"""``kuber-exec attach``, ``logs`` and ``debug`` end to end: a separate process, a sandbox whose
containers run main processes (docs/debug.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread

from .clirun import run_cli


def cluster() -> Cluster:
    built = Cluster()
    specs: dict[str, dict[str, Any]] = {
        "reader": {"command": ("sh", "-c", "read l; echo got-$l"), "stdin": True},
        "plain": {"command": ("sh", "-c", "echo hello; echo world; exec sleep 600")},
        "distroless": {"command": ("sleep", "600"), "shell": False},
    }
    for name, spec in specs.items():
        built.add_deployment(
            "demo", name, workspace_uid="demo-uid", pods=[PodSpec(name=f"{name}-1", **spec)]
        )
    return built


@pytest.fixture(scope="module")
def served() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(cluster()) as running:
        yield running


def cli(
    sandbox: Sandbox, command: str, *args: str, stdin: bytes | None = None
) -> tuple[int, bytes, str]:
    done = run_cli(
        command,
        "--kubeconfig",
        str(sandbox.kubeconfig_path),
        "--project",
        "demo",
        "--workspace-uid",
        "demo-uid",
        *args,
        stdin=stdin,
    )
    return done.returncode, done.stdout, done.stderr.decode()


def test_logs_tail_since_and_follow(served: Sandbox) -> None:
    assert cli(served, "logs", "--tail", "1", "plain") == (0, b"world\n", "")
    code, out, _ = cli(served, "logs", "--since", "1h", "--timestamps", "plain")
    assert code == 0
    assert [line.split(b" ", 1)[1] for line in out.splitlines()] == [b"hello", b"world"]
    code, _, err = cli(served, "logs", "--since", "soon", "plain")
    assert code == 125
    assert "kuber-exec: EXEC_INVALID: --since soon: not a duration" in err


def test_attach_with_stdin_then_the_process_ends(served: Sandbox) -> None:
    code, out, err = cli(served, "attach", "-i", "reader", stdin=b"x\n")
    assert (code, out, err) == (0, b"got-x\n", "")


def test_attach_refuses_stdin_the_container_lacks(served: Sandbox) -> None:
    code, _, err = cli(served, "attach", "-i", "plain")
    assert code == 125
    assert "EXEC_INVALID: container app of pod demo/plain-1 was not created with stdin" in err
    code, _, err = cli(served, "attach", "plain", "--", "sh")
    assert code == 125
    assert "attach takes no command" in err


def test_debug_runs_a_command_in_a_shellless_pod(served: Sandbox) -> None:
    code, out, err = cli(
        served,
        "debug",
        "--image",
        "busybox",
        "--env",
        "WHO=dbg",
        "distroless",
        "--",
        "sh",
        "-c",
        "echo from-$WHO; exit 4",
    )
    assert (code, out) == (4, b"from-dbg\n"), err
    assert "kuber-exec: debugging pod distroless-1 with container debugger-" in err
    # Its states as they came: running, or (a quick command) already terminated when seen.
    assert (
        "kuber-exec: debug container: running" in err
        or "kuber-exec: debug container: terminated: Error (exit code 4)" in err
    )


def test_debug_usage_and_refusals(served: Sandbox) -> None:
    code, _, err = cli(served, "debug", "distroless")
    assert code == 125
    assert "the following arguments are required: --image" in err
    code, _, err = cli(
        served,
        "debug",
        "--image",
        "example.invalid/x",
        "--image-pull-policy",
        "Never",
        "distroless",
    )
    assert code == 125
    assert "EXEC_FAILED: debug container debugger-" in err
    assert "ErrImageNeverPull" in err
    code, _, err = cli(served, "debug", "--image", "busybox", "--profile", "root", "distroless")
    assert code == 125
    assert "invalid choice: 'root'" in err


def test_the_commands_are_listed() -> None:
    done = run_cli("--help")
    text = done.stdout.decode()
    for command in ("attach", "logs", "debug"):
        assert f"    {command} " in text
    done = run_cli("logs", "--help")
    assert done.returncode == 0
    assert b"--follow" in done.stdout
