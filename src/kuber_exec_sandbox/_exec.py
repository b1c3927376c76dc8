"""One exec session on an accepted WebSocket: the process, its output, stdin, resize, status.

The wire order is the real server's (docs/protocol.md): one empty message on the lowest
writable channel, then output as whole messages (each chunk sent before the next is read:
backpressure reaches the process through its pipe), then the Status (pre-v4: text on failure,
nothing on success), then Close 1000 and the connection is dropped. The core's
``ServerChannel`` does all the encoding and decoding; this module only moves bytes and waits.

A client that goes away (it closes the connection, or the connection breaks or is dropped by a
fault) does not stop the command, as on a real cluster (the exec protocol has no signal channel:
kubernetes-client/javascript#2532): the process is handed to ``abandon``, which lets it run to
its own end with its output read and dropped, and its stdin left open. Every other way out (the
command ends, a protocol error, the server stops) goes through ``ChildProcess.kill_and_reap``, and
an abandoned process is killed when the server stops: no child outlives the server.

The faults armed on the cluster (``plan.faults``, :mod:`._faults`) act here: a drop ends the
session after so many output bytes without a Close frame or a status; a held stdin gate stops
the single reader loop; a held output gate stops every send after the first (empty) message;
every running command is listed under its pod so that the pod's processes can be killed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence

import trio

from kuber_exec_core.channels import Channel, ExecProtocolError
from kuber_exec_core.server import (
    ResizeReceived,
    ServerChannel,
    StdinClosed,
    StdinReceived,
    status_exit_code,
    status_failure,
    status_success,
)
from kuber_exec_core.supervision import CLEANUP_MARKER, SHELL

from ._exec_request import ExecPlan
from ._process import ChildProcess, ProcessRegistry, spawn
from ._websocket import ClientGone, FrameTooLarge, WebSocket

__all__ = ["run_exec_session"]

_log = logging.getLogger("kuber_exec_sandbox")
_CLOSE_NORMAL = 1000
_CLOSE_PROTOCOL_ERROR = 1002
_CLOSE_TOO_BIG = 1009


class _Dropped(Exception):
    """The session's drop fault fired: end the connection without a Close frame or a status."""


def exec_environment(plan: ExecPlan) -> dict[str, str]:
    """The command's environment: a minimal base, ``HOSTNAME`` = pod name, then the pod's env."""
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": "/root"}
    env["HOSTNAME"] = plan.pod.name
    env.update(plan.pod.env)
    return env


#: Takes over a process whose client went away (it runs :meth:`ChildProcess.run_abandoned`).
Abandon = Callable[[ChildProcess], None]


async def run_exec_session(
    websocket: WebSocket,
    plan: ExecPlan,
    *,
    registry: ProcessRegistry,
    cwd: str,
    abandon: Abandon | None = None,
) -> None:
    """Run ``plan`` over ``websocket`` to the end, then close the connection. Never raises
    for anything the client does; cancellation (the server stopping) kills the process. When
    the client goes away first, the process goes to ``abandon`` (``None``: it is killed)."""
    _log.debug("exec %s", describe(plan))
    session = _Session(websocket, plan, registry=registry, cwd=cwd, abandon=abandon)
    try:
        await session.run()
    finally:
        if session.dropped:
            await websocket.drop()
        else:
            await websocket.close(session.close_code, session.close_reason)


