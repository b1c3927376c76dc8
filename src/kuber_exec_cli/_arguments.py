"""The ``kuber-exec`` command line's words: parsers, help texts, and what they parse into.

Contract: :func:`parse_command_line` turns the arguments after the program name (``sandbox``
excepted, which the sandbox parses itself) into :class:`ExecOptions` or :class:`DemoOptions`, or
raises :class:`UsageError` for a mistake; ``--help`` and ``--version`` print and raise
``SystemExit(0)``, as argparse does. Only the shape of the command line is checked here: the
values (names, command size, cap range) are checked where they are used, by ``exec`` and the
service. Everything after the first ``--`` is the remote argv, verbatim, never parsed as options.

The exit-status table in the help is also docs/cli.md's: change the two together.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

import attrs

from kuber_exec_core import (
    EXEC_MANAGED_BY_LABEL,
    EXEC_WORKSPACE_UID_LABEL,
    ExecRequest,
    Subprotocol,
    Workspace,
)
from kuber_exec_core import __version__ as core_version

from ._sandbox import DEMO_PROJECT, DEMO_WORKSPACE_UID

__all__ = [
    "CopyOptions",
    "DemoOptions",
    "ExecOptions",
    "Parsers",
    "UsageError",
    "build_parsers",
    "parse_command_line",
    "parse_exec_options",
]

_EXIT_STATUS_HELP = """\
exit status:
  0-255  the remote command's exit code
  125    kuber-exec itself failed; stderr has one line "kuber-exec: EXEC_<CODE>: <message>":
           EXEC_INVALID           bad arguments (nothing was sent to the cluster)
           EXEC_TARGET_NOT_FOUND  no such Deployment (or container)
           EXEC_TARGET_FORBIDDEN  the Deployment belongs to another workspace
           EXEC_TARGET_NOT_READY  no running pod to exec into
           EXEC_OUTPUT_LIMIT      --stdout-cap/--stderr-cap exceeded (output up to the cap shown)
           EXEC_FAILED            kubeconfig, API server, connection or runtime failure
  130    interrupted by Ctrl-C (SIGINT); 129 SIGHUP, 143 SIGTERM; stderr says
         "kuber-exec: EXEC_ABORTED: interrupted by ...". The remote command is NOT signalled
         (the protocol has no way to) and may still be running. With -it, Ctrl-C is a key
         for the remote terminal instead.
  141    local stdout was closed (e.g. piped into head)"""

_EXEC_EPILOG = f"""\
examples:
  # No cluster needed: an in-process sandbox with the demo workspace (project demo,
  # workspace uid demo-uid, Deployment web).
  kuber-exec exec --sandbox web -- sh -c 'echo hello from $HOSTNAME'
  kuber-exec exec --sandbox -it web -- sh

  # A real cluster, through the current kubeconfig context:
  kuber-exec exec --project team-a --workspace-uid 7d3c0b52 web -- ls -la /srv
  kuber-exec exec --context prod --project team-a --workspace-uid 7d3c0b52 -c app -it web -- bash
  tar cz site | kuber-exec exec --project team-a --workspace-uid 7d3c0b52 -i web -- tar xz -C /tmp

  # A sandbox in another terminal, used like a cluster:
  kuber-exec sandbox --kubeconfig-out /tmp/sandbox.kubeconfig
  kuber-exec exec --kubeconfig /tmp/sandbox.kubeconfig --project demo --workspace-uid demo-uid \\
      web -- id

The target must be labelled {EXEC_MANAGED_BY_LABEL}=kuber and
{EXEC_WORKSPACE_UID_LABEL}=<--workspace-uid>; a pod is picked among its running pods (ready
first, then by name). Without -i the command gets no stdin (end of input at once). Without -t,
stdout and stderr stay separate and binary-safe.

{_EXIT_STATUS_HELP}
"""

_TOP_EPILOG = f"""\
start here:
  kuber-exec demo                                  # a guided run on the in-process sandbox
  kuber-exec exec --sandbox web -- uname -a        # your own command in the demo workspace
  kuber-exec web --sandbox                         # a terminal in your browser, same workspace
  kuber-exec exec --help                           # every option, real-cluster examples

{_EXIT_STATUS_HELP}
"""


class UsageError(Exception):
    """A command-line mistake; reported as ``EXEC_INVALID`` with the usage line."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    # argparse exits 2 on a usage error, a common remote exit code; raise instead so that main
    # reports it as kuber-exec's own failure (125) in the one error format.
    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


