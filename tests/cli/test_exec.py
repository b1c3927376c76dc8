"""``kuber-exec exec`` driven as a subprocess, against the in-process sandbox (``--sandbox``) and
against a sandbox in this test process reached through its kubeconfig (``--kubeconfig``)."""

from __future__ import annotations

import hashlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuber_exec_core import Subprotocol
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread

from .clirun import KUBER_EXEC, RUN_TIMEOUT_SECONDS, cli_env, run_cli, spawn_cli

ERROR_STATUS = 125
ALL_BYTES = bytes(range(256))


def demo_pod_names() -> tuple[str, str]:
    """(the ready pod, the not-ready pod) of the demo Deployment ``web``."""
    cluster = demo_cluster()
    web = cluster.deployment("demo", "web")
    assert web is not None
    pods = cluster.pods_of(web)
    ready = [pod.name for pod in pods if pod.ready]
    not_ready = [pod.name for pod in pods if not pod.ready]
    assert len(ready) == 1
    assert len(not_ready) == 1
    return ready[0], not_ready[0]


def error_line(stderr: bytes) -> str:
    """The last stderr line, where kuber-exec's own error goes."""
    return stderr.decode().rstrip("\n").rsplit("\n", 1)[-1]


def via_kubeconfig(sandbox: Sandbox, *args: str) -> tuple[str, ...]:
    return ("exec", "--kubeconfig", str(sandbox.kubeconfig_path), *args)


def read_until(fd: int, expected: bytes, seen: bytearray, deadline: float) -> None:
    """Read ``fd`` into ``seen`` until ``expected`` is in it; fail at ``deadline``."""
    while expected not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{expected!r} never arrived; got {bytes(seen)!r}"
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 65536)
            assert chunk, f"end of output before {expected!r}; got {bytes(seen)!r}"
            seen += chunk


# -- the happy path -----------------------------------------------------------------------------


def test_sandbox_runs_the_command_in_the_ready_pod() -> None:
    ready, _ = demo_pod_names()
    done = run_cli("exec", "--sandbox", "web", "--", "sh", "-c", "echo hello from $HOSTNAME")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"hello from {ready}\n".encode()
    assert done.stderr == b""


def test_kubeconfig_reaches_a_running_sandbox(sandbox: Sandbox) -> None:
    ready, _ = demo_pod_names()
    args = via_kubeconfig(sandbox, "--project", "demo", "--workspace-uid", "demo-uid", "web")
    done = run_cli(*args, "--", "sh", "-c", "echo $HOSTNAME")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{ready}\n".encode()


@pytest.mark.parametrize("code", [0, 1, 3, 42, 126, 255])
def test_the_remote_exit_code_is_the_exit_status(code: int) -> None:
    done = run_cli("exec", "--sandbox", "web", "--", "sh", "-c", f"exit {code}")
    assert done.returncode == code
    assert done.stderr == b""


def test_stdout_and_stderr_stay_apart() -> None:
    done = run_cli("exec", "--sandbox", "web", "--", "sh", "-c", "printf out; printf err >&2")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"out", b"err")


def test_output_is_binary_safe() -> None:
    # Every byte value, many times over, on both streams: no decoding anywhere on the way.
    script = (
        "import sys; data = bytes(range(256)) * 300; "
        "sys.stdout.buffer.write(data); sys.stderr.buffer.write(data[::-1])"
    )
    done = run_cli("exec", "--sandbox", "web", "--", sys.executable, "-c", script)
    assert done.returncode == 0
    assert done.stdout == ALL_BYTES * 300
    assert done.stderr == (ALL_BYTES * 300)[::-1]


def test_output_streams_while_the_command_runs() -> None:
    # The command prints, then waits for a line that the test only sends after seeing the
    # print: if output were held until the end, this would never finish.
    script = 'echo first; read line; echo "got $line"'
    with spawn_cli("exec", "--sandbox", "-i", "web", "--", "sh", "-c", script) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        seen = bytearray()
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        read_until(process.stdout.fileno(), b"first\n", seen, deadline)
        process.stdin.write(b"second\n")
        process.stdin.close()
        read_until(process.stdout.fileno(), b"got second\n", seen, deadline)
        assert process.wait(RUN_TIMEOUT_SECONDS) == 0


# -- stdin --------------------------------------------------------------------------------------


