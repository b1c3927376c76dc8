"""The ``kuber-exec`` command line (also ``python -m kuber_exec_cli``).

``kuber-exec exec`` is ``kubectl exec`` with the workspace ownership checks: it goes through
:class:`~kuber_exec_trio.ExecService`, so the target is resolved, checked and ranked exactly as a
platform backend using the library would, and the bytes move over the same session code.

Why an interactive session even without ``-i``/``-t``: ``ExecService.execute`` captures the
output and returns it at the end; a command line must show output as it arrives (a build log, a
``tail -f``). So every ``exec`` is ``open_interactive(request, tty=...)``, and the output caps are
applied here while streaming, with ``execute``'s semantics and error: the bytes up to a stream's
cap are written, the first byte over it ends the run with ``EXEC_OUTPUT_LIMIT``. Memory stays
bounded by the session's frame queue whatever the caps, so they default to no cap.

Exit statuses (also in ``--help`` and docs/cli.md): the remote exit code (0-255) when the command
ran; ``EXIT_ERROR`` (125, as ``docker run``) when kuber-exec itself failed, with one
``kuber-exec: EXEC_<CODE>: message`` line on stderr; ``128 + signal`` when SIGINT (130), SIGHUP
(129) or SIGTERM (143) stopped it; ``EXIT_BROKEN_PIPE`` (141) when local stdout was closed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import BinaryIO, NoReturn

import attrs
import trio

from kuber_exec_core import (
    EXEC_MANAGED_BY_LABEL,
    EXEC_WORKSPACE_UID_LABEL,
    Error,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecOutputLimitError,
    ExecRequest,
    Exit,
    Resize,
    Stderr,
    Stdin,
    Stdout,
    StreamName,
    Workspace,
    single_exception,
    validate_output_cap,
)
from kuber_exec_core import __version__ as core_version
from kuber_exec_trio import ClusterConfig, ExecService, InteractiveSession, KubernetesBackend

from ._terminal import raw_terminal, watch_window_size

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_ERROR", "main"]

#: kuber-exec itself failed (bad arguments, refused target, cap, cluster or connection error).
EXIT_ERROR = 125
#: Local stdout was closed under us (``| head``): what a shell reports for a SIGPIPE death.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
#: Signals that stop kuber-exec cleanly (terminal restored, socket closed): exit 128 + signal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: The sandbox's demo workspace, the defaults of ``--sandbox``.
DEMO_PROJECT = "demo"
DEMO_WORKSPACE_UID = "demo-uid"

# Local reads of stdin: one client-go sized message each (protocol.md §3), well under the
# service's max_stdin_frame_bytes.
_STDIN_CHUNK_BYTES = 32 * 1024

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
  kuber-exec exec --help                           # every option, real-cluster examples

{_EXIT_STATUS_HELP}
"""