@attrs.frozen(kw_only=True)
class ExecOptions:
    """What ``kuber-exec exec`` was asked to do (parsed, not yet validated by the service)."""

    kubeconfig: str | None = None
    context: str | None = None
    sandbox: bool = False
    project: str
    workspace_uid: str
    deployment: str
    container: str | None = None
    command: tuple[str, ...]
    stdin: bool = False
    tty: bool = False
    stdout_cap: int | None = None
    stderr_cap: int | None = None
    #: ``--subprotocol`` values in order; empty: the library's default offer.
    subprotocols: tuple[str, ...] = ()
    #: ``--record FILE``: record the session as asciicast v2 there.
    record: str | None = None
    record_input: bool = False
    record_max_bytes: int | None = None

    def request(self) -> ExecRequest:
        """The library request this command line stands for."""
        return ExecRequest(
            workspace=Workspace(project=self.project, uid=self.workspace_uid),
            deployment=self.deployment,
            command=self.command,
            container=self.container,
        )


_COPY_EXIT_STATUS_HELP = """\
exit status:
  0    copied (size checked; sha256 compared when the container has sha256sum, else a
       warning on stderr says it was not)
  1    the copy failed; stderr has one line "kuber-exec: COPY_<PROBLEM>: <message>":
         COPY_NO_SUCH_PATH       the remote path (or its directory) does not exist
         COPY_NOT_A_DIRECTORY    a file where a directory was expected
         COPY_UNSUPPORTED        the remote path is a device, FIFO or socket
         COPY_PERMISSION_DENIED  the container may not read or write there
         COPY_NO_SPACE           the container's file system is full
         COPY_NO_TAR             a directory needs tar, and the image has none
         COPY_LOCAL_PATH         the local source is missing, or the destination exists
         COPY_BAD_ARCHIVE        the container sent a hostile or broken archive (refused;
                                 nothing was written outside the destination)
         COPY_SIZE_MISMATCH, COPY_CHECKSUM_MISMATCH, COPY_CONNECTION_LOST,
         COPY_REMOTE_FAILED
  125  kuber-exec itself failed before copying: "kuber-exec: EXEC_<CODE>: <message>" (bad
       arguments, no such Deployment, another workspace's Deployment, no running pod ...)
  130  interrupted by Ctrl-C (SIGINT); 129 SIGHUP, 143 SIGTERM"""

_COPY_EPILOG = f"""\
One of SRC and DST is DEPLOYMENT:PATH (as with kubectl cp), the other a local path; a local
path with a colon is written ./like:this. A directory is copied whole (it needs tar in the
container); a single file needs only sh and head/tail. Into an existing directory the copy
keeps its name; otherwise DST is the new name. A download never replaces a local file unless
--overwrite, and never extracts into an existing directory.

examples:
  kuber-exec cp --sandbox ./site web:/tmp/site
  kuber-exec cp --sandbox web:/etc/hostname .
  kuber-exec cp --project team-a --workspace-uid 7d3c0b52 -c app web:/var/log/app.log ./logs/

{_COPY_EXIT_STATUS_HELP}
"""

#: ``DEPLOYMENT:PATH``: a DNS-1123 name, a colon, then the path (kubectl's shape).
_REMOTE = re.compile(r"([a-z0-9](?:[-a-z0-9]*[a-z0-9])?):(.*)", re.DOTALL)


@attrs.frozen(kw_only=True)
class CopyOptions:
    """What ``kuber-exec cp`` was asked to do."""

    kubeconfig: str | None = None
    context: str | None = None
    sandbox: bool = False
    project: str
    workspace_uid: str
    deployment: str
    container: str | None = None
    #: True: local to the pod; False: the pod to local.
    upload: bool
    remote_path: str
    local_path: str
    overwrite: bool = False
    retries: int = 3
    #: ``None``: a progress bar when stderr is a terminal.
    progress: bool | None = None
    subprotocols: tuple[str, ...] = ()

    @property
    def workspace(self) -> Workspace:
        return Workspace(project=self.project, uid=self.workspace_uid)


@attrs.frozen
class DemoOptions:
    """What ``kuber-exec demo`` was asked to do: it has no options."""


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("kuber-exec")
    except PackageNotFoundError:  # Running from a source tree that was never installed.
        return core_version