def test_piped_stdin_reaches_the_command_and_ends_with_eof() -> None:
    # Larger than one 32 KiB stdin message, every byte value: chunked and binary-safe; `cat`
    # exits only if the end of input reached it.
    data = ALL_BYTES * 1000
    done = run_cli("exec", "--sandbox", "-i", "web", "--", "cat", stdin=data)
    assert done.returncode == 0, done.stderr
    assert done.stdout == data


@pytest.mark.parametrize("how", ["file", "pipe"])
def test_megabytes_of_stdin_from_a_file_or_a_pipe_arrive_whole(how: str, tmp_path: Path) -> None:
    # A regular file is read in place, a pipe through batches of ready reads: both hand on
    # every byte in order and then the end of input (not a multiple of a read's 64 KiB).
    data = os.urandom(3 * 1024 * 1024 + 12_345)
    source = tmp_path / "stdin.bin"
    source.write_bytes(data)
    command = [*KUBER_EXEC, "exec", "--sandbox", "-i", "web", "--", "sha256sum"]
    with open(source, "rb") as file:
        pipe = subprocess.PIPE
        cat = None if how == "file" else subprocess.Popen(["cat"], stdin=file, stdout=pipe)
        stdin = file if cat is None else cat.stdout
        done = subprocess.run(command, stdin=stdin, capture_output=True, env=cli_env(),
                              timeout=RUN_TIMEOUT_SECONDS, check=False)  # fmt: skip
        if cat is not None:
            assert cat.stdout is not None
            cat.stdout.close()
            assert cat.wait(RUN_TIMEOUT_SECONDS) == 0
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_a_command_that_ends_while_stdin_stays_open_and_quiet_ends_kuber_exec() -> None:
    # `-i` from a terminal or pipe that nobody types into: the read blocked on it must hold
    # up neither the session's end nor the process's exit (a worker thread that the interpreter
    # joins as it exits would, until the next key).
    with spawn_cli("exec", "--sandbox", "-i", "web", "--", "sh", "-c", "exit 4") as process:
        assert process.stdin is not None
        assert process.wait(RUN_TIMEOUT_SECONDS) == 4
        process.stdin.close()


def test_empty_piped_stdin_is_an_immediate_eof() -> None:
    done = run_cli("exec", "--sandbox", "-i", "web", "--", "wc", "-c", stdin=b"")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"0"


def test_without_i_the_command_gets_no_stdin() -> None:
    # Like kubectl: our stdin is not forwarded, and the command reads end of input at once.
    done = run_cli("exec", "--sandbox", "web", "--", "cat", stdin=b"not forwarded")
    assert (done.returncode, done.stdout) == (0, b"")


def test_i_on_a_server_without_v5_fails_clearly(old_sandbox: Sandbox) -> None:
    args = via_kubeconfig(old_sandbox, "--project", "demo", "--workspace-uid", "demo-uid", "-i")
    done = run_cli(*args, "web", "--", "cat", stdin=b"data")
    assert done.returncode == ERROR_STATUS
    line = error_line(done.stderr)
    assert line.startswith("kuber-exec: EXEC_INVALID: -i needs the v5.channel.k8s.io subprotocol")
    assert "v4.channel.k8s.io" in line


def test_a_server_without_v5_still_runs_commands_without_i(old_sandbox: Sandbox) -> None:
    args = via_kubeconfig(old_sandbox, "--project", "demo", "--workspace-uid", "demo-uid")
    done = run_cli(*args, "web", "--", "sh", "-c", "echo v4; exit 5")
    assert (done.returncode, done.stdout, done.stderr) == (5, b"v4\n", b"")


def test_it_with_piped_stdin_is_refused() -> None:
    done = run_cli("exec", "--sandbox", "-it", "web", "--", "sh", stdin=b"echo hi\n")
    assert done.returncode == ERROR_STATUS
    assert error_line(done.stderr).startswith("kuber-exec: EXEC_INVALID: -it needs a terminal")


# -- kuber-exec's own errors --------------------------------------------------------------------


def test_another_workspaces_deployment_is_forbidden() -> None:
    done = run_cli("exec", "--sandbox", "other", "--", "echo", "should not run")
    assert done.returncode == ERROR_STATUS
    assert done.stdout == b""
    assert done.stderr == (
        b"kuber-exec: EXEC_TARGET_FORBIDDEN: Deployment other is not owned by this workspace\n"
    )


