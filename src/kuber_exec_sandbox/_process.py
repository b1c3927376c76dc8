"""A pod's command as a local child process: pipes, or a real pseudo-terminal with ``tty``.

Every child starts in its own session (``setsid``), so its whole process group can be killed
at the end: when the command exits (orphans that still hold the output open would otherwise keep
the session alive), when the client goes away, and when the server stops. ``ProcessRegistry``
counts the children that are not reaped yet (the leak tests read it).

The server may also end without stopping (SIGKILL, a crash): then a watchdog process kills the
process groups. It reads the live groups from a pipe that only the server holds open, and on end
of file (the kernel closes the pipe however the server ends) kills every group still listed.
(``PR_SET_PDEATHSIG`` in the child would not do: it fires when the parent *thread* ends, and
trio forks from worker threads that retire after a few idle seconds.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from kuber_exec_core import ExecStreams
from kuber_exec_core.channels import Channel

__all__ = ["ChildProcess", "ProcessRegistry", "spawn"]

#: Output is read in chunks of at most this size; each chunk becomes one message, sent before the
#: next read (backpressure: a slow client slows the process through its full pipe).
OUTPUT_CHUNK_BYTES = 32 * 1024
_VEOF = b"\x04"

SendOutput = Callable[[Channel, bytes], Awaitable[None]]


_WATCHDOG = """
import os, signal, sys
groups = set()
for line in sys.stdin.buffer:  # until end of file: the server is gone, however it ended
    (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class _Watchdog:
    """Kills the listed process groups once the server's end of its pipe closes."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not stopped by a terminal's ^C along with the server
        )
        assert self._process.stdin is not None
        self._pipe = self._process.stdin

    def tell(self, line: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._pipe.write(line)
            self._pipe.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._pipe.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - it exits at end of file
            self._process.kill()
            self._process.wait()


class ProcessRegistry:
    """The live (spawned, not yet reaped) children of one server.

    Use it as a context manager for the server's lifetime: its watchdog (started on entry, or
    with the first child) kills every live child's process group if the server dies without
    stopping.
    """

    def __init__(self) -> None:
        self._live: set[int] = set()
        self._changed = trio.lowlevel.ParkingLot()
        self._watchdog: _Watchdog | None = None

    def __len__(self) -> int:
        return len(self._live)

    def __enter__(self) -> ProcessRegistry:
        if self._watchdog is None:
            self._watchdog = _Watchdog()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the watchdog (the server has reaped its children); idempotent."""
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None

    def add(self, pid: int) -> None:
        self._live.add(pid)
        if self._watchdog is None:
            self._watchdog = _Watchdog()
        self._watchdog.tell(b"+%d\n" % pid)

    def discard(self, pid: int) -> None:
        if pid in self._live and self._watchdog is not None:
            self._watchdog.tell(b"-%d\n" % pid)
        self._live.discard(pid)
        self._changed.unpark_all()

    async def wait_empty(self) -> None:
        """Return once no child is live (at once if none is)."""
        while self._live:
            await self._changed.park()


