"""The ``kuber-exec`` entry point: parse, pick the command, run it, return the exit status.

Contract of :func:`main`: it never raises and never exits the interpreter itself; it returns
the process exit status, whose meaning is in ``--help``: the remote command's exit code, 125
when kuber-exec itself failed (a usage mistake included, with the usage line first), 128 +
signal when stopped, 141 when stdout was closed. ``sandbox`` and ``web`` are handed over before
any parsing: everything after the word belongs to the sandbox's or the browser terminal's own
command line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from kuber_exec_core import ExecError, ExecErrorCode

from ._arguments import CopyOptions, DemoOptions, UsageError, parse_command_line
from ._local import EXIT_ERROR, LocalStreams, report
from ._process import start_up_done

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    chosen = _choose(list(sys.argv[1:] if argv is None else argv))
    if isinstance(chosen, int):
        return chosen
    # The command's modules are loaded; what it does from here may last (a shell, a server).
    start_up_done()
    return chosen()


def _choose(args: list[str]) -> Callable[[], int] | int:
    # The command to run, its module imported, or the exit status of a usage mistake or of
    # --help. Each command imports what it needs only here: ``--help`` and a usage mistake load
    # neither an event loop nor the service (docs/benchmarks.md, what start-up costs).
    if args[:1] == ["sandbox"]:
        # The sandbox owns its options and help; everything after the word is its own.
        from ._sandbox import run_sandbox_command

        return lambda: run_sandbox_command(args[1:])
    if args[:1] == ["port-forward"]:
        # Its own module and parser, imported only when it runs.
        from ._port_forward import run_port_forward_command

        return lambda: run_port_forward_command(args[1:])
    if args[:1] == ["web"]:
        # So does the browser terminal (kuber_exec_web).
        from ._web import run_web_command

        return lambda: run_web_command(args[1:])
    if args[:1] in (["attach"], ["logs"], ["debug"]):
        # Each parses its own options, in its own module, imported when it runs.
        from ._pod_commands import run_pod_command

        return lambda: run_pod_command(args[0], args[1:])
    streams = LocalStreams.of_process()
    try:
        options = parse_command_line(args)
    except UsageError as error:
        sys.stderr.write(error.parser.format_usage())
        report(streams, ExecError(ExecErrorCode.INVALID, error.message))
        return EXIT_ERROR
    except SystemExit as done:  # --help and --version print and "exit" 0.
        return done.code if isinstance(done.code, int) else 0
    from ._supervision import run

    if isinstance(options, DemoOptions):
        from ._demo import run_demo

        return lambda: run(lambda: run_demo(streams), streams)
    if isinstance(options, CopyOptions):
        from ._copy import run_copy

        return lambda: run(lambda: run_copy(options, streams), streams)
    from ._exec import run_exec

    return lambda: run(lambda: run_exec(options, streams), streams)
