"""``kuber-exec cp`` end to end: a separate process, the in-process sandbox, local paths (the
sandbox's pods are local processes, so the "remote" side is a directory of the test's)."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

from .clirun import KUBER_EXEC, RUN_TIMEOUT_SECONDS, cli_env, run_cli


def make_tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(200_000))


def test_a_tree_goes_up_and_a_file_comes_down(tmp_path: Path) -> None:
    make_tree(tmp_path / "tree")
    done = run_cli("cp", "--sandbox", str(tmp_path / "tree"), f"web:{tmp_path}/remote")
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""  # not a terminal: no progress bar
    assert (tmp_path / "remote" / "a.txt").read_bytes() == b"alpha\n"
    (tmp_path / "down").mkdir()
    done = run_cli("cp", "--sandbox", f"web:{tmp_path}/remote/sub/b.bin", str(tmp_path / "down"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "down" / "b.bin").read_bytes() == (tmp_path / "tree/sub/b.bin").read_bytes()


def test_a_failed_copy_exits_1_with_its_problem(tmp_path: Path) -> None:
    done = run_cli("cp", "--sandbox", f"web:{tmp_path}/missing", str(tmp_path / "x"))
    assert done.returncode == 1
    assert done.stderr.decode().startswith("kuber-exec: COPY_NO_SUCH_PATH: ")
    (tmp_path / "exists").write_bytes(b"keep")
    (tmp_path / "remote").write_bytes(b"new")
    done = run_cli("cp", "--sandbox", f"web:{tmp_path}/remote", str(tmp_path / "exists"))
    assert done.returncode == 1
    assert b"COPY_LOCAL_PATH" in done.stderr
    assert (tmp_path / "exists").read_bytes() == b"keep"
    done = run_cli(
        "cp", "--sandbox", "--overwrite", f"web:{tmp_path}/remote", str(tmp_path / "exists")
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "exists").read_bytes() == b"new"


def test_targeting_and_usage_errors_exit_125(tmp_path: Path) -> None:
    done = run_cli("cp", "--sandbox", f"other:{tmp_path}", str(tmp_path / "x"))
    assert done.returncode == 125
    assert b"EXEC_TARGET_FORBIDDEN" in done.stderr
    for arguments in (["a", "b"], ["web:/a", "web:/b"], ["web:", "x"]):
        done = run_cli("cp", "--sandbox", *arguments)
        assert done.returncode == 125, arguments
        assert b"kuber-exec: EXEC_INVALID: " in done.stderr, arguments
    done = run_cli("cp", "--project", "p", f"web:{tmp_path}", "x")
    assert done.returncode == 125
    assert b"--workspace-uid required" in done.stderr


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(os.urandom(3_000_000))
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [*KUBER_EXEC, "cp", "--sandbox", f"web:{tmp_path}/big.bin", str(tmp_path / "got")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
            env=cli_env(),
        )
        os.close(terminal)
        terminal = -1
        output = bytearray()
        while True:
            try:
                piece = os.read(controller, 4096)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not piece:
                break
            output += piece
        assert process.wait(timeout=RUN_TIMEOUT_SECONDS) == 0, output
    finally:
        os.close(controller)
        if terminal != -1:
            os.close(terminal)
    text = output.decode()
    assert "\r" in text
    assert "100%" in text
    assert "2.9 MiB/2.9 MiB" in text


def test_cp_help_documents_the_exit_statuses() -> None:
    done = run_cli("cp", "--help")
    assert done.returncode == 0
    text = done.stdout.decode()
    for expected in ("DEPLOYMENT:PATH", "COPY_NO_TAR", "COPY_BAD_ARCHIVE", "125", "--overwrite"):
        assert expected in text, expected