def test_the_workspace_uid_decides_ownership(sandbox: Sandbox) -> None:
    for uid, deployment, expected in (
        ("other-uid", "other", 0),
        ("other-uid", "web", ERROR_STATUS),
    ):
        args = via_kubeconfig(sandbox, "--project", "demo", "--workspace-uid", uid, deployment)
        done = run_cli(*args, "--", "true")
        assert done.returncode == expected, (uid, deployment, done.stderr)
    assert error_line(done.stderr).startswith("kuber-exec: EXEC_TARGET_FORBIDDEN: ")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("nope",), "EXEC_TARGET_NOT_FOUND"),
        (("-c", "sidecar", "web"), "EXEC_TARGET_NOT_FOUND"),
        (("Not_A_Name",), "EXEC_INVALID"),
        (("--project", "Bad_Project", "web"), "EXEC_INVALID"),
    ],
)
def test_target_errors(args: tuple[str, ...], code: str) -> None:
    done = run_cli("exec", "--sandbox", *args, "--", "true")
    assert done.returncode == ERROR_STATUS
    assert error_line(done.stderr).startswith(f"kuber-exec: {code}: ")


def test_a_command_that_cannot_run_is_a_kuber_exec_error() -> None:
    done = run_cli("exec", "--sandbox", "web", "--", "kuber-exec-no-such-command")
    assert done.returncode == ERROR_STATUS
    assert error_line(done.stderr).startswith("kuber-exec: EXEC_FAILED: ")


def test_stdout_cap_writes_up_to_the_cap_then_fails() -> None:
    done = run_cli("exec", "--sandbox", "--stdout-cap", "5", "web", "--", "printf", "0123456789")
    assert done.returncode == ERROR_STATUS
    assert done.stdout == b"01234"
    assert error_line(done.stderr) == (
        "kuber-exec: EXEC_OUTPUT_LIMIT: stdout exceeded the 5 byte output limit"
    )


def test_stderr_cap_and_output_within_the_caps() -> None:
    script = "printf 0123456789 >&2"
    over = run_cli("exec", "--sandbox", "--stderr-cap", "4", "web", "--", "sh", "-c", script)
    assert over.returncode == ERROR_STATUS
    assert over.stderr.startswith(b"0123kuber-exec: EXEC_OUTPUT_LIMIT: stderr exceeded the 4 ")
    exact = run_cli("exec", "--sandbox", "--stderr-cap", "10", "web", "--", "sh", "-c", script)
    assert (exact.returncode, exact.stderr) == (0, b"0123456789")


def test_caps_are_checked_before_anything_is_contacted() -> None:
    # The kubeconfig does not exist: the cap error comes first.
    args = ("exec", "--kubeconfig", "/nonexistent/kubeconfig", "--project", "demo")
    done = run_cli(*args, "--workspace-uid", "u", "--stdout-cap", "0", "web", "--", "true")
    assert done.returncode == ERROR_STATUS
    assert error_line(done.stderr) == (
        "kuber-exec: EXEC_INVALID: --stdout-cap must be between 1 and 1048576 bytes"
    )


