"""``kuber-exec debug``: a debug container in a workspace pod, and a terminal in it.

kubectl's shape: ``kuber-exec debug --image busybox [--target app] [--profile general]
DEPLOYMENT [-- COMMAND ...]``. The container's states are printed on stderr as they come
(``waiting: ErrImagePull: ...``); once it runs, the local terminal (``-it``) or pipes are
attached to it; if it has already ended, its log is printed and its exit code returned.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs

from kuber_exec_asyncio import (
    ContainerRequest,
    DebugContainer,
    DebugProfile,
    DebugSession,
    EphemeralStatus,
    ExecError,
    ExecErrorCode,
    ExecService,
    InteractiveSession,
    Workspace,
    open_debug,
)

from ._arguments import UsageError
from ._cluster import open_backend
from ._pod_commands import PodTarget, new_parser
from ._streaming import LocalStreams, stream_session

__all__ = ["DebugOptions", "parse_debug", "run_debug"]

_EPILOG = """\
The debug container shares the process namespace of --target (default: the container the
workspace's Deployment resolves to), so a shell there sees the target's processes even in an
image without a shell. An ephemeral container cannot be removed: it stays in the pod, ended
once its process exits. Detaching leaves its process running.

examples:
  kuber-exec debug --project team-a --workspace-uid 7d3c0b52 -it --image busybox web -- sh
  kuber-exec debug --sandbox -it --image busybox web
"""


@attrs.frozen(kw_only=True)
class DebugOptions:
    """What ``kuber-exec debug`` was asked to do."""

    target: PodTarget
    debug: DebugContainer
    stdin: bool
    tty: bool


def parse_debug(args: Sequence[str], remote: Sequence[str] | None) -> DebugOptions:
    """Parse ``debug``'s arguments (``UsageError`` for a mistake)."""
    parser = new_parser(
        "debug",
        description="Add an ephemeral debug container to a workspace Deployment's pod and "
        "attach to it.",
        epilog=_EPILOG,
        usage="kuber-exec debug [options] --image IMAGE [--target CONTAINER] "
        "[--profile PROFILE] [-i] [-t] DEPLOYMENT [-- COMMAND [ARG...]]",
    )
    container = parser.add_argument_group("debug container")
    container.add_argument("--image", metavar="IMAGE", required=True, help="the image to run")
    container.add_argument(
        "--target", metavar="CONTAINER", help="share this container's processes (default: -c's)"
    )
    container.add_argument(
        "--profile",
        choices=[p.value for p in DebugProfile],
        default=DebugProfile.GENERAL.value,
        help="security settings, as kubectl debug's (default: general)",
    )
    container.add_argument(
        "--name", metavar="NAME", help="the container's name (default: generated)"
    )
    container.add_argument(
        "--env", metavar="NAME=VALUE", action="append", default=[], help="an environment variable"
    )
    container.add_argument(
        "--image-pull-policy", choices=["Always", "IfNotPresent", "Never"], help="when to pull"
    )
    io = parser.add_argument_group("input and terminal")
    io.add_argument("-i", "--stdin", action="store_true", help="pass local stdin to it")
    io.add_argument("-t", "--tty", action="store_true", help="give it a TTY, in raw mode")
    namespace = parser.parse_args(args)
    env: dict[str, str] = {}
    for item in namespace.env:
        name, equals, value = item.partition("=")
        if not equals:
            raise UsageError(parser, f"--env {item}: write NAME=VALUE")
        env[name] = value
    try:
        debug = DebugContainer(
            image=namespace.image,
            command=tuple(remote or ()),
            target_container=namespace.target,
            profile=namespace.profile,
            env=env,
            name=namespace.name,
            image_pull_policy=namespace.image_pull_policy,
            tty=namespace.tty,
        )
    except ExecError as error:
        raise UsageError(parser, error.message) from None
    return DebugOptions(
        target=PodTarget.of(parser, namespace),
        debug=debug,
        stdin=namespace.stdin,
        tty=namespace.tty,
    )


async def run_debug(options: DebugOptions, streams: LocalStreams) -> int:
    """Add the container, then attach (its session's exit status) or print its log."""
    if options.stdin and options.tty and not os.isatty(streams.stdin_fd):
        raise ExecError(ExecErrorCode.INVALID, "-it needs a terminal on stdin")
    target = options.target
    request = ContainerRequest(
        workspace=Workspace(project=target.project, uid=target.workspace_uid),
        deployment=target.deployment,
        container=target.container,
    )

    def show(status: EphemeralStatus) -> None:
        streams.stderr.write(f"kuber-exec: debug container: {status.describe()}\n".encode())
        streams.stderr.flush()

    async with open_backend(target) as backend:
        service = ExecService(backend, subprotocols=target.subprotocols or None)
        # Without -i there is nothing to type: follow its log from the start (no output lost
        # to the moment between its start and an attach), as kubectl debug without -i.
        async with open_debug(
            service, request, options.debug, on_status=show, attach=options.stdin or options.tty
        ) as debugging:
            streams.stderr.write(
                f"kuber-exec: debugging pod {debugging.target.pod} with container "
                f"{debugging.name} (image {options.debug.image})\n".encode()
            )
            streams.stderr.flush()
            if debugging.log is not None:
                async for chunk in debugging.log:
                    streams.stdout.write(chunk)
                    streams.stdout.flush()
                return await _exit_code(service, debugging)
            assert debugging.session is not None
            return await stream_session(
                service,
                request.as_exec_request(("debug",)),
                streams,
                stdin=options.stdin,
                tty=options.tty,
                opened=_already_open(debugging.session),
            )


async def _exit_code(service: ExecService, debugging: DebugSession) -> int:
    # The log has ended: the container has (or is about to have) its terminated state.
    status = await debugging.wait_ended()
    return 0 if status.exit_code is None else status.exit_code


@asynccontextmanager
async def _already_open(session: InteractiveSession) -> AsyncIterator[InteractiveSession]:
    # open_debug's block owns the session: stream_session only uses it.
    yield session