class _UsageError(Exception):
    """A command-line mistake; reported as ``EXEC_INVALID`` with the usage line."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    # argparse exits 2 on a usage error, a common remote exit code; raise instead so that main
    # reports it as kuber-exec's own failure (125) in the one error format.
    def error(self, message: str) -> NoReturn:
        raise _UsageError(self, message)


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

    def request(self) -> ExecRequest:
        """The library request this command line stands for."""
        return ExecRequest(
            workspace=Workspace(project=self.project, uid=self.workspace_uid),
            deployment=self.deployment,
            command=self.command,
            container=self.container,
        )


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


# -- parsing ------------------------------------------------------------------------------------


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("kuber-exec")
    except PackageNotFoundError:  # Running from a source tree that was never installed.
        return core_version


@attrs.frozen(kw_only=True)
class Parsers:
    """The top-level parser and the subcommand parsers that report their own usage."""

    top: argparse.ArgumentParser
    exec: argparse.ArgumentParser
    demo: argparse.ArgumentParser


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
    parser.add_argument("--version", action="version", version=f"kuber-exec {_version()}")
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
            "                       [--sandbox] DEPLOYMENT -- COMMAND [ARG...]"
        ),
        epilog=_EXEC_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cluster = exec_parser.add_argument_group("cluster")
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
    target = exec_parser.add_argument_group("target")
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
    target.add_argument("deployment", metavar="DEPLOYMENT", help="the Deployment's name")
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

    commands.add_parser(
        "sandbox",
        help="serve a loopback Kubernetes API server with the demo cluster (kubectl works too); "
        "see kuber-exec sandbox --help",
        add_help=False,
    )
    demo_parser = commands.add_parser(
        "demo",
        help="start the sandbox, run a command in the demo workspace and show the ownership "
        "check refusing another workspace's Deployment",
        description="A guided tour on the in-process sandbox; takes a few seconds.",
    )
    return Parsers(top=parser, exec=exec_parser, demo=demo_parser)


def parse_exec_options(
    parser: argparse.ArgumentParser, namespace: argparse.Namespace, command: Sequence[str] | None
) -> ExecOptions:
    """Check what argparse cannot (``--``, required-unless-sandbox) and build the options.

    Raises:
        _UsageError: a missing or conflicting argument.
    """
    if not command:
        raise _UsageError(
            parser, "the command goes after --, e.g. kuber-exec exec ... web -- ls -la"
        )
    if namespace.sandbox and (namespace.kubeconfig or namespace.context):
        raise _UsageError(parser, "--sandbox cannot be combined with --kubeconfig or --context")
    project = namespace.project
    uid = namespace.workspace_uid
    if namespace.sandbox:
        project = DEMO_PROJECT if project is None else project
        uid = DEMO_WORKSPACE_UID if uid is None else uid
    missing = [
        name for name, value in (("--project", project), ("--workspace-uid", uid)) if not value
    ]
    if missing:
        raise _UsageError(parser, f"{' and '.join(missing)} required (or use --sandbox)")
    return ExecOptions(
        kubeconfig=namespace.kubeconfig,
        context=namespace.context,
        sandbox=namespace.sandbox,
        project=project,
        workspace_uid=uid,
        deployment=namespace.deployment,
        container=namespace.container,
        command=tuple(command),
        stdin=namespace.stdin,
        tty=namespace.tty,
        stdout_cap=namespace.stdout_cap,
        stderr_cap=namespace.stderr_cap,
    )


# -- the entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["sandbox"]:
        # The sandbox owns its options and help; everything after the word is its own.
        return _sandbox_main(args[1:])
    # Everything after the first "--" is the remote argv, verbatim: never parsed as options.
    command: list[str] | None = None
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1 :]
    parsers = build_parsers()
    streams = LocalStreams.of_process()
    try:
        namespace, extra = parsers.top.parse_known_args(args)
        if extra:
            if namespace.subcommand == "exec":
                raise _UsageError(
                    parsers.exec,
                    f"unrecognized arguments: {' '.join(extra)} (the command goes after --: "
                    "kuber-exec exec [options] DEPLOYMENT -- COMMAND [ARG...])",
                )
            raise _UsageError(parsers.top, f"unrecognized arguments: {' '.join(extra)}")
        if namespace.subcommand is None:
            raise _UsageError(parsers.top, "choose a command: exec, sandbox or demo")
        if namespace.subcommand == "demo":
            if command is not None:
                raise _UsageError(parsers.demo, "demo takes no command")
            return run(lambda: run_demo(streams), streams)
        options = parse_exec_options(parsers.exec, namespace, command)
    except _UsageError as error:
        sys.stderr.write(error.parser.format_usage())
        _report(streams, ExecError(ExecErrorCode.INVALID, error.message))
        return EXIT_ERROR
    except SystemExit as done:  # --help and --version print and "exit" 0.
        return done.code if isinstance(done.code, int) else 0
    return run(lambda: run_exec(options, streams), streams)


def _sandbox_main(argv: list[str]) -> int:
    try:
        from kuber_exec_sandbox._command import main as sandbox_main
    except ImportError as error:
        _report(
            LocalStreams.of_process(),
            ExecError(ExecErrorCode.FAILED, f"the sandbox is not available: {error}"),
        )
        return EXIT_ERROR
    return sandbox_main(argv)


def run(body: Callable[[], Awaitable[int]], streams: LocalStreams) -> int:
    """Run ``body`` under trio, turning errors and stop signals into an exit status.

    ``ExecError`` prints ``kuber-exec: EXEC_<CODE>: message`` and gives ``EXIT_ERROR``; SIGINT,
    SIGTERM and SIGHUP cancel ``body`` (so that its ``finally`` blocks restore the terminal and
    close the socket) and give ``128 + signal``; a closed stdout gives ``EXIT_BROKEN_PIPE``.
    """
    try:
        return trio.run(_supervise, body, streams)
    except KeyboardInterrupt:  # Ctrl-C before the signal receiver was installed, or after.
        return 128 + signal.SIGINT


async def _supervise(body: Callable[[], Awaitable[int]], streams: LocalStreams) -> int:
    stopped_by: list[int] = []
    status: list[int] = []
    with trio.open_signal_receiver(*STOP_SIGNALS) as stop_signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in stop_signals:
                    stopped_by.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            async def run_body() -> None:
                status.append(await _reporting(body, streams))
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_signals)
            nursery.start_soon(run_body)
    if stopped_by:
        name = signal.Signals(stopped_by[0]).name
        _report(
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
        with single_exception():
            return await body()
    except ExecError as error:
        _report(streams, error)
        return EXIT_ERROR
    except BrokenPipeError:
        # Whoever read our stdout is gone. Point stdout at /dev/null so that the interpreter's
        # final flush does not raise again, and exit like a shell reports a SIGPIPE death.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, streams.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _report(streams: LocalStreams, error: ExecError) -> None:
    # ExecError's str is "EXEC_<CODE>: message"; messages never hold credentials (core rule).
    try:
        streams.stderr.write(f"kuber-exec: {error}\n".encode("utf-8", errors="replace"))
        streams.stderr.flush()
    except OSError:
        pass  # Nowhere left to report to.


# -- exec ---------------------------------------------------------------------------------------


async def run_exec(options: ExecOptions, streams: LocalStreams) -> int:
    """``kuber-exec exec``: connect as ``options`` says and stream one session.

    Returns the remote exit code. Raises ``ExecError`` for everything else (see ``run``).
    """
    limits = ExecLimits()
    # Validated up front, with the service's rule and message, before anything is contacted.
    stdout_cap = _cap(options.stdout_cap, "stdout", limits)
    stderr_cap = _cap(options.stderr_cap, "stderr", limits)
    if options.stdin and options.tty and not os.isatty(streams.stdin_fd):
        raise ExecError(
            ExecErrorCode.INVALID,
            "-it needs a terminal on stdin, and stdin is a pipe or a file; "
            "drop -t to pipe data into the command",
        )
    request = options.request()
    async with open_backend(options) as backend:
        service = ExecService(backend, limits)
        return await stream_session(
            service,
            request,
            streams,
            stdin=options.stdin,
            tty=options.tty,
            stdout_cap=stdout_cap,
            stderr_cap=stderr_cap,
        )


def _cap(value: int | None, stream: StreamName, limits: ExecLimits) -> int | None:
    if value is None:
        return None
    try:
        return validate_output_cap(value, stream, limits)
    except ExecError:
        # The service's message names its keyword (stdoutCapBytes); name the option instead.
        raise ExecError(
            ExecErrorCode.INVALID,
            f"--{stream}-cap must be between 1 and {limits.max_output_cap_bytes} bytes",
        ) from None


@asynccontextmanager
async def open_backend(options: ExecOptions) -> AsyncIterator[KubernetesBackend]:
    """A backend for the options' cluster: the in-process sandbox, or a kubeconfig context."""
    if options.sandbox:
        async with open_demo_sandbox() as url, KubernetesBackend(ClusterConfig(url)) as backend:
            yield backend
        return
    # Loading may run an exec credential plugin: keep it off the event loop.
    config = await trio.to_thread.run_sync(
        ClusterConfig.from_kubeconfig, options.kubeconfig, options.context
    )
    async with KubernetesBackend(config) as backend:
        yield backend