def test_kubeconfig_errors_are_reported(sandbox: Sandbox) -> None:
    missing = run_cli(
        "exec", "--kubeconfig", "/nonexistent/kubeconfig", "--project", "demo",
        "--workspace-uid", "demo-uid", "web", "--", "true",
    )  # fmt: skip
    assert missing.returncode == ERROR_STATUS
    assert error_line(missing.stderr).startswith("kuber-exec: EXEC_FAILED: Loading the kubeconfig")
    args = via_kubeconfig(sandbox, "--context", "no-such-context", "--project", "demo")
    wrong_context = run_cli(*args, "--workspace-uid", "demo-uid", "web", "--", "true")
    assert wrong_context.returncode == ERROR_STATUS
    assert error_line(wrong_context.stderr).startswith("kuber-exec: EXEC_FAILED: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("exec", "--sandbox", "web"), "the command goes after --"),
        (("exec", "--sandbox", "web", "ls"), "the command goes after --"),
        (("exec", "web", "--", "ls"), "--project and --workspace-uid required"),
        (("exec", "--project", "demo", "web", "--", "ls"), "--workspace-uid required"),
        (("exec", "--sandbox", "--context", "x", "web", "--", "ls"), "--sandbox cannot be"),
        (("exec", "--sandbox", "--stdout-cap", "lots", "web", "--", "ls"), "invalid int value"),
        ((), "choose a command"),
        (("frobnicate",), "invalid choice"),
        (("demo", "--", "ls"), "demo takes no command"),
    ],
)
def test_usage_errors(args: tuple[str, ...], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == ERROR_STATUS
    stderr = done.stderr.decode()
    assert stderr.startswith("usage: kuber-exec")
    assert error_line(done.stderr).startswith("kuber-exec: EXEC_INVALID: ")
    assert message in error_line(done.stderr)


def test_arguments_after_the_double_dash_belong_to_the_command() -> None:
    done = run_cli("exec", "--sandbox", "web", "--", "echo", "--help", "-i", "--", "--version")
    assert (done.returncode, done.stdout) == (0, b"--help -i -- --version\n")


def test_an_exec_through_a_kubeconfig_loads_no_trio_and_no_unused_feature(sandbox: Sandbox) -> None:
    # The command line runs on asyncio: trio and anyio's trio backend cost about 50 ms of every
    # start (docs/benchmarks.md). Only --sandbox, whose server runs on trio, loads it. Nor does
    # an exec load debug containers, recordings or the Lease slots it does not use.
    args = via_kubeconfig(sandbox, "--project", "demo", "--workspace-uid", "demo-uid", "web")
    script = (
        "import sys\nfrom kuber_exec_cli._main import main\n"
        f"status = main({[*args, '--', 'true']!r})\n"
        "print(status, *sorted(sys.modules), file=sys.stderr)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=cli_env(),
        check=False,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    status, *loaded = run.stderr.split()
    assert status == "0", run.stderr
    assert "kuber_exec_asyncio" in loaded
    trio = [m for m in loaded if m == "trio" or m.startswith(("trio.", "anyio._backends._trio"))]
    assert trio == []
    unused = (
        *("kuber_exec_core.debug", "kuber_exec_core.asciicast", "kuber_exec_core._lease_slots"),
        *("kuber_exec_anyio._audit._recording", "kuber_exec_anyio._kubernetes._lease_slots"),
    )
    assert [m for m in loaded if m.startswith(unused)] == []


# -- stopping -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_ends_the_session(signum: signal.Signals, status: int) -> None:
    script = "echo started; sleep 60"
    with spawn_cli("exec", "--sandbox", "web", "--", "sh", "-c", script) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        read_until(process.stdout.fileno(), b"started\n", bytearray(), deadline)
        process.send_signal(signum)
        assert process.wait(RUN_TIMEOUT_SECONDS) == status
        stderr = process.stderr.read()
    assert error_line(stderr) == (
        f"kuber-exec: EXEC_ABORTED: interrupted by {signum.name}; the remote command was not "
        "signalled and may still be running"
    )


def test_a_closed_stdout_ends_the_session() -> None:
    # `kuber-exec exec ... -- yes | head -1`: the reader goes away, kuber-exec stops quietly.
    with spawn_cli("exec", "--sandbox", "web", "--", "yes") as process:
        assert process.stdout is not None
        assert process.stderr is not None
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        read_until(process.stdout.fileno(), b"y\n", bytearray(), deadline)
        process.stdout.close()
        assert process.wait(RUN_TIMEOUT_SECONDS) == 141
        assert process.stderr.read() == b""


# -- --subprotocol ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base64_only_sandbox() -> Iterator[Sandbox]:
    """A server (or proxy) that speaks only base64.channel.k8s.io."""
    with run_sandbox_in_thread(
        demo_cluster(), offer_v5=False, subprotocols=[Subprotocol.BASE64]
    ) as running:
        yield running


def test_subprotocol_reaches_a_server_that_speaks_nothing_else(
    base64_only_sandbox: Sandbox,
) -> None:
    args = via_kubeconfig(base64_only_sandbox, "--project", "demo", "--workspace-uid", "demo-uid")
    refused = run_cli(*args, "web", "--", "echo", "hi")
    assert refused.returncode == ERROR_STATUS
    assert "supports none of the offered exec subprotocols" in error_line(refused.stderr)
    done = run_cli(*args, "--subprotocol", "base64.channel.k8s.io", "web", "--", "echo", "hi")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"hi\n", b"")


def test_subprotocol_must_be_a_known_one() -> None:
    done = run_cli("exec", "--sandbox", "--subprotocol", "v6.channel.k8s.io", "web", "--", "true")
    assert done.returncode == ERROR_STATUS
    assert "invalid choice: 'v6.channel.k8s.io'" in done.stderr.decode()
