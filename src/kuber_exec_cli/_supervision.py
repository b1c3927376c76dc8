"""Running a command's program on asyncio and turning how it ended into the process exit status.

The contract of :func:`run`, also in ``--help`` and docs/cli.md: the program's own status (the
remote exit code, 0-255) when it returns; ``EXIT_ERROR`` (125, as ``docker run``) for an
``ExecError``, with one ``kuber-exec: EXEC_<CODE>: message`` line on stderr (:func:`report`);
``128 + signal`` when SIGINT (130), SIGHUP (129) or SIGTERM (143) stopped it, after the program
was cancelled so that its ``finally`` blocks restored the terminal and closed the socket;
``EXIT_BROKEN_PIPE`` (141) when local stdout was closed under it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable

import anyio

from kuber_exec_asyncio import ExecError, ExecErrorCode

from ._local import EXIT_BROKEN_PIPE, EXIT_ERROR, LocalStreams, report

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_ERROR", "STOP_SIGNALS", "report", "run"]

#: Signals that stop kuber-exec cleanly (terminal restored, socket closed): exit 128 + signal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(body: Callable[[], Awaitable[int]], streams: LocalStreams) -> int:
    """Run ``body`` on asyncio (through anyio), turning errors and stop signals into an exit
    status.

    ``ExecError`` prints ``kuber-exec: EXEC_<CODE>: message`` and gives ``EXIT_ERROR``; SIGINT,
    SIGTERM and SIGHUP cancel ``body`` (so that its ``finally`` blocks restore the terminal and
    close the socket) and give ``128 + signal``; a closed stdout gives ``EXIT_BROKEN_PIPE``.
    """
    try:
        # asyncio, not trio: importing trio and anyio's trio backend costs a command line about
        # 50 ms of its start (docs/benchmarks.md, what start-up costs).
        return anyio.run(_supervise, body, streams, backend="asyncio")
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was installed, or after.
        return 128 + signal.SIGINT


async def _supervise(body: Callable[[], Awaitable[int]], streams: LocalStreams) -> int:
    stopped_by: list[int] = []
    status: list[int] = []
    with anyio.open_signal_receiver(*STOP_SIGNALS) as stop_signals:
        async with anyio.create_task_group() as tasks:

            async def watch_signals() -> None:
                async for signum in stop_signals:
                    stopped_by.append(signum)
                    tasks.cancel_scope.cancel()
                    return

            async def run_body() -> None:
                status.append(await _reporting(body, streams))
                tasks.cancel_scope.cancel()

            tasks.start_soon(watch_signals)
            tasks.start_soon(run_body)
    if stopped_by:
        name = signal.Signals(stopped_by[0]).name
        report(
            streams,
            ExecError(
                ExecErrorCode.ABORTED,
                f"interrupted by {name}; the remote command was not signalled and may still be "
                "running",
            ),
        )
        return 128 + stopped_by[0]
    return status[0]


async def _reporting(body: Callable[[], Awaitable[int]], streams: LocalStreams) -> int:
    try:
        return await body()
    except BaseException as raised:
        error = _sole_exception(raised)
        if isinstance(error, ExecError):
            report(streams, error)
            return EXIT_ERROR
        if isinstance(error, BrokenPipeError):
            # Whoever read our stdout is gone. Point stdout at /dev/null so that the
            # interpreter's final flush does not raise again, and exit like a shell reports a
            # SIGPIPE death.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, streams.stdout.fileno())
            os.close(devnull)
            return EXIT_BROKEN_PIPE
        if error is raised:
            raise
        raise error from error.__cause__


def _sole_exception(raised: BaseException) -> BaseException:
    # A task group wraps what its body or a task raises in an exception group, maybe
    # several deep; the exit status is decided by the type of the one error inside. A group of
    # several errors (two tasks failing at once) stays a group: there is no single one to report.
    error = raised
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return raised if isinstance(error, BaseExceptionGroup) else error
