"""This process's side of the command line: its streams, its one-line error report, and the
exit statuses that are kuber-exec's own.

Nothing here imports an event loop or the library's service: ``--help``, a usage mistake and the
``sandbox``/``web`` hand-overs report through this module alone, so they start fast.
"""

from __future__ import annotations

import signal
import sys
from typing import BinaryIO

import attrs

from kuber_exec_core import ExecError

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_ERROR", "LocalStreams", "report"]

#: kuber-exec itself failed (bad arguments, refused target, cap, cluster or connection error).
EXIT_ERROR = 125
#: Local stdout was closed under us (``| head``): what a shell reports for a SIGPIPE death.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


@attrs.frozen(kw_only=True)
class LocalStreams:
    """Where a session's bytes go: file descriptors and binary streams of this process."""

    stdin_fd: int
    stdout: BinaryIO
    stderr: BinaryIO

    @classmethod
    def of_process(cls) -> LocalStreams:
        """This process's stdin, stdout and stderr, as bytes."""
        return cls(stdin_fd=0, stdout=sys.stdout.buffer, stderr=sys.stderr.buffer)


def report(streams: LocalStreams, error: ExecError) -> None:
    """Write the one ``kuber-exec: EXEC_<CODE>: message`` line for ``error`` to stderr."""
    # ExecError's str is "EXEC_<CODE>: message"; messages never hold credentials (core rule).
    try:
        streams.stderr.write(f"kuber-exec: {error}\n".encode("utf-8", errors="replace"))
        streams.stderr.flush()
    except OSError:
        pass  # Nowhere left to report to.
