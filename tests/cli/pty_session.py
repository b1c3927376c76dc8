"""A real pseudo-terminal for the CLI's interactive tests: ``kuber-exec`` started on the slave
side, the test typing and reading the screen on the master side (``test_tty``, ``test_record``).
Every wait reads the master with ``select`` against a deadline, looking for expected text."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from .clirun import KUBER_EXEC, RUN_TIMEOUT_SECONDS, cli_env, skip_or_fail

__all__ = ["READY", "SHELL", "PtySession", "Screen", "kuber_exec_in_pty", "set_window_size"]

# A remote shell that says when it is up (its output can only reach the screen once the local
# terminal is raw and the initial size has been sent) and then reads commands.
READY = b"kx-shell-ready"
SHELL = ("sh", "-c", f"echo {READY.decode()}; exec sh -i")


def set_window_size(fd: int, columns: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


class Screen:
    """The master side of the pty: what the user types and sees."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.output = bytearray()
        self._consumed = 0

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def expect(self, pattern: bytes, timeout: float = RUN_TIMEOUT_SECONDS) -> re.Match[bytes]:
        """Wait for ``pattern`` (a regex) in the output not yet matched; return the match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.output, self._consumed)
            if match is not None:
                self._consumed = match.end()
                return match
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"{pattern!r} never appeared; the screen shows {bytes(self.output)!r}")
            if not self.read_some(remaining):
                pytest.fail(f"the terminal closed before {pattern!r}: {bytes(self.output)!r}")

    def read_some(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; ``False`` once the pty has hung up."""
        readable, _, _ = select.select([self.master], [], [], timeout)
        if not readable:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: no process holds the slave open any more.
            return False
        self.output += chunk
        return bool(chunk)


class PtySession:
    def __init__(self, process: subprocess.Popen[bytes], screen: Screen, slave: int) -> None:
        self.process = process
        self.screen = screen
        self.slave = slave

    def resize(self, columns: int, rows: int) -> None:
        set_window_size(self.screen.master, columns, rows)
        # The child is not the pty's foreground process group (it has no controlling terminal),
        # so send the SIGWINCH the kernel would have sent.
        self.process.send_signal(signal.SIGWINCH)

    def wait(self) -> int:
        """Wait for the exit, draining the screen meanwhile (a full pty would block the child)."""
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        while self.process.poll() is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"kuber-exec did not exit; screen: {bytes(self.screen.output)!r}"
            self.screen.read_some(min(remaining, 0.05))
        return self.process.returncode


@contextmanager
def kuber_exec_in_pty(*args: str, columns: int = 101, rows: int = 33) -> Iterator[PtySession]:
    """Start ``kuber-exec ARGS`` on a fresh pty of the given size."""
    try:
        master, slave = os.openpty()
    except OSError as error:
        skip_or_fail(f"no pseudo-terminal available: {error}")
    set_window_size(master, columns, rows)
    process = subprocess.Popen(
        [*KUBER_EXEC, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env={**cli_env(), "TERM": "dumb"},
    )
    try:
        yield PtySession(process, Screen(master), slave)
    finally:
        process.kill()
        process.wait(RUN_TIMEOUT_SECONDS)
        os.close(master)
        os.close(slave)
