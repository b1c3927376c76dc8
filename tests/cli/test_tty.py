"""``kuber-exec exec -it`` under a real pseudo-terminal, as at a user's shell.

The CLI runs as a child process whose stdin, stdout and stderr are the slave side of a pty, in a
session of its own; the test plays the user on the master side: it types, reads the screen,
resizes the window (``TIOCSWINSZ`` on the master, then SIGWINCH as the kernel would send to the
foreground process group) and checks the terminal's settings before, during and after.
Every wait reads the master with ``select`` against a deadline, looking for expected text.
"""

from __future__ import annotations

import signal
import termios
import time
from contextlib import ExitStack

from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread

from .clirun import RUN_TIMEOUT_SECONDS
from .pty_session import READY, SHELL, PtySession, kuber_exec_in_pty


def is_raw(attributes: list[object]) -> bool:
    lflag = attributes[3]
    assert isinstance(lflag, int)
    return not lflag & (termios.ECHO | termios.ICANON | termios.ISIG)


def stty_size(session: PtySession) -> tuple[int, int]:
    session.screen.type(b"stty size\r")
    # After the echoed command; the shell may print its prompt first (a remote SIGWINCH makes
    # some shells redraw it), so the answer is the next "<digits> <digits>" line.
    match = session.screen.expect(rb"stty size\r\n(?:.*?[^\d\n])?(\d+) (\d+)\r\n")
    return int(match[1]), int(match[2])


def test_it_is_a_remote_terminal_that_follows_the_local_one() -> None:
    with kuber_exec_in_pty("exec", "--sandbox", "-it", "web", "--", *SHELL) as session:
        before = termios.tcgetattr(session.slave)
        assert not is_raw(before)
        screen = session.screen
        screen.expect(READY)
        # Raw while the session runs: keystrokes go to the remote terminal untouched.
        assert is_raw(termios.tcgetattr(session.slave))

        # A typed line comes back echoed by the *remote* terminal (ours no longer echoes),
        # then the shell's answer.
        screen.type(b"echo kx-$((6 * 7))\r")
        screen.expect(rb"echo kx-\$\(\(6 \* 7\)\)\r\n")
        screen.expect(rb"kx-42\r\n")

        # The initial size was sent right after connecting.
        assert stty_size(session) == (33, 101)

        # A window change reaches the remote terminal. The resize and the next keystrokes
        # travel separately, so ask again until the new size shows (bounded by the deadline).
        session.resize(columns=120, rows=40)
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        while (size := stty_size(session)) != (40, 120):
            assert size == (33, 101), size
            assert time.monotonic() < deadline, "the new size never reached the remote terminal"

        # Ctrl-C goes to the remote shell (it is a byte in raw mode), not to kuber-exec.
        screen.type(b"sleep 30\r")
        screen.expect(rb"sleep 30\r\n")
        screen.type(b"\x03")
        # SIGINT flushes the terminal's pending input: type the next line at the shell's prompt.
        screen.expect(rb"\^C\r\n# ")
        screen.type(b"echo still-$((1 + 1))\r")
        screen.expect(rb"still-2\r\n")

        screen.type(b"exit 3\r")
        assert session.wait() == 3
        assert termios.tcgetattr(session.slave) == before


def test_the_terminal_is_restored_when_a_signal_stops_kuber_exec() -> None:
    with kuber_exec_in_pty("exec", "--sandbox", "-it", "web", "--", *SHELL) as session:
        before = termios.tcgetattr(session.slave)
        session.screen.expect(READY)
        assert is_raw(termios.tcgetattr(session.slave))
        session.process.send_signal(signal.SIGTERM)
        assert session.wait() == 128 + signal.SIGTERM
        assert termios.tcgetattr(session.slave) == before
        session.screen.expect(rb"kuber-exec: EXEC_ABORTED: interrupted by SIGTERM")


def test_the_terminal_is_restored_when_the_terminal_hangs_up() -> None:
    with kuber_exec_in_pty("exec", "--sandbox", "-it", "web", "--", *SHELL) as session:
        before = termios.tcgetattr(session.slave)
        session.screen.expect(READY)
        session.process.send_signal(signal.SIGHUP)
        assert session.wait() == 128 + signal.SIGHUP
        assert termios.tcgetattr(session.slave) == before


def test_the_terminal_is_restored_when_the_cluster_goes_away() -> None:
    # The API server vanishes mid-session: the session ends with an error, not an exit status.
    with ExitStack() as stack:
        sandbox_running = stack.enter_context(ExitStack())
        sandbox = sandbox_running.enter_context(run_sandbox_in_thread(demo_cluster()))
        kubeconfig = str(sandbox.kubeconfig_path)
        workspace = ("--project", "demo", "--workspace-uid", "demo-uid")
        session = stack.enter_context(
            kuber_exec_in_pty(
                "exec", "--kubeconfig", kubeconfig, *workspace, "-it", "web", "--", *SHELL
            )
        )
        before = termios.tcgetattr(session.slave)
        session.screen.expect(READY)
        assert is_raw(termios.tcgetattr(session.slave))
        sandbox_running.close()  # Stops the sandbox: connections closed, processes killed.
        assert session.wait() == 125
        assert termios.tcgetattr(session.slave) == before
        session.screen.expect(rb"kuber-exec: EXEC_FAILED: ")


def test_a_refused_target_leaves_the_terminal_alone() -> None:
    with kuber_exec_in_pty("exec", "--sandbox", "-it", "other", "--", "sh") as session:
        before = termios.tcgetattr(session.slave)
        assert session.wait() == 125
        session.screen.expect(rb"kuber-exec: EXEC_TARGET_FORBIDDEN: ")
        assert termios.tcgetattr(session.slave) == before


def test_t_without_i_sizes_the_remote_terminal_from_stdout() -> None:
    # -t alone: no raw mode (nothing is typed through), but a remote terminal of our size, and
    # output through its line discipline. The process starts when the WebSocket opens, before
    # the initial size arrives (as with kubectl), so it waits for a size first.
    script = 'while [ "$(stty size)" = "0 0" ]; do :; done; stty size'
    with kuber_exec_in_pty("exec", "--sandbox", "-t", "web", "--", "sh", "-c", script) as session:
        before = termios.tcgetattr(session.slave)
        assert session.wait() == 0
        # Our terminal is not raw here, so its own ONLCR turns the remote "\r\n" into "\r\r\n".
        session.screen.expect(rb"33 101\r+\n")
        assert termios.tcgetattr(session.slave) == before