@asynccontextmanager
async def open_demo_sandbox() -> AsyncIterator[str]:
    """Serve the sandbox with the demo cluster on loopback for the block; yields its URL."""
    from kuber_exec_sandbox import demo_cluster, serve_sandbox

    async with serve_sandbox(demo_cluster()) as sandbox:
        yield sandbox.url


async def stream_session(
    service: ExecService,
    request: ExecRequest,
    streams: LocalStreams,
    *,
    stdin: bool,
    tty: bool,
    stdout_cap: int | None = None,
    stderr_cap: int | None = None,
    on_open: Callable[[InteractiveSession], None] | None = None,
) -> int:
    """Run ``request`` as an interactive session wired to ``streams``; return its exit code.

    Output is written as it arrives (flushed per frame), bytes untouched. With ``stdin``, local
    stdin is forwarded and closed at its end (v5 only: on an older subprotocol this fails before
    forwarding anything, since the command could never see the end of its input). Without
    ``stdin``, no stdin stream is requested (with a TTY one is, as kubectl does, and left open:
    closing a terminal's input hangs it up). With ``tty``: the initial window size right after
    connecting, a ``Resize`` on every SIGWINCH, and with ``stdin`` the local terminal in raw
    mode, restored however this returns.

    Raises:
        ExecError: any code ``open_interactive`` raises; ``EXEC_OUTPUT_LIMIT`` past a cap;
            the session's ``Error`` frame; ``EXEC_FAILED`` for an exit code outside 0-255.
    """
    # Without -i the command gets no stdin stream at all (end of input at once, on every
    # subprotocol); with a TTY stdin stays requested, as kubectl does: some runtimes lose a
    # TTY's output when it has no stdin.
    async with service.open_interactive(request, tty=tty, stdin=stdin or tty) as session:
        if on_open is not None:
            on_open(session)
        if stdin and not tty and not session.protocol.can_close_stdin:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"-i needs the v5.channel.k8s.io subprotocol (Kubernetes 1.30+) to close the "
                f"command's stdin at the end of input, and this server negotiated "
                f"{session.protocol.value}, which cannot (the command had started and was "
                f"disconnected); use -it for an interactive shell, or run it without -i",
            )
        size_fd = _size_fd(streams, stdin=stdin) if tty else None
        raw: AbstractContextManager[None] = (
            raw_terminal(streams.stdin_fd) if tty and stdin else nullcontext()
        )
        stdout = _Sink(streams.stdout, "stdout", stdout_cap)
        stderr = _Sink(streams.stderr, "stderr", stderr_cap)
        with raw, single_exception():
            async with trio.open_nursery() as nursery:
                if size_fd is not None:

                    async def resize(columns: int, rows: int) -> None:
                        await _send(session, Resize(columns=columns, rows=rows))

                    # started() comes after the initial size is sent: it precedes any stdin.
                    await nursery.start(watch_window_size, size_fd, resize)
                if stdin:
                    nursery.start_soon(_forward_stdin, session, streams.stdin_fd)
                exit_code = await _write_output(session, stdout, stderr)
                nursery.cancel_scope.cancel()
    return exit_code


