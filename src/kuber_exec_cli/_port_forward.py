"""``kuber-exec port-forward``: kubectl's shape, with the workspace ownership checks.

    kuber-exec port-forward [--address 127.0.0.1]... [cluster and workspace options]
                            DEPLOYMENT [LOCAL:]REMOTE...

Each ``[LOCAL:]REMOTE`` binds a loopback port (``LOCAL`` omitted: the same number as
``REMOTE``; ``:REMOTE`` or ``0:REMOTE``: a free port) on every ``--address`` and forwards each
connection to ``REMOTE`` in the workspace's Deployment (resolved and checked as for ``exec``).
It prints one ``Forwarding from ADDRESS:PORT -> REMOTE`` line per listener, as kubectl does,
then runs until Ctrl-C (or SIGTERM), which ends it cleanly with status 0. A refused target or
an unusable port exits 125 with the one ``kuber-exec: EXEC_<CODE>: message`` line.

Imported only when the command runs (``kuber-exec`` starts fast for every other command).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Literal

import anyio
import attrs

from kuber_exec_asyncio import (
    BoundPort,
    ExecError,
    ExecErrorCode,
    ExecService,
    PortForward,
    Workspace,
)

from ._arguments import UsageError, add_cluster_arguments, workspace_of
from ._streaming import LocalStreams
from ._supervision import EXIT_ERROR, STOP_SIGNALS, report, run

__all__ = ["PortForwardOptions", "parse_port_forward", "run_port_forward_command"]

PortForwardTransport = Literal["auto", "tunnel", "legacy"]

_SPEC = re.compile(r"(?:(\d*):)?(\d+)")


@attrs.frozen(kw_only=True)
class PortForwardOptions:
    """What ``kuber-exec port-forward`` was asked to do."""

    kubeconfig: str | None = None
    context: str | None = None
    sandbox: bool = False
    workspace: Workspace
    deployment: str
    #: ``(local, remote)`` pairs; local 0 picks a free port.
    ports: tuple[tuple[int, int], ...]
    addresses: tuple[str, ...] = ("127.0.0.1",)
    transport: PortForwardTransport = "auto"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kuber-exec port-forward",
        description=(
            "Forward local ports to a port of a workspace Deployment's pod, with the workspace\n"
            "ownership checks, over the API server's port-forward WebSocket (the SPDY tunnel,\n"
            "or the legacy channels on a server without it)."
        ),
        usage=(
            "kuber-exec port-forward [--address ADDRESS]... [--transport auto|tunnel|legacy]\n"
            "                               [cluster and workspace options] "
            "DEPLOYMENT [LOCAL:]REMOTE..."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_arguments(parser, deployment=True)
    forwarding = parser.add_argument_group("forwarding")
    forwarding.add_argument(
        "--address",
        action="append",
        metavar="ADDRESS",
        help="local address to listen on; repeat or separate with commas (default: 127.0.0.1)",
    )
    forwarding.add_argument(
        "--transport",
        choices=("auto", "tunnel", "legacy"),
        default="auto",
        help="the port-forward transport (default: the tunnel, the legacy channels on a server "
        "without it)",
    )
    forwarding.add_argument(
        "ports", nargs="+", metavar="[LOCAL:]REMOTE", help="REMOTE in 1-65535, LOCAL in 0-65535"
    )
    return parser


def _error(parser: argparse.ArgumentParser, message: str) -> UsageError:
    return UsageError(parser, message)


def parse_port_forward(args: Sequence[str]) -> PortForwardOptions:
    """Parse ``kuber-exec port-forward ARGS``.

    Raises:
        UsageError: a missing, unknown or bad argument.
        SystemExit: ``--help`` was printed (code 0).
    """
    parser = _parser()
    namespace, extra = parser.parse_known_args(list(args))
    if extra:
        raise _error(parser, f"unrecognized arguments: {' '.join(extra)}")
    workspace = workspace_of(parser, namespace)
    ports: list[tuple[int, int]] = []
    for spec in namespace.ports:
        match = _SPEC.fullmatch(spec)
        if match is None:
            raise _error(parser, f"{spec!r} is not [LOCAL:]REMOTE")
        local_text, remote_text = match.groups()
        remote = int(remote_text)
        local = remote if local_text is None else int(local_text or "0")
        if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
            raise _error(parser, f"{spec!r}: REMOTE must be in 1-65535 and LOCAL in 0-65535")
        ports.append((local, remote))
    addresses = tuple(
        part.strip()
        for value in (namespace.address or ["127.0.0.1"])
        for part in value.split(",")
        if part.strip()
    )
    return PortForwardOptions(
        kubeconfig=namespace.kubeconfig,
        context=namespace.context,
        sandbox=namespace.sandbox,
        workspace=workspace,
        deployment=namespace.deployment,
        ports=tuple(ports),
        addresses=tuple(a if a != "localhost" else "127.0.0.1" for a in addresses),
        transport=namespace.transport,
    )


def run_port_forward_command(argv: list[str]) -> int:
    """``kuber-exec port-forward``: parse, then forward until stopped (module docstring)."""
    streams = LocalStreams.of_process()
    try:
        options = parse_port_forward(argv)
    except UsageError as error:
        streams.stderr.write(error.parser.format_usage().encode())
        report(streams, ExecError(ExecErrorCode.INVALID, error.message))
        return EXIT_ERROR
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 0
    return run(lambda: forward(options, streams), streams)


async def forward(options: PortForwardOptions, streams: LocalStreams) -> int:
    """Listen and forward until a stop signal; 0 then."""
    from ._cluster import open_backend

    # A stop signal is the normal end of a port-forward: the receiver opened here (the most
    # recent one) takes it before the supervisor's, which would report an interruption.
    with anyio.open_signal_receiver(*STOP_SIGNALS) as stop_signals:
        async with (
            open_backend(options) as backend,
            PortForward(
                ExecService(backend),
                options.workspace,
                options.deployment,
                transport=options.transport,
            ) as port_forward,
            anyio.create_task_group() as tasks,
        ):
            bound_all: list[BoundPort] = []
            for address in options.addresses:
                bound_all += await tasks.start(_listen, port_forward, options, address)
            for bound in bound_all:
                host = f"[{bound.address}]" if ":" in bound.address else bound.address
                line = f"Forwarding from {host}:{bound.local_port} -> {bound.remote_port}"
                _say(streams, line)
            async for _ in stop_signals:
                break
            tasks.cancel_scope.cancel()
    return 0


async def _listen(
    port_forward: PortForward,
    options: PortForwardOptions,
    address: str,
    task_status: anyio.abc.TaskStatus[list[BoundPort]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    async with port_forward.listen(list(options.ports), address=address) as bound:
        task_status.started(list(bound))
        await anyio.sleep_forever()


def _say(streams: LocalStreams, line: str) -> None:
    try:
        streams.stdout.write(f"{line}\n".encode())
        streams.stdout.flush()
    except OSError:
        pass