class _VersionAction(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked for
    (``importlib.metadata`` costs about 20 ms, every command would pay it otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        sys.stdout.write(f"kuber-exec {_version()}\n")
        parser.exit()


@attrs.frozen(kw_only=True)
class Parsers:
    """The top-level parser and the subcommand parsers that report their own usage."""

    top: argparse.ArgumentParser
    exec: argparse.ArgumentParser
    cp: argparse.ArgumentParser
    demo: argparse.ArgumentParser


def add_cluster_arguments(parser: argparse.ArgumentParser, *, deployment: bool) -> None:
    """The options every command that reaches a workspace shares (``exec``, ``cp``): which
    cluster (``--kubeconfig``, ``--context``, ``--sandbox``, ``--subprotocol``) and which
    workspace and container (``--project``, ``--workspace-uid``, ``-c``, and with
    ``deployment`` the ``DEPLOYMENT`` positional)."""
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)",
    )
    cluster.add_argument("--context", metavar="NAME", help="kubeconfig context (default: current)")
    cluster.add_argument(
        "--sandbox",
        action="store_true",
        help="use an in-process sandbox cluster with the demo workspace instead of a kubeconfig "
        f"(then --project defaults to {DEMO_PROJECT}, --workspace-uid to {DEMO_WORKSPACE_UID})",
    )
    target = parser.add_argument_group("target")
    target.add_argument(
        "--project", metavar="NS", help="the workspace's project: the namespace (required)"
    )
    target.add_argument(
        "--workspace-uid",
        metavar="UID",
        help="the workspace uid the Deployment must be labelled with (required)",
    )
    target.add_argument(
        "-c",
        "--container",
        metavar="CONTAINER",
        help="container (default: the first one of the Deployment's pod template)",
    )
    cluster.add_argument(
        "--subprotocol",
        metavar="NAME",
        action="append",
        choices=[protocol.value for protocol in Subprotocol],
        dest="subprotocols",
        help="offer this exec subprotocol; repeat for several, in order of preference "
        "(default: v5.channel.k8s.io then v4.channel.k8s.io). For a server or proxy that speaks "
        "only " + ", ".join(p.value for p in Subprotocol if p is not Subprotocol.V5) + ". Only "
        "v5 can close stdin: -i without -t needs it",
    )

    if deployment:
        target.add_argument("deployment", metavar="DEPLOYMENT", help="the Deployment's name")


