"""What ``attach``, ``logs`` and ``debug`` share: their dispatch and options.

``kuber-exec attach|logs|debug ...`` is handed here before the other commands are parsed (each
command's module is imported only when it runs). Each takes ``exec``'s cluster and workspace
options (``add_cluster_arguments``) and kubectl's shape for the rest.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

import attrs

from kuber_exec_asyncio import ExecError, ExecErrorCode

from ._arguments import UsageError, add_cluster_arguments, workspace_of
from ._streaming import LocalStreams
from ._supervision import EXIT_ERROR, report, run

__all__ = ["POD_COMMANDS", "PodCommandParser", "PodTarget", "run_pod_command"]

#: The commands this module dispatches.
POD_COMMANDS = ("attach", "logs", "debug")


class PodCommandParser(argparse.ArgumentParser):
    """A parser that raises :class:`UsageError` instead of exiting 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


@attrs.frozen(kw_only=True)
class PodTarget:
    """Which cluster, workspace, Deployment and container a pod command is for."""

    kubeconfig: str | None
    context: str | None
    sandbox: bool
    project: str
    workspace_uid: str
    deployment: str
    container: str | None
    subprotocols: tuple[str, ...] = ()

    @classmethod
    def of(cls, parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> PodTarget:
        """The target the parsed ``namespace`` names (``UsageError`` when incomplete)."""
        workspace = workspace_of(parser, namespace)
        return cls(
            kubeconfig=namespace.kubeconfig,
            context=namespace.context,
            sandbox=namespace.sandbox,
            project=workspace.project,
            workspace_uid=workspace.uid,
            deployment=namespace.deployment,
            container=namespace.container,
            subprotocols=tuple(namespace.subprotocols or ()),
        )


def new_parser(
    command: str, *, description: str, epilog: str, usage: str | None = None
) -> PodCommandParser:
    """A command's parser with the cluster and workspace options of ``exec``."""
    parser = PodCommandParser(
        prog=f"kuber-exec {command}",
        description=description,
        epilog=epilog,
        usage=usage,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_arguments(parser, deployment=True)
    return parser


def run_pod_command(command: str, argv: Sequence[str]) -> int:
    """Run ``kuber-exec COMMAND ARGV`` (one of :data:`POD_COMMANDS`); the exit status."""
    streams = LocalStreams.of_process()
    remote: list[str] | None = None
    args = list(argv)
    if "--" in args:  # the debug container's argv, verbatim
        split = args.index("--")
        args, remote = args[:split], args[split + 1 :]
    try:
        if command == "attach":
            from ._attach import parse_attach, run_attach

            attach = parse_attach(args, remote)
            return run(lambda: run_attach(attach, streams), streams)
        if command == "logs":
            from ._logs import parse_logs, run_logs

            logs = parse_logs(args, remote)
            return run(lambda: run_logs(logs, streams), streams)
        from ._debug import parse_debug, run_debug

        debug = parse_debug(args, remote)
        return run(lambda: run_debug(debug, streams), streams)
    except UsageError as error:
        sys.stderr.write(error.parser.format_usage())
        report(streams, ExecError(ExecErrorCode.INVALID, error.message))
        return EXIT_ERROR
    except SystemExit as done:  # --help prints and "exits" 0
        return done.code if isinstance(done.code, int) else 0