def _size_fd(streams: LocalStreams, *, stdin: bool) -> int | None:
    # The terminal whose size the remote one follows: the one typed into with -it, else
    # whichever of stdout/stdin is a terminal (-t alone, output to the screen).
    candidates = [streams.stdin_fd] if stdin else [streams.stdout.fileno(), streams.stdin_fd]
    for fd in candidates:
        if os.isatty(fd):
            return fd
    return None


class _Sink:
    """One local output stream, with an optional cap in the manner of ``execute``."""

    def __init__(self, stream: BinaryIO, name: StreamName, cap: int | None) -> None:
        self._stream = stream
        self._name: StreamName = name
        self._cap = cap
        self._written = 0

    def write(self, data: bytes) -> None:
        if self._cap is not None and self._written + len(data) > self._cap:
            self._emit(data[: self._cap - self._written])
            raise ExecOutputLimitError(self._name, self._cap)
        self._emit(data)

    def _emit(self, data: bytes) -> None:
        if data:
            # Blocking writes on purpose: a slow reader of our stdout slows the session down
            # (the session's bounded queue fills and the socket stops being read).
            self._stream.write(data)
            self._stream.flush()
            self._written += len(data)


async def _write_output(session: InteractiveSession, stdout: _Sink, stderr: _Sink) -> int:
    async for frame in session:
        if isinstance(frame, Stdout):
            stdout.write(frame.data)
        elif isinstance(frame, Stderr):
            stderr.write(frame.data)
        elif isinstance(frame, Exit):
            if not 0 <= frame.exit_code <= 255:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"the remote command ended with {frame.exit_code}, which is not a process "
                    "exit status (0-255)",
                )
            return frame.exit_code
        elif isinstance(frame, Error):
            raise frame.to_exception()
    # Iteration ends without a terminal frame only after a client close, which we never send
    # while reading.
    raise ExecError(ExecErrorCode.ABORTED, "the session ended without an exit status")


