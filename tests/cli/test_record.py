"""``kuber-exec exec -it --record FILE``: the recording, read back with asciinema (PyPI's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .clirun import RUN_TIMEOUT_SECONDS, cli_env, run_cli
from .pty_session import READY, SHELL, kuber_exec_in_pty


def asciinema_cat(path: Path) -> bytes:
    """What ``asciinema cat FILE`` prints (no controlling terminal: it would go raw)."""
    done = subprocess.run(
        [sys.executable, "-m", "asciinema", "cat", str(path)],
        capture_output=True,
        timeout=RUN_TIMEOUT_SECONDS,
        start_new_session=True,
        env={**cli_env(), "PYTHONUTF8": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_recorded_terminal_session_is_what_the_screen_showed(tmp_path: Path) -> None:
    path = tmp_path / "session.cast"
    args = ("exec", "--sandbox", "-it", "--record", str(path), "web", "--", *SHELL)
    with kuber_exec_in_pty(*args, columns=97, rows=31) as session:
        screen = session.screen
        screen.expect(READY)
        screen.type(b"stty -echo; printf 'caf\\303\\251 \\342\\202\\254\\n'; read pw; exit 4\r")
        screen.expect("café €\r\n".encode())
        screen.type(b"hunter2\r")
        assert session.wait() == 4
        shown = bytes(screen.output)
    # The local terminal was raw: the screen got the remote output's bytes, untouched.
    assert asciinema_cat(path) == shown
    header, *events = (json.loads(line) for line in path.read_bytes().splitlines())
    assert (header["width"], header["height"]) == (97, 31)
    assert header["env"] == {"TERM": "dumb"}
    assert header["command"] == "sh -c 'echo kx-shell-ready; exec sh -i'"
    assert {event[1] for event in events} == {"o"}  # no input without --record-input
    assert b"hunter2" not in path.read_bytes()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_record_input_records_the_keystrokes(tmp_path: Path) -> None:
    path = tmp_path / "typed.cast"
    args = ("exec", "--sandbox", "-it", "--record", str(path), "--record-input", "web", "--")
    with kuber_exec_in_pty(*args, *SHELL) as session:
        session.screen.expect(READY)
        session.screen.type(b"exit 0\r")
        assert session.wait() == 0
    events = [json.loads(line) for line in path.read_bytes().splitlines()[1:]]
    assert "".join(event[2] for event in events if event[1] == "i") == "exit 0\r"


def test_a_failing_recording_is_one_warning_and_the_session_goes_on() -> None:
    done = run_cli("exec", "--sandbox", "--record", "/dev/full", "web", "--", "sh", "-c", "echo hi")
    assert done.returncode == 0
    assert done.stdout == b"hi\n"
    assert done.stderr.decode().splitlines() == [
        "kuber-exec: warning: the recording /dev/full failed (the session went on): "
        f"OSError: [Errno 28] {os.strerror(28)}"
    ]


def test_a_session_without_a_tty_records_its_output(tmp_path: Path) -> None:
    path = tmp_path / "plain.cast"
    command = ("sh", "-c", "echo out; echo err >&2")
    done = run_cli("exec", "--sandbox", "--record", str(path), "web", "--", *command)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"out\n", b"err\n")
    assert sorted(asciinema_cat(path).splitlines()) == [b"err", b"out"]


def test_record_mistakes_are_refused_before_anything_runs(tmp_path: Path) -> None:
    for args, message in [
        (("--record-input",), "--record-input and --record-max-bytes need --record FILE"),
        (("--record", str(tmp_path)), f"--record {tmp_path} is a directory"),
        (
            ("--record", str(tmp_path / "no" / "x.cast")),
            f"--record {tmp_path / 'no' / 'x.cast'}: cannot create a file in {tmp_path / 'no'}",
        ),
        (
            ("--record", str(tmp_path / "x.cast"), "--record-max-bytes", "100"),
            "--record-max-bytes must be at least 4096",
        ),
    ]:
        done = run_cli("exec", "--sandbox", *args, "web", "--", "true")
        assert done.returncode == 125, done.stderr
        assert f"kuber-exec: EXEC_INVALID: {message}" in done.stderr.decode()
    assert os.listdir(tmp_path) == []
