"""The sandbox's kubelet: each container's main process, its log, and ephemeral containers.

A container with a ``command`` (``PodSpec.command``) runs it as a local process group from the
moment the served cluster has it, as a container runtime runs PID 1; so does every ephemeral
container added through ``pods/{name}/ephemeralcontainers`` whose image the node has
(``Cluster.images``). What they write goes to the container's :class:`ContainerLog` (bounded:
the oldest output is dropped past ``LOG_LIMIT_BYTES``, as a runtime rotates its log files),
which ``pods/log`` reads and ``pods/attach`` follows. Attaching never starts anything: a client
that leaves an attach leaves the process running.

:class:`ContainerRuntime` reconciles on every ``Cluster.touch()`` (its
:meth:`~ContainerRuntime.waker` is a cluster listener): it starts what should run, moves
ephemeral containers through ``waiting`` -> ``running`` -> ``terminated``, and kills the
processes of pods that are gone.
Everything runs in the server's nursery, so every process is killed and reaped when it stops.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import logging
import os
from collections.abc import Callable, Iterator

import attrs
import trio

from kuber_exec_core import ExecStreams
from kuber_exec_core.channels import Channel

from ._cluster import Cluster, ContainerState, EphemeralContainer, PodObject
from ._process import ChildProcess, ProcessRegistry, spawn

__all__ = ["LOG_LIMIT_BYTES", "ContainerLog", "ContainerRuntime", "LogChunk", "RunningContainer"]

_log = logging.getLogger("kuber_exec_sandbox")

#: Output kept per container (older chunks are dropped first).
LOG_LIMIT_BYTES = 4 * 1024 * 1024

_Key = tuple[str, str, str]  # namespace, pod uid, container name


@attrs.frozen
class LogChunk:
    """One piece of output: its sequence number, when it was written (UTC), and its bytes."""

    seq: int
    time: datetime.datetime
    channel: Channel
    data: bytes


class ContainerLog:
    """A container's output as numbered chunks, bounded to ``limit`` bytes (oldest dropped)."""

    def __init__(self, limit: int = LOG_LIMIT_BYTES) -> None:
        self._limit = limit
        self._chunks: collections.deque[LogChunk] = collections.deque()
        self._bytes = 0
        self._next = 0
        self._changed = trio.Event()
        #: Set once the process has ended: nothing more will be written.
        self.ended = False

    @property
    def next_seq(self) -> int:
        """The sequence number the next chunk will get (a follower's "from now on")."""
        return self._next

    def append(self, channel: Channel, data: bytes) -> None:
        self._chunks.append(
            LogChunk(self._next, datetime.datetime.now(datetime.UTC), channel, data)
        )
        self._next += 1
        self._bytes += len(data)
        while self._bytes > self._limit and len(self._chunks) > 1:
            self._bytes -= len(self._chunks.popleft().data)
        self._wake()

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def chunks(self, since_seq: int = 0) -> list[LogChunk]:
        """The retained chunks numbered ``since_seq`` or later."""
        return [c for c in self._chunks if c.seq >= since_seq]

    async def wait_after(self, seq: int) -> None:
        """Return once a chunk numbered ``seq`` or later exists, or the log has ended."""
        while self._next <= seq and not self.ended:
            await self._changed.wait()


class RunningContainer:
    """One container's main process (or an ephemeral container's), and its log."""

    def __init__(self, pod: PodObject, name: str, *, stdin: bool, tty: bool) -> None:
        self.namespace = pod.namespace
        self.pod = pod.name
        self.name = name
        self.stdin = stdin
        self.tty = tty
        self.log = ContainerLog()
        self.child: ChildProcess | None = None
        self.exit_code: int | None = None

    async def write_stdin(self, data: bytes) -> None:
        if self.child is not None and not self.child.exited:
            await self.child.write_stdin(data)

    def resize(self, width: int, height: int) -> None:
        if self.child is not None and not self.child.exited:
            self.child.resize(width, height)

    async def run(self, child: ChildProcess) -> int:
        """Run ``child`` to its end, its output into the log; returns its exit code."""
        self.child = child

        async def record(channel: Channel, data: bytes) -> None:
            self.log.append(channel, data)

        try:
            code = await child.run(record)
        finally:
            await child.kill_and_reap()
            self.log.end()
        self.exit_code = code
        return code


def _environment(pod: PodObject, extra: dict[str, str]) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": "/root"}
    env["HOSTNAME"] = pod.name
    env.update(pod.env)
    env.update(extra)
    return env