def _make_controlling_terminal() -> None:
    # Runs in the child after setsid(): the slave (now fd 0) becomes the controlling terminal,
    # so the shell gets job control, SIGINT from ^C and SIGWINCH from resizes.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class ChildProcess:
    """A running command. Use :meth:`run` once, then always :meth:`kill_and_reap`."""

    def __init__(
        self,
        process: trio.Process,
        registry: ProcessRegistry,
        *,
        stdin: trio.abc.SendStream | None,
        outputs: list[tuple[trio.abc.ReceiveStream, Channel | None]],
        terminal: trio.lowlevel.FdStream | None,
    ) -> None:
        self._process = process
        self._registry = registry
        self._stdin = stdin
        self._outputs = outputs
        self._terminal = terminal
        self._stdin_open = stdin is not None
        self._exited = False
        registry.add(process.pid)

    @property
    def exited(self) -> bool:
        """Whether :meth:`run` saw the process exit."""
        return self._exited

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group (it starts a session)."""
        return self._process.pid

    async def write_stdin(self, data: bytes) -> None:
        """Write to the process's stdin; blocks while its pipe is full (the server's backpressure).

        Data after EOF, or after the process closed its stdin, is dropped as a real runtime does.
        """
        if not self._stdin_open or self._stdin is None:
            return
        try:
            await self._stdin.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._stdin_open = False

    async def close_stdin(self) -> None:
        """End of input: close the pipe, or with a terminal type the EOF character (^D)."""
        if not self._stdin_open or self._stdin is None:
            return
        if self._terminal is not None:
            await self.write_stdin(_VEOF)
            return
        self._stdin_open = False
        await self._stdin.aclose()

    def resize(self, width: int, height: int) -> None:
        """Set the terminal size (rows, columns); a no-op without a terminal."""
        if self._terminal is not None:
            size = struct.pack("HHHH", height, width, 0, 0)
            fcntl.ioctl(self._terminal.fileno(), termios.TIOCSWINSZ, size)

    async def run(self, send_output: SendOutput) -> int:
        """Pump output until the process exits and its output ends; return its exit code.

        Output goes to ``send_output`` in chunks, one at a time. A process killed by signal N
        reports 128+N, as container runtimes do. Orphans left in the process group are killed
        when the command exits so their open pipes cannot hold the session.
        """
        async with trio.open_nursery() as nursery:
            for stream, channel in self._outputs:
                nursery.start_soon(self._pump, stream, channel, send_output)
            code = await self._process.wait()
            self._exited = True
            self._registry.discard(self._process.pid)
            self._kill_group()
        return 128 - code if code < 0 else code

    async def run_abandoned(self, ended: Callable[[], None] = lambda: None) -> None:
        """Let the process run to its own end after its client went away: its output is read
        and dropped (so it never blocks on a full pipe), its stdin stays open. Then (or when
        cancelled: the server stops) kill its group and reap it, and call ``ended``."""

        async def drop(_channel: Channel, _data: bytes) -> None:
            pass

        try:
            await self.run(drop)
        finally:
            await self.kill_and_reap()
            ended()

    async def _pump(
        self, stream: trio.abc.ReceiveStream, channel: Channel | None, send_output: SendOutput
    ) -> None:
        while True:
            try:
                data = bytes(await stream.receive_some(OUTPUT_CHUNK_BYTES))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # A pseudo-terminal's master reads EIO once every slave is closed: that is EOF.
                return
            if not data:
                return
            if channel is not None:
                await send_output(channel, data)

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)

    async def kill_and_reap(self) -> None:
        """Kill the whole process group, reap the child, close every stream. Idempotent.

        Runs shielded from cancellation: a leaked child is worse than a late cancel.
        """
        with trio.CancelScope(shield=True):
            self._kill_group()
            await self._process.wait()
            self._registry.discard(self._process.pid)
            streams: list[trio.abc.AsyncResource] = [s for s, _ in self._outputs]
            if self._stdin is not None:
                streams.append(self._stdin)
            for stream in streams:
                await stream.aclose()


async def spawn(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    streams: ExecStreams,
    registry: ProcessRegistry,
) -> ChildProcess:
    """Start ``command`` with the streams asked for (a pseudo-terminal when ``streams.tty``).

    Raises:
        OSError: the executable is missing or cannot run (the caller reports a runtime failure).
    """
    if streams.tty:
        return await _spawn_terminal(command, env=env, cwd=cwd, streams=streams, registry=registry)
    process = await trio.lowlevel.open_process(
        list(command),
        stdin=subprocess.PIPE if streams.stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE if streams.stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE if streams.stderr else subprocess.DEVNULL,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    outputs: list[tuple[trio.abc.ReceiveStream, Channel | None]] = []
    if process.stdout is not None:
        outputs.append((process.stdout, Channel.STDOUT))
    if process.stderr is not None:
        outputs.append((process.stderr, Channel.STDERR))
    return ChildProcess(process, registry, stdin=process.stdin, outputs=outputs, terminal=None)


async def _spawn_terminal(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    streams: ExecStreams,
    registry: ProcessRegistry,
) -> ChildProcess:
    master, slave = os.openpty()
    try:
        process = await trio.lowlevel.open_process(
            list(command),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm"},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_make_controlling_terminal,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        # Only the child keeps the slave: once it (and its children) exit, the master reads EIO.
        os.close(slave)
    terminal = trio.lowlevel.FdStream(master)
    # Without stdout the terminal's output is still read (and dropped) so the child never blocks.
    channel = Channel.STDOUT if streams.stdout else None
    return ChildProcess(
        process,
        registry,
        stdin=terminal if streams.stdin else None,
        outputs=[(terminal, channel)],
        terminal=terminal,
    )