async def _send(session: InteractiveSession, frame: Stdin | Resize) -> bool:
    """Send ``frame``; ``False`` when the session has ended or broken (the reader reports how)."""
    try:
        await session.send(frame)
    except ExecError as error:
        if error.code in (ExecErrorCode.ABORTED, ExecErrorCode.FAILED):
            return False
        raise
    return True


def _read_chunk(fd: int) -> bytes:
    try:
        return os.read(fd, _STDIN_CHUNK_BYTES)
    except OSError:
        # EIO: the terminal hung up; EBADF: no stdin at all. Both mean no more input.
        return b""


async def _forward_stdin(session: InteractiveSession, fd: int) -> None:
    # A worker thread, not trio's FdStream: FdStream sets O_NONBLOCK on the file description,
    # which a terminal or pipe shares with the shell and the other processes using it.
    # abandon_on_cancel: a read blocked on a quiet terminal must not hold up the exit.
    while data := await trio.to_thread.run_sync(_read_chunk, fd, abandon_on_cancel=True):
        if not await _send(session, Stdin(data)):
            return
    if session.protocol.can_close_stdin:
        await _send(session, Stdin(b"", eof=True))


# -- demo ---------------------------------------------------------------------------------------


class _Narrator:
    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def __call__(self, text: str = "") -> None:
        self._stream.write(text.encode("utf-8") + b"\n")
        self._stream.flush()