class ContainerRuntime:
    """Runs the served cluster's containers (see the module docstring)."""

    def __init__(self, cluster: Cluster, registry: ProcessRegistry, cwd: str) -> None:
        self._cluster = cluster
        self._registry = registry
        self._cwd = cwd
        self._running: dict[_Key, RunningContainer] = {}
        self._scopes: dict[_Key, trio.CancelScope] = {}
        self._wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None

    def waker(self, token: trio.lowlevel.TrioToken) -> Callable[[], None]:
        """A cluster listener (any thread) that wakes :meth:`run`."""

        def wake() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._wakeup.set)

        return wake

    def container(self, pod: PodObject, name: str) -> RunningContainer | None:
        """The running (or ended) process of ``pod``'s container ``name``, if it was started."""
        return self._running.get((pod.namespace, pod.uid, name))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reconcile now and after every wake, until cancelled (the server stops)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._wakeup = trio.Event()
            await self._reconcile(nursery)
            task_status.started()  # the processes of the cluster as given are running
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                await self._reconcile(nursery)

    async def _reconcile(self, nursery: trio.Nursery) -> None:
        with self._cluster.lock:
            pods = [p for ns in self._cluster.namespaces.values() for p in ns.pods.values()]
        live: set[_Key] = set()
        for pod in pods:
            for container in pod.containers:
                key = (pod.namespace, pod.uid, container.name)
                live.add(key)
                if (
                    key not in self._running
                    and container.command
                    and container.running
                    and pod.node_name
                ):
                    await self._start_main(nursery, pod, container, key)
            for ephemeral in list(pod.ephemeral):
                key = (pod.namespace, pod.uid, ephemeral.name)
                live.add(key)
                if (
                    key not in self._running
                    and ephemeral.state == "waiting"
                    and ephemeral.reason == "ContainerCreating"
                ):
                    await self._start_ephemeral(nursery, pod, ephemeral, key)
        for key in [k for k in self._scopes if k not in live]:
            self._scopes.pop(key).cancel()  # the pod is gone: so are its processes

    async def _spawn(
        self,
        nursery: trio.Nursery,
        pod: PodObject,
        running: RunningContainer,
        key: _Key,
        command: tuple[str, ...],
        env: dict[str, str],
        ended: Callable[[int], None],
    ) -> str | None:
        streams = ExecStreams(stdin=running.stdin, stdout=True, stderr=True, tty=running.tty)
        try:
            child = await spawn(
                command,
                env=_environment(pod, env),
                cwd=self._cwd,
                streams=streams,
                registry=self._registry,
            )
        except OSError as error:
            reason = (
                "executable file not found in $PATH"
                if isinstance(error, FileNotFoundError)
                else error.strerror or type(error).__name__
            )
            return f'exec: "{command[0]}": {reason}'
        self._running[key] = running
        scope = trio.CancelScope()
        self._scopes[key] = scope
        self._cluster.faults.process_started(pod.namespace, pod.name, child.pid)

        async def supervise() -> None:
            with scope:
                try:
                    code = await running.run(child)
                finally:
                    self._cluster.faults.process_ended(pod.namespace, pod.name, child.pid)
                ended(code)

        nursery.start_soon(supervise)
        return None

    async def _start_main(
        self, nursery: trio.Nursery, pod: PodObject, container: ContainerState, key: _Key
    ) -> None:
        running = RunningContainer(pod, container.name, stdin=container.stdin, tty=container.tty)

        def ended(code: int) -> None:
            with self._cluster.changing():
                container.running = False
                container.ready = False
                container.exit_code = code

        failure = await self._spawn(nursery, pod, running, key, container.command, {}, ended)
        if failure is not None:
            _log.warning(
                "container %s of pod %s could not start: %s", container.name, pod.name, failure
            )
            self._running[key] = running
            running.log.end()
            ended(128)

    async def _start_ephemeral(
        self, nursery: trio.Nursery, pod: PodObject, ephemeral: EphemeralContainer, key: _Key
    ) -> None:
        default = self._cluster.images.get(ephemeral.image)
        if default is None:
            policy = ephemeral.spec.get("imagePullPolicy") or "IfNotPresent"
            with self._cluster.changing():
                if policy == "Never":
                    ephemeral.reason = "ErrImageNeverPull"
                    ephemeral.message = (
                        f'Container image "{ephemeral.image}" is not present with pull policy '
                        "of Never"
                    )
                else:
                    ephemeral.reason = "ImagePullBackOff"
                    ephemeral.message = f'Back-off pulling image "{ephemeral.image}"'
            self._running[key] = RunningContainer(pod, ephemeral.name, stdin=False, tty=False)
            return
        command = ephemeral.command or default
        running = RunningContainer(pod, ephemeral.name, stdin=ephemeral.stdin, tty=ephemeral.tty)

        def ended(code: int) -> None:
            with self._cluster.changing():
                ephemeral.state = "terminated"
                ephemeral.exit_code = code
                ephemeral.reason = "Completed" if code == 0 else "Error"
                ephemeral.message = None

        failure = await self._spawn(nursery, pod, running, key, command, ephemeral.env, ended)
        with self._cluster.changing():
            if failure is not None:
                self._running[key] = running
                running.log.end()
                ephemeral.state = "terminated"
                ephemeral.exit_code = 128
                ephemeral.reason = "StartError"
                ephemeral.message = f"failed to create containerd task: {failure}"
            elif ephemeral.state == "waiting":
                ephemeral.state = "running"
                ephemeral.reason = None
                ephemeral.message = None

    def running(self) -> Iterator[RunningContainer]:
        """Every container process started so far (ended ones included)."""
        return iter(list(self._running.values()))
