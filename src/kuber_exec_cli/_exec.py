"""``kuber-exec exec``: from parsed options to one streamed session on the chosen cluster.

Contract of :func:`run_exec`: what can be checked locally (the caps' range, ``-it`` needing a
terminal) is checked before anything is contacted; then the backend is opened (the in-process
sandbox, or a kubeconfig context) and the request goes through
:class:`~kuber_exec_asyncio.ExecService`, so the target is resolved, checked and ranked exactly as
a platform backend using the library would, and the bytes move over the same session code. It
returns the remote exit code and raises ``ExecError`` for everything else. With ``--record``, the
file's directory is checked before anything is contacted; a recording that fails later is
reported as one warning line on stderr once the session is over (the session goes on).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kuber_exec_asyncio import (
    AuditEvent,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecRequest,
    ExecService,
)
from kuber_exec_core import StreamName

from ._arguments import ExecOptions
from ._cluster import open_backend
from ._local import LocalStreams
from ._streaming import stream_session

if TYPE_CHECKING:
    # The recording machinery is imported only with --record (start-up, docs/benchmarks.md).
    from kuber_exec_asyncio import Recording

__all__ = ["run_exec"]

# Room for the header of any ordinary command and the cap's marker (a longer command's header
# is refused by the service, naming max_bytes).
_MIN_RECORDING_BYTES = 4096


async def run_exec(options: ExecOptions, streams: LocalStreams) -> int:
    """``kuber-exec exec``: connect as ``options`` says and stream one session.

    Returns the remote exit code. Raises ``ExecError`` for everything else.
    """
    limits = ExecLimits()
    # Validated up front, with the service's bounds, before anything is contacted.
    stdout_cap = _cap(options.stdout_cap, "stdout", limits)
    stderr_cap = _cap(options.stderr_cap, "stderr", limits)
    if options.stdin and options.tty and not os.isatty(streams.stdin_fd):
        raise ExecError(
            ExecErrorCode.INVALID,
            "-it needs a terminal on stdin, and stdin is a pipe or a file; "
            "drop -t to pipe data into the command",
        )
    request = options.request()
    recording = _recording(options)
    with _recording_log_silenced(recording is not None):
        return await _run(options, streams, request, recording, limits, stdout_cap, stderr_cap)


async def _run(
    options: ExecOptions,
    streams: LocalStreams,
    request: ExecRequest,
    recording: Recording | None,
    limits: ExecLimits,
    stdout_cap: int | None,
    stderr_cap: int | None,
) -> int:
    failures: list[str] = []

    def audit(event: AuditEvent) -> None:
        if event.phase == "ended" and event.recording_error is not None:
            failures.append(event.recording_error)

    async with open_backend(options) as backend:
        service = ExecService(
            backend, limits, subprotocols=options.subprotocols or None, audit=audit
        )
        try:
            return await stream_session(
                service,
                request,
                streams,
                stdin=options.stdin,
                tty=options.tty,
                stdout_cap=stdout_cap,
                stderr_cap=stderr_cap,
                recording=recording,
            )
        finally:
            # After the session (the terminal is no longer raw): one line, not an error.
            for failure in failures:
                streams.stderr.write(
                    f"kuber-exec: warning: the recording {options.record} failed (the session "
                    f"went on): {failure}\n".encode()
                )
                streams.stderr.flush()


@contextmanager
def _recording_log_silenced(silenced: bool) -> Iterator[None]:
    # A recording's failure is reported once the session is over (the terminal no longer
    # raw), from the audit event, rather than logged in the middle of the screen.
    if not silenced:
        yield
        return
    logger = logging.getLogger("kuber_exec.recording")
    # Not propagated, and handled (else logging's last-resort handler would print it).
    quiet = logging.NullHandler()
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(quiet)
    try:
        yield
    finally:
        logger.removeHandler(quiet)
        logger.propagate = propagate


def _recording(options: ExecOptions) -> Recording | None:
    """``--record``'s recording, its directory checked before anything is contacted."""
    if options.record is None:
        return None
    from kuber_exec_asyncio import Recording
    from kuber_exec_core.asciicast import DEFAULT_MAX_RECORDING_BYTES

    path = os.path.abspath(options.record)
    directory = os.path.dirname(path)
    if os.path.isdir(path):
        raise ExecError(ExecErrorCode.INVALID, f"--record {options.record} is a directory")
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise ExecError(
            ExecErrorCode.INVALID,
            f"--record {options.record}: cannot create a file in {directory}",
        )
    max_bytes = options.record_max_bytes
    if max_bytes is None:
        max_bytes = DEFAULT_MAX_RECORDING_BYTES
    elif max_bytes < _MIN_RECORDING_BYTES:
        raise ExecError(
            ExecErrorCode.INVALID, f"--record-max-bytes must be at least {_MIN_RECORDING_BYTES}"
        )
    term = os.environ.get("TERM")
    return Recording(
        destination=options.record,
        record_input=options.record_input,
        max_bytes=max_bytes,
        # The terminal the output was written for: players pick their emulation from it.
        env={"TERM": term} if term else {},
    )


def _cap(value: int | None, stream: StreamName, limits: ExecLimits) -> int | None:
    # The service's rule for a cap (1..max_output_cap_bytes; argparse already made it an int),
    # in the option's name rather than the service's keyword (stdoutCapBytes).
    if value is None or 1 <= value <= limits.max_output_cap_bytes:
        return value
    raise ExecError(
        ExecErrorCode.INVALID,
        f"--{stream}-cap must be between 1 and {limits.max_output_cap_bytes} bytes",
    )