async def run_demo(streams: LocalStreams) -> int:
    """``kuber-exec demo``: the whole path on the in-process sandbox, explained; returns 0.

    Raises:
        ExecError: a step did not behave as the demo cluster promises (a bug somewhere).
    """
    say = _Narrator(streams.stdout)
    started = trio.current_time()
    command = ("sh", "-c", "echo hello from $HOSTNAME")
    request = ExecRequest(
        workspace=Workspace(project=DEMO_PROJECT, uid=DEMO_WORKSPACE_UID),
        deployment="web",
        command=command,
    )
    say("kuber-exec demo: run a command in a workspace's Deployment, end to end, on a sandbox.")
    say()
    say("1. Start the sandbox: a Kubernetes API server on 127.0.0.1, in this process, whose")
    say("   pods run commands as local processes. Its demo cluster, namespace 'demo':")
    say(f"     Deployment web    labelled {EXEC_WORKSPACE_UID_LABEL}={DEMO_WORKSPACE_UID}")
    say(f"     Deployment other  labelled {EXEC_WORKSPACE_UID_LABEL}=other-uid")
    async with open_demo_sandbox() as url, KubernetesBackend(ClusterConfig(url)) as backend:
        say(f"   Listening on {url}")
        say()
        service = ExecService(backend)
        say(f"2. Find the target for workspace project={DEMO_PROJECT} uid={DEMO_WORKSPACE_UID},")
        say("   Deployment web, as the library does over the REST API:")
        deployment = await backend.get_deployment(DEMO_PROJECT, "web")
        if deployment is None:
            raise ExecError(ExecErrorCode.FAILED, "the demo cluster has no Deployment web")
        labels = deployment.labels
        say(f"     GET  deployments/web: uid {deployment.uid}")
        say(f"          containers: {', '.join(deployment.containers)}")
        for label in (EXEC_MANAGED_BY_LABEL, EXEC_WORKSPACE_UID_LABEL):
            say(f"          label {label}={labels.get(label, '(missing)')}")
        say(f"     LIST pods?labelSelector={deployment.selector.to_query()}")
        for pod in await backend.list_pods(DEMO_PROJECT, deployment.selector):
            ready = all(container.ready for container in pod.containers)
            owned = pod.deployment_uid == deployment.uid
            say(
                f"          {pod.name}: {pod.phase}, {'ready' if ready else 'not ready'}, "
                f"{'owned by web' if owned else 'NOT owned by web'} (via its ReplicaSet)"
            )
        target = await service.resolve_target(request)
        say(f"   Picked pod {target.pod}, container {target.container}: running and owned,")
        say("   ready pods first.")
        say()
        say("3. Run it (the same code as: kuber-exec exec --sandbox web -- \\")
        say("   sh -c 'echo hello from $HOSTNAME'): a WebSocket upgrade to the pod's exec")
        say("   endpoint, then the process's output as it arrives:")

        def opened(session: InteractiveSession) -> None:
            say(f"   [connected to {session.target.pod}, subprotocol {session.protocol.value}]")

        exit_code = await stream_session(
            service, request, streams, stdin=False, tty=False, on_open=opened
        )
        say(f"   [exit code {exit_code}]")
        if exit_code != 0:
            raise ExecError(ExecErrorCode.FAILED, f"the demo command exited {exit_code}")
        say()
        say("4. The ownership check: the same workspace asks for Deployment other, which")
        say("   belongs to workspace other-uid (kuber-exec exec --sandbox other -- id):")
        forbidden = attrs.evolve(request, deployment="other", command=("id",))
        try:
            await stream_session(service, forbidden, streams, stdin=False, tty=False)
        except ExecError as error:
            if error.code is not ExecErrorCode.TARGET_FORBIDDEN:
                raise
            say(f"   kuber-exec: {error}")
            say(f"   Refused before any WebSocket was opened; the CLI exits {EXIT_ERROR}.")
        else:
            raise ExecError(
                ExecErrorCode.FAILED, "the sandbox let workspace demo-uid exec into 'other'"
            )
    say()
    me = _how_to_call_me()
    say(f"Done in {trio.current_time() - started:.1f} s. Next:")
    say(f"  {me} exec --sandbox -it web -- sh    # a shell in the demo pod")
    say(f"  {me} sandbox                         # keep a sandbox up, for kubectl too")
    say(f"  {me} exec --help                     # real clusters, exit statuses")
    return 0


def _how_to_call_me() -> str:
    # After `make demo` the console script sits in .venv/bin, usually not on PATH: show a
    # command line that works as typed.
    if shutil.which("kuber-exec"):
        return "kuber-exec"
    script = os.path.join(os.path.dirname(sys.executable), "kuber-exec")
    if not os.access(script, os.X_OK):
        script = f"{sys.executable} -m kuber_exec_cli"
    relative = os.path.relpath(script)
    return script if relative.startswith("..") else relative