class _Session:
    def __init__(
        self,
        websocket: WebSocket,
        plan: ExecPlan,
        *,
        registry: ProcessRegistry,
        cwd: str,
        abandon: Abandon | None,
    ) -> None:
        self._ws = websocket
        self._abandon = abandon
        # Set when the client went away while the process ran (it is then abandoned, not killed).
        self._client_left = False
        self._plan = plan
        self._channel = ServerChannel(plan.subprotocol)
        self._registry = registry
        self._cwd = cwd
        self._faults = plan.faults
        # Output bytes sent, and after how many the connection is to be dropped (a fault).
        self._sent = 0
        self._drop_after: int | None = None
        # After how many output bytes the rest is dropped while the session goes on (a fault).
        self._cut_after: int | None = None
        self._cut = False
        self.close_code = _CLOSE_NORMAL
        self.close_reason = ""
        #: Whether a drop fault ended the session (the connection then ends without a Close).
        self.dropped = False

    async def run(self) -> None:
        pod = self._plan.pod
        self._drop_after = self._faults.take_drop(pod.namespace, pod.name)
        if self._drop_after is not None:
            # A test counts its command's bytes: kuber-exec's start mark comes on top.
            self._drop_after += supervision_mark_length(self._plan.command)
        self._cut_after = self._faults.take_cut(pod.namespace, pod.name)
        if self._cut_after is not None:
            self._cut_after += supervision_mark_length(self._plan.command)
        try:
            child = await self._start()
            if isinstance(child, bytes):
                await self._send_initial_message()
                await self._send_status(child)
                return
            self._faults.process_started(pod.namespace, pod.name, child.pid)
            try:
                await self._send_initial_message()
                await self._run_child(child)
            except* (ClientGone, _Dropped):
                self._client_left = True
                raise
            finally:
                if self._client_left and self._abandon is not None and not child.exited:
                    self._abandon(child)  # it runs on, as a real runtime's process does
                else:
                    await child.kill_and_reap()
                    self._faults.process_ended(pod.namespace, pod.name, child.pid)
        except* ClientGone:
            # Bare, or from inside the session's nursery (then wrapped in an exception group).
            _log.debug("exec client went away")
        except* _Dropped:
            _log.debug("exec session dropped (a fault)")
            self.dropped = True
            self._faults.session_dropped()

    async def _send_initial_message(self) -> None:
        # Sent once the process is started, yet still before any other message, so the wire is
        # the real server's. Why not at once: kubectl's client-go (1.30-1.32) starts its reader
        # before it creates its streams and logs "Unknown stream id 1, discarding message" for a
        # message that arrives in between; a real server's network latency hides that race, a
        # loopback server does not.
        streams = self._plan.streams
        await self._ws.send_message(
            self._channel.initial_message(stdout=streams.stdout, stderr=streams.stderr)
        )
        if self._drop_after == 0:
            raise _Dropped

    async def _start(self) -> ChildProcess | bytes:
        """The started process, or the Status that reports why nothing runs."""
        if self._plan.failure is not None:
            return self._plan.failure
        if not self._plan.command:
            return status_failure("error executing command in container: no command specified")
        pod = self._plan.pod
        start_failure = self._faults.take_start_failure(pod.namespace, pod.name)
        if start_failure is not None:
            return status_failure(start_failure)
        executable = self._plan.command[0]
        if not pod.shell and executable.rsplit("/", 1)[-1] == "sh":
            return status_failure(
                "error executing command in container: failed to exec in container: "
                f'exec: "{executable}": executable file not found in $PATH'
            )
        try:
            child = await spawn(
                self._plan.command,
                env=exec_environment(self._plan),
                cwd=self._cwd,
                streams=self._plan.streams,
                registry=self._registry,
            )
        except OSError as error:
            # What a runtime reports when exec(2) fails: a failure to run, not an exit code.
            reason = (
                "executable file not found in $PATH"
                if isinstance(error, FileNotFoundError)
                else error.strerror or type(error).__name__
            )
            return status_failure(
                "error executing command in container: failed to exec in container: "
                f'exec: "{self._plan.command[0]}": {reason}'
            )
        return child

    async def _run_child(self, child: ChildProcess) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_client, child, nursery.cancel_scope)
            code = await child.run(self._send_output)
            await self._send_status(status_success() if code == 0 else status_exit_code(code))
            nursery.cancel_scope.cancel()

    async def _send_output(self, channel: Channel, data: bytes) -> None:
        await self._faults.output.wait()
        if self._drop_after is not None:
            room = self._drop_after - self._sent
            if len(data) >= room:
                if room:
                    await self._ws.send_message(self._channel.output(channel, data[:room]))
                raise _Dropped
            self._sent += len(data)
        elif self._cut_after is not None:
            room = max(self._cut_after - self._sent, 0)
            self._sent += len(data)
            if len(data) > room:
                if not self._cut:
                    self._cut = True
                    self._faults.output_cut()
                if not room:
                    return
                data = data[:room]
        await self._ws.send_message(self._channel.output(channel, data))

    async def _send_status(self, status: bytes) -> None:
        await self._faults.output.wait()
        message = self._channel.status_message(status)
        if message is not None:
            await self._ws.send_message(message)

    async def _read_client(self, child: ChildProcess, scope: trio.CancelScope) -> None:
        """The single receive loop. Ends the session (cancels ``scope``) when the client does."""
        try:
            while True:
                await self._faults.stdin.wait()
                event = self._channel.decode_client(await self._ws.receive_message())
                await self._apply(child, event)
        except ClientGone:
            self.close_code = _CLOSE_NORMAL
            self._client_left = True
        except FrameTooLarge as error:
            self.close_code, self.close_reason = _CLOSE_TOO_BIG, str(error)
        except ExecProtocolError as error:
            # A malformed v5 close tears the session down (docs/protocol.md); the sandbox does the
            # same for the core's other rejections (bad framing, bad resize JSON) so that a
            # client bug shows up at once instead of as a stalled stream.
            self.close_code, self.close_reason = _CLOSE_PROTOCOL_ERROR, error.message[:120]
        scope.cancel()

    async def _apply(
        self, child: ChildProcess, event: StdinReceived | StdinClosed | ResizeReceived | None
    ) -> None:
        streams = self._plan.streams
        match event:
            case StdinReceived(data) if streams.stdin:
                # Blocks while the process does not read: the real server's single loop does the
                # same, and it is what pushes back on a client that sends too fast.
                await child.write_stdin(data)
            case StdinClosed() if streams.stdin:
                await child.close_stdin()
            case ResizeReceived(width, height) if streams.tty:
                child.resize(width, height)
            case _:
                pass  # Dropped, as a real server drops messages for channels it did not open.


def supervision_mark_length(command: Sequence[str]) -> int:
    """The length of the start mark kuber-exec's supervised prologue prints before ``command``'s
    own output (docs/cleanup.md), or 0 for a command that is not started that way."""
    match list(command):
        case [shell, "-c", _script, tag, *_] if (
            shell == SHELL and tag.startswith(CLEANUP_MARKER) and tag != "kuber-exec-cleanup"
        ):
            return len(tag) - len(CLEANUP_MARKER) + 2
    return 0


def describe(plan: ExecPlan) -> Mapping[str, object]:
    """A loggable summary of an exec (never headers, never tokens)."""
    return {
        "namespace": plan.pod.namespace,
        "pod": plan.pod.name,
        "container": plan.container,
        "subprotocol": plan.subprotocol.value,
        "tty": plan.streams.tty,
    }