def workspace_of(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> Workspace:
    """The workspace the options name: ``--sandbox`` conflicts with a kubeconfig and gives the
    demo workspace's defaults; otherwise ``--project`` and ``--workspace-uid`` are required.

    Raises:
        UsageError: a missing or conflicting argument.
    """
    if namespace.sandbox and (namespace.kubeconfig or namespace.context):
        raise UsageError(parser, "--sandbox cannot be combined with --kubeconfig or --context")
    project = namespace.project
    uid = namespace.workspace_uid
    if namespace.sandbox:
        project = DEMO_PROJECT if project is None else project
        uid = DEMO_WORKSPACE_UID if uid is None else uid
    missing = [
        name for name, value in (("--project", project), ("--workspace-uid", uid)) if not value
    ]
    if missing:
        raise UsageError(parser, f"{' and '.join(missing)} required (or use --sandbox)")
    return Workspace(project=project, uid=uid)


def build_parsers() -> Parsers:
    """The ``kuber-exec`` argument parsers (``sandbox`` is dispatched before they run)."""
    parser = _Parser(
        prog="kuber-exec",
        description=(
            "Run commands in the pods of a workspace's Kubernetes Deployment, with the\n"
            "workspace ownership checks, over the *.channel.k8s.io WebSocket protocol."
        ),
        epilog=_TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="show the program's version number and exit"
    )
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", title="commands")

    exec_parser = commands.add_parser(
        "exec",
        help="run a command in a workspace Deployment's pod",
        description=(
            "Resolve DEPLOYMENT in the workspace's project, checking that the workspace owns\n"
            "it, pick one of its running pods, run COMMAND there, stream the output as it\n"
            "arrives and exit with the command's exit code."
        ),
        usage=(
            "kuber-exec exec [--kubeconfig PATH] [--context NAME] --project NS "
            "--workspace-uid UID\n"
            "                       [-c CONTAINER] [-i] [-t] [--stdout-cap BYTES] "
            "[--stderr-cap BYTES]\n"
            "                       [--subprotocol NAME]... [--record FILE [--record-input]]\n"
            "                       [--sandbox] DEPLOYMENT -- COMMAND [ARG...]"
        ),
        epilog=_EXEC_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_arguments(exec_parser, deployment=True)
    session = exec_parser.add_argument_group("session")
    session.add_argument(
        "-i",
        "--stdin",
        action="store_true",
        help="forward local stdin to the command and close it at end of input (needs a "
        "Kubernetes 1.30+ API server: the v5.channel.k8s.io subprotocol)",
    )
    session.add_argument(
        "-t",
        "--tty",
        action="store_true",
        help="allocate a remote terminal; with -i, put the local terminal in raw mode and "
        "follow its size (stderr then arrives on stdout)",
    )
    session.add_argument(
        "--stdout-cap",
        metavar="BYTES",
        type=int,
        help="stop with EXEC_OUTPUT_LIMIT after BYTES of stdout (1..1048576; default: no cap)",
    )
    session.add_argument(
        "--stderr-cap",
        metavar="BYTES",
        type=int,
        help="stop with EXEC_OUTPUT_LIMIT after BYTES of stderr (1..1048576; default: no cap)",
    )
    recording = exec_parser.add_argument_group("recording")
    recording.add_argument(
        "--record",
        metavar="FILE",
        help="record the session as asciicast v2 in FILE (mode 0600, replaced if it exists): "
        "the output and the terminal's resizes; play it with asciinema play FILE. A recording "
        "that fails stops with a warning; the session goes on",
    )
    recording.add_argument(
        "--record-input",
        action="store_true",
        help="record what is typed too (off by default: it can hold passwords)",
    )
    recording.add_argument(
        "--record-max-bytes",
        metavar="BYTES",
        type=int,
        help="stop recording (with a marker, the session goes on) at BYTES (default 64 MiB)",
    )
    cp_parser = commands.add_parser(
        "cp",
        help="copy files or directories into or out of a workspace Deployment's pod",
        description=(
            "Copy between the local machine and a pod of a workspace's Deployment, with the\n"
            "same targeting and ownership checks as exec, streaming, size- and sha256-checked."
        ),
        usage=(
            "kuber-exec cp [--kubeconfig PATH] [--context NAME] --project NS --workspace-uid UID"
            "\n                     [-c CONTAINER] [--overwrite] [--retries N] [--[no-]progress]"
            "\n                     [--sandbox] SRC DST"
        ),
        epilog=_COPY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_arguments(cp_parser, deployment=False)
    copying = cp_parser.add_argument_group("copy")
    copying.add_argument("source", metavar="SRC", help="DEPLOYMENT:PATH or a local path")
    copying.add_argument("destination", metavar="DST", help="DEPLOYMENT:PATH or a local path")
    copying.add_argument(
        "--overwrite", action="store_true", help="a download may replace an existing local file"
    )
    copying.add_argument(
        "--retries",
        metavar="N",
        type=int,
        default=3,
        help="reconnections a file download may make after lost connections (default: 3)",
    )
    copying.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )

    commands.add_parser(
        "sandbox",
        help="serve a loopback Kubernetes API server with the demo cluster (kubectl works too); "
        "see kuber-exec sandbox --help",
        add_help=False,
    )
    for name, summary in (
        ("attach", "attach to the main process of a Deployment's container"),
        ("logs", "print (-f: follow) the log of a Deployment's container"),
        ("debug", "add an ephemeral debug container (--image) to a Deployment's pod and attach"),
        ("port-forward", "forward local ports to a port of a Deployment's pod"),
        ("web", "a terminal in your browser (the browser terminal's own options)"),
    ):
        # Dispatched before this parser runs (by _main); listed for --help.
        commands.add_parser(name, help=f"{summary}; see kuber-exec {name} --help", add_help=False)
    demo_parser = commands.add_parser(
        "demo",
        help="start the sandbox, run a command in the demo workspace and show the ownership "
        "check refusing another workspace's Deployment",
        description="A guided tour on the in-process sandbox; takes a few seconds.",
    )
    return Parsers(top=parser, exec=exec_parser, cp=cp_parser, demo=demo_parser)


def parse_exec_options(
    parser: argparse.ArgumentParser, namespace: argparse.Namespace, command: Sequence[str] | None
) -> ExecOptions:
    """Check what argparse cannot (``--``, required-unless-sandbox) and build the options.

    Raises:
        UsageError: a missing or conflicting argument.
    """
    if not command:
        raise UsageError(
            parser, "the command goes after --, e.g. kuber-exec exec ... web -- ls -la"
        )
    workspace = workspace_of(parser, namespace)
    if (namespace.record_input or namespace.record_max_bytes is not None) and not namespace.record:
        raise UsageError(parser, "--record-input and --record-max-bytes need --record FILE")
    return ExecOptions(
        kubeconfig=namespace.kubeconfig,
        context=namespace.context,
        sandbox=namespace.sandbox,
        project=workspace.project,
        workspace_uid=workspace.uid,
        deployment=namespace.deployment,
        container=namespace.container,
        command=tuple(command),
        stdin=namespace.stdin,
        tty=namespace.tty,
        stdout_cap=namespace.stdout_cap,
        stderr_cap=namespace.stderr_cap,
        subprotocols=tuple(namespace.subprotocols or ()),
        record=namespace.record,
        record_input=namespace.record_input,
        record_max_bytes=namespace.record_max_bytes,
    )


def parse_copy_options(
    parser: argparse.ArgumentParser, namespace: argparse.Namespace
) -> CopyOptions:
    """Which side is the pod's, and the rest of ``cp``'s options.

    Raises:
        UsageError: not exactly one ``DEPLOYMENT:PATH``, an empty path, a bad ``--retries``.
    """
    workspace = workspace_of(parser, namespace)
    source = _REMOTE.fullmatch(namespace.source)
    destination = _REMOTE.fullmatch(namespace.destination)
    if (source is None) == (destination is None):
        raise UsageError(
            parser,
            "exactly one of SRC and DST is DEPLOYMENT:PATH (write a local path with a colon "
            "as ./like:this)",
        )
    remote = source or destination
    assert remote is not None
    deployment, remote_path = remote.groups()
    local_path = namespace.source if source is None else namespace.destination
    if not remote_path or not local_path:
        raise UsageError(parser, "an empty path: name the file or directory (. is fine)")
    if not 0 <= namespace.retries <= 100:
        raise UsageError(parser, "--retries must be between 0 and 100")
    return CopyOptions(
        kubeconfig=namespace.kubeconfig,
        context=namespace.context,
        sandbox=namespace.sandbox,
        project=workspace.project,
        workspace_uid=workspace.uid,
        deployment=deployment,
        container=namespace.container,
        upload=source is None,
        remote_path=remote_path,
        local_path=local_path,
        overwrite=namespace.overwrite,
        retries=namespace.retries,
        progress=namespace.progress,
        subprotocols=tuple(namespace.subprotocols or ()),
    )


def parse_command_line(args: Sequence[str]) -> ExecOptions | CopyOptions | DemoOptions:
    """Parse ``kuber-exec ARGS`` (not ``sandbox``) into what to run.

    Raises:
        UsageError: a missing, unknown or conflicting argument.
        SystemExit: ``--help`` or ``--version`` was printed (code 0).
    """
    args = list(args)
    if args[:1] == ["cp"]:
        # cp has no remote argv: its "--" only ends the options, as argparse reads it.
        parsers = build_parsers()
        return parse_copy_options(parsers.cp, parsers.top.parse_args(args))
    # Everything after the first "--" is the remote argv, verbatim: never parsed as options.
    command: list[str] | None = None
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1 :]
    parsers = build_parsers()
    namespace, extra = parsers.top.parse_known_args(args)
    if extra:
        if namespace.subcommand == "exec":
            raise UsageError(
                parsers.exec,
                f"unrecognized arguments: {' '.join(extra)} (the command goes after --: "
                "kuber-exec exec [options] DEPLOYMENT -- COMMAND [ARG...])",
            )
        raise UsageError(parsers.top, f"unrecognized arguments: {' '.join(extra)}")
    if namespace.subcommand is None:
        raise UsageError(
            parsers.top, "choose a command: exec, cp, attach, logs, debug, sandbox or demo"
        )
    if namespace.subcommand == "demo":
        if command is not None:
            raise UsageError(parsers.demo, "demo takes no command")
        return DemoOptions()
    return parse_exec_options(parsers.exec, namespace, command)
