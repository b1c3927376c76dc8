"""``kuber-exec attach``: attach the local terminal or pipes to a container's main process.

Like ``kubectl attach [-i] [-t]``: output from now on (earlier output is in ``logs``), stdin
with ``-i`` (the container must have been created with ``stdin: true``), a terminal with
``-t``. Detaching (end of local input, Ctrl-C, closing the terminal) leaves the process running.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import attrs

from kuber_exec_asyncio import (
    ContainerRequest,
    ExecError,
    ExecErrorCode,
    ExecService,
    Workspace,
    open_attach,
)

from ._arguments import UsageError
from ._cluster import open_backend
from ._pod_commands import PodTarget, new_parser
from ._streaming import LocalStreams, stream_session

__all__ = ["AttachOptions", "parse_attach", "run_attach"]

_EPILOG = """\
The process keeps running when you detach: attach never starts nor stops it. Output written
before you attached is not shown (see kuber-exec logs).

examples:
  kuber-exec attach --project team-a --workspace-uid 7d3c0b52 web
  kuber-exec attach --project team-a --workspace-uid 7d3c0b52 -c repl -it web
"""


@attrs.frozen(kw_only=True)
class AttachOptions:
    """What ``kuber-exec attach`` was asked to do."""

    target: PodTarget
    stdin: bool
    tty: bool


def parse_attach(args: Sequence[str], remote: Sequence[str] | None) -> AttachOptions:
    """Parse ``attach``'s arguments (``UsageError`` for a mistake)."""
    parser = new_parser(
        "attach",
        description="Attach to the main process of a workspace Deployment's container.",
        epilog=_EPILOG,
    )
    io = parser.add_argument_group("input and terminal")
    io.add_argument("-i", "--stdin", action="store_true", help="pass local stdin to the process")
    io.add_argument("-t", "--tty", action="store_true", help="the container's TTY, in raw mode")
    namespace = parser.parse_args(args)
    if remote is not None:
        raise UsageError(parser, "attach takes no command (it binds to the running process)")
    return AttachOptions(
        target=PodTarget.of(parser, namespace), stdin=namespace.stdin, tty=namespace.tty
    )


async def run_attach(options: AttachOptions, streams: LocalStreams) -> int:
    """Attach and stream until the process ends (0) or the local side leaves."""
    if options.stdin and options.tty and not os.isatty(streams.stdin_fd):
        raise ExecError(ExecErrorCode.INVALID, "-it needs a terminal on stdin")
    target = options.target
    request = ContainerRequest(
        workspace=Workspace(project=target.project, uid=target.workspace_uid),
        deployment=target.deployment,
        container=target.container,
    )
    async with open_backend(target) as backend:
        service = ExecService(backend, subprotocols=target.subprotocols or None)
        opened = open_attach(
            service, request, stdin=options.stdin, tty=True if options.tty else None
        )
        return await stream_session(
            service,
            request.as_exec_request(("attach",)),
            streams,
            stdin=options.stdin,
            tty=options.tty,
            opened=opened,
        )
