"""``PortForward``: connections to the ports of a workspace's Deployment, and local listeners.

A forward resolves its target exactly as an exec does (the request's validation, the
Deployment's ownership labels, the pod's ownership through its ReplicaSet, the ranking of ready
pods: ``resolve_target``), then opens the API server's ``pods/portforward`` upgrade for it:

- ``transport="tunnel"``: one WebSocket (``SPDY/3.1+portforward.k8s.io``) carries every
  connection, each with half-close (:mod:`._tunnel`);
- ``transport="legacy"``: one WebSocket (``?ports=N``, ``v4.channel.k8s.io``) per connection,
  no half-close (:mod:`._legacy`);
- ``transport="auto"`` (the default): the tunnel, and the legacy channels for the rest of the
  forward once the server answers the tunnel's upgrade with 400 (a server without the
  ``PortForwardWebsockets`` gate says ``query parameter "port" is required``).

When the pod goes away, the tunnel ends and its connections fail with an ``ExecError`` saying
so; the next :meth:`PortForward.connect` resolves the target again (ranking the dead pod last)
and opens a new tunnel to the Deployment's next ready pod, without the caller doing anything.
With the backend's watch cache (``KubernetesBackend.watch``), each new connection also checks,
in memory, that its tunnel's pod is still the one the cache ranks first: a pod that is
terminating (still serving its open connections) gets no new ones.
A legacy connection refused with 404 (the pod is gone) is retried once the same way.
A real kubelet does not end a deleted pod's tunnel (nor refuse its legacy upgrades while it is
terminating), and a server dying with its pod ends its connections cleanly: so a connection's
end from the pod's side is checked against the pod (:class:`_AuditedStream`), and after any
failed connection the next one first resolves the target again (``_follow_the_target``).

Keepalive (``ping_interval``, ``pong_timeout``): a SPDY PING per tunnel; on the legacy channels
a WebSocket ping per connection, all sent by one task of the forward (``SharedKeepalive``).

Limits: the forward holds one of its workspace's session slots while open (the service's
``SessionLimits.max_sessions_per_workspace``, as Leases with ``ClusterSlots``: a full workspace
is refused on entry with ``EXEC_ABORTED``), ``max_connections`` open at once (one more is
refused with ``EXEC_FAILED``), and in :meth:`PortForward.listen` an ``idle_timeout`` after which
a connection with no bytes either way is closed. Every connection ends with one
:class:`PortForwardRecord` to the ``audit`` hook: its pod and port, the bytes each way and how
it ended.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, Literal, Self

import anyio
import anyio.abc
import attrs
from anyio.abc import SocketAttribute

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, ResolvedTarget, Workspace
from kuber_exec_core.portforward import LEGACY_SUBPROTOCOL, TUNNEL_SUBPROTOCOL, check_port

from .._backend import backend_hooks
from .._connection._keepalive import SharedKeepalive
from .._drivers import resolve_target
from .._limits import WorkspaceSlots
from .._pods import read_pod
from .._service import ExecService
from ._legacy import LegacyStream
from ._listener import LocalConnection, accept_connections
from ._tunnel import TunnelConnection, TunnelStream

__all__ = ["BoundPort", "PortForward", "PortForwardRecord", "PortForwardTransport"]

_log = logging.getLogger("kuber_exec")

PortForwardTransport = Literal["auto", "tunnel", "legacy"]
#: How often new connections have the target resolved again in the background, in seconds.
_REVALIDATE_INTERVAL = 1.0
#: What resolves the target (the resolution validates an exec request; nothing runs).
_RESOLVE_COMMAND = ("port-forward",)


class _UseLegacy(Exception):
    """The forward fell back to the legacy channels while this connection waited."""


@attrs.frozen
class PortForwardRecord:
    """What one forwarded connection did (the ``audit`` hook's argument)."""

    workspace_uid: str
    namespace: str
    deployment: str
    pod: str
    port: int
    transport: Literal["tunnel", "legacy"]
    bytes_to_pod: int
    bytes_from_pod: int
    #: ``"closed"``, or ``"failed"`` with ``error`` saying why.
    outcome: Literal["closed", "failed"]
    error: str | None = None


@attrs.frozen
class BoundPort:
    """A local listener of :meth:`PortForward.listen`: ``address:local_port`` -> ``remote_port``."""

    address: str
    local_port: int
    remote_port: int


class _AuditedStream(anyio.abc.ByteStream):
    """A connection that reports itself to the audit hook once, when closed.

    The pod's end of the stream is checked against the pod: a server in the pod dies with it,
    and the kubelet then ends the connection as cleanly as a server that closed it. When the
    pod is gone or being deleted (one read of the pod, or the watch cache), that end is an
    ``ExecError`` saying so, not an end of stream. A connection whose end we half-closed first
    ends as the server says, unchecked.
    """

    def __init__(
        self,
        inner: TunnelStream | LegacyStream,
        forward: PortForward,
        target: ResolvedTarget,
    ) -> None:
        self._inner = inner
        self._forward = forward
        self._target = target
        self._failure: ExecError | None = None
        self._eof_sent = False
        self._end_checked = False
        self._done = False

    @property
    def port(self) -> int:
        return self._inner.port

    @property
    def half_close(self) -> bool:
        """Whether ``send_eof`` reaches the pod (the tunnel) or only stops our sends (the
        legacy channels, which cannot say it)."""
        return self._inner.half_close

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._failure is not None and self._end_checked:
            raise self._failure
        try:
            return await self._inner.receive(max_bytes)
        except ExecError as error:
            self._fail(error)
            raise
        except anyio.EndOfStream:
            if self._eof_sent or self._end_checked:
                raise
            self._end_checked = True
            going = await self._forward._pod_going_away(self._target)
            if going is None:
                raise
            self._fail(
                ExecError(
                    ExecErrorCode.FAILED,
                    f"the connection to port {self.port} ended: pod {self._target.pod} {going}",
                )
            )
            assert self._failure is not None
            raise self._failure from None

    async def send(self, item: bytes) -> None:
        try:
            await self._inner.send(item)
        except ExecError as error:
            self._fail(error)
            raise

    def _fail(self, error: ExecError) -> None:
        if self._failure is None:
            self._failure = error
            self._forward._failed()

    async def send_eof(self) -> None:
        self._eof_sent = True
        await self._inner.send_eof()

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            await self._inner.aclose()
        finally:
            self._forward._release()
            self._forward._record(self._inner, self._failure)


class PortForward:
    """Port-forward to ``workspace``'s Deployment ``deployment`` (module docstring). Use it as
    an async context manager; leaving it ends every connection and listener.

    Raises (on entry):
        ExecError: the request's validation and the targeting refusals of an exec
            (``EXEC_INVALID``, ``EXEC_TARGET_NOT_FOUND``, ``EXEC_TARGET_FORBIDDEN``,
            ``EXEC_TARGET_NOT_READY``).
        TypeError: the service's backend cannot open an upgrade (``open_upgrade``), or a bad
            ``transport``.
    """

    def __init__(
        self,
        service: ExecService,
        workspace: Workspace,
        deployment: str,
        *,
        transport: PortForwardTransport = "auto",
        ping_interval: float | None = 10.0,
        pong_timeout: float = 10.0,
        max_connections: int = 1024,
        idle_timeout: float | None = None,
        audit: Callable[[PortForwardRecord], None] | None = None,
    ) -> None:
        if transport not in ("auto", "tunnel", "legacy"):
            raise TypeError(f"transport must be 'auto', 'tunnel' or 'legacy', not {transport!r}")
        if not callable(getattr(service.backend, "open_upgrade", None)):
            raise TypeError(
                f"port-forward needs a backend that opens upgrades (KubernetesBackend), "
                f"not {type(service.backend).__name__}"
            )
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise TypeError("max_connections must be an int")
        if max_connections < 1:
            raise ExecError(ExecErrorCode.INVALID, "max_connections must be at least 1")
        self.service = service
        self.request = ExecRequest(
            workspace=workspace, deployment=deployment, command=list(_RESOLVE_COMMAND)
        )
        self.transport: PortForwardTransport = transport
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._audit = audit
        self._open = 0
        self._target: ResolvedTarget | None = None
        self._tunnel: TunnelConnection | None = None
        #: A connection failed: the next one first asks whether the target moved.
        self._recheck = False
        self._revalidating = False
        self._revalidated_at = -_REVALIDATE_INTERVAL
        self._lock = anyio.Lock()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._slot = contextlib.AsyncExitStack()
        self._keepalive: SharedKeepalive | None = None

    @property
    def transport_in_use(self) -> Literal["tunnel", "legacy"] | None:
        """The transport the forward's connections use now (``None`` before the first one;
        ``"legacy"`` once ``"auto"`` fell back)."""
        if self.transport == "legacy":
            return "legacy"
        return "tunnel" if self._tunnel is not None else None

    @property
    def target(self) -> ResolvedTarget | None:
        """The pod the forward's connections go to now (``None`` before entry)."""
        return self._target

    async def __aenter__(self) -> Self:
        self._target = await self._resolve(avoid=None)
        # A forward holds one of its workspace's session slots while it is open, as an
        # interactive session does (SessionLimits.max_sessions_per_workspace; a Lease with
        # ClusterSlots).
        self._slot = contextlib.AsyncExitStack()
        await self._slot.__aenter__()
        try:
            await self._take_slot(self._slot)
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
        except BaseException:
            await self._slot.aclose()
            raise
        self._tasks = tasks
        if self._ping_interval is not None:
            # One task pings every legacy connection (the tunnel pings in SPDY, per tunnel).
            self._keepalive = SharedKeepalive(self._ping_interval, self._pong_timeout)
            tasks.start_soon(self._keepalive.run)
        return self

    async def _take_slot(self, stack: contextlib.AsyncExitStack) -> None:
        slots = self.service.workspace_slots
        workspace = self.request.workspace
        if isinstance(slots, WorkspaceSlots):
            if slots.take(workspace):
                stack.callback(slots.give_back, workspace)
            return
        await stack.enter_async_context(slots.hold(workspace))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tasks, self._tasks = self._tasks, None
        if self._tunnel is not None:
            self._tunnel.stop()
        try:
            if tasks is not None:
                tasks.cancel_scope.cancel()
                await tasks.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await self._slot.aclose()

    async def _resolve(self, avoid: str | None) -> ResolvedTarget:
        return await resolve_target(
            self.service.backend, self.request, self.service.limits, avoid=avoid
        )

    def _cached_target(self) -> ResolvedTarget | None:
        """The target as the backend's watch cache has it now, in memory (``None``: no synced
        cache, so nothing to compare without a round trip)."""
        return backend_hooks(self.service.backend).resolve_cached(self.request, self.service.limits)

    def _open_upgrade(
        self, target: ResolvedTarget, query: str, subprotocol: str
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        path = f"/api/v1/namespaces/{target.namespace}/pods/{target.pod}/portforward{query}"
        opener: Any = self.service.backend.open_upgrade  # type: ignore[attr-defined]
        return opener(  # type: ignore[no-any-return]
            path, [subprotocol], namespace=target.namespace, subresource="portforward"
        )

    # -- connections ---------------------------------------------------------------------------

    async def connect(self, port: int) -> anyio.abc.ByteStream:
        """See :meth:`_connect_audited` (the stream's type is anyio's, for callers)."""
        return await self._connect_audited(port)

    async def _connect_audited(self, port: int) -> _AuditedStream:
        """A new connection to ``port`` of the Deployment's current pod, as an anyio byte
        stream (``send_eof`` half-closes on the tunnel). Close it when done.

        Raises:
            ExecError: ``EXEC_INVALID`` for a port outside 1..65535; ``EXEC_FAILED`` when the
                forward is not open, its connection limit is reached, or the server refused
                the connection or the upgrade; the targeting errors when the Deployment
                changed.
        """
        check_port(port)
        if self._tasks is None:
            raise ExecError(ExecErrorCode.FAILED, "the PortForward is not open")
        if self._open >= self.max_connections:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"the port-forward already has {self.max_connections} connections open",
            )
        self._open += 1
        try:
            if self._recheck:
                await self._follow_the_target()
            else:
                self._revalidate_soon()
            opened: tuple[TunnelStream | LegacyStream, ResolvedTarget]
            mode = self.transport  # what this connection was asked for, whatever others find
            if mode != "legacy":
                try:
                    opened = await self._connect_tunnel(port)
                except _UseLegacy:
                    opened = await self._connect_legacy(port)
                except ExecError as error:
                    if mode != "auto" or error.http_status != 400:
                        raise
                    # No tunnel on this server: the legacy channels from now on.
                    self.transport = "legacy"
                    opened = await self._connect_legacy(port)
            else:
                opened = await self._connect_legacy(port)
        except BaseException:
            self._open -= 1
            raise
        # The pod this connection reached, not ``self._target``: a background revalidation may
        # have moved that on meanwhile, and the connection's end is still checked against its
        # own pod (found under load in CI).
        inner, target = opened
        return _AuditedStream(inner, self, target)

    def _release(self) -> None:
        self._open -= 1

    def _failed(self) -> None:
        self._recheck = True

    def _revalidate_soon(self) -> None:
        """At most once every ``_REVALIDATE_INTERVAL`` seconds, a new connection has the target
        resolved again in the background (it does not wait for it): a deleted pod's tunnel
        (and a terminating pod's legacy upgrades) go on working for up to a minute on a real
        kubelet while nothing fails, and new connections should leave that pod within about
        a second. With a synced watch cache the resolution is in memory."""
        now = anyio.current_time()
        if self._revalidating or now - self._revalidated_at < _REVALIDATE_INTERVAL:
            return
        if self._tasks is None:
            return
        self._revalidating = True
        self._revalidated_at = now
        self._tasks.start_soon(self._revalidate)

    async def _revalidate(self) -> None:
        try:
            self._recheck = True
            await self._follow_the_target()
        finally:
            self._revalidating = False

    async def _pod_going_away(self, target: ResolvedTarget) -> str | None:
        """Why ``target``'s pod no longer serves (``"is gone"``, ``"is being deleted"``,
        ``"is not running"``), or ``None`` while it does (or when it cannot be read: the
        connection's own end then stands). The watch cache answers in memory when it still
        ranks that pod first; otherwise one read of the pod."""
        cached = self._cached_target()
        if cached is not None and cached.pod == target.pod:
            return None
        try:
            pod = await read_pod(self.service.backend, target)
        except ExecError as error:
            return "is gone" if error.code is ExecErrorCode.TARGET_NOT_FOUND else None
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return "is being deleted"
        if (pod.get("status") or {}).get("phase") != "Running":
            return "is not running"
        return None

    async def _follow_the_target(self) -> bool:
        """After a connection failed, resolve the target again (one read): when the Deployment
        ranks another pod first now (the old one is terminating or gone), new connections go
        there. A kubelet does not end a deleted pod's tunnel or refuse its legacy upgrades
        while the pod still exists; its new connections would only fail one by one. Returns
        whether the target moved."""
        if not self._recheck:
            return False  # another connection did it
        self._recheck = False
        try:
            # Outside the lock: new connections on the current tunnel do not wait for it.
            target = await self._resolve(avoid=None)
        except ExecError:
            return False  # no other pod to go to: the connection's own attempt says why
        async with self._lock:
            if self._target is not None and target.pod == self._target.pod:
                return False
            self._target = target
            tunnel, self._tunnel = self._tunnel, None
            if tunnel is not None:
                tunnel.retire()  # it ends with its last connection
            return True

    def _record(self, stream: TunnelStream | LegacyStream, failure: ExecError | None) -> None:
        if self._audit is None or self._target is None:
            return
        self._audit(
            PortForwardRecord(
                workspace_uid=self.request.workspace.uid,
                namespace=self._target.namespace,
                deployment=self._target.deployment,
                pod=stream.pod,
                port=stream.port,
                transport="legacy" if isinstance(stream, LegacyStream) else "tunnel",
                bytes_to_pod=stream.bytes_sent,
                bytes_from_pod=stream.bytes_received,
                outcome="failed" if failure is not None else "closed",
                error=None if failure is None else failure.message,
            )
        )

    async def _connect_tunnel(self, port: int) -> tuple[TunnelStream, ResolvedTarget]:
        """A connection to ``port`` over the current tunnel, and the target that tunnel goes to."""
        tunnel, target = await self._current_tunnel()
        try:
            return await tunnel.open(port), target
        except ExecError:
            if not tunnel.closed:
                # Nothing listening, or the pod is going away: in the second case (the
                # target moved) once more on the new pod's tunnel.
                self._recheck = True
                moved = await self._follow_the_target()
                if not moved and self._tunnel is tunnel:
                    raise  # this connection failed; the tunnel lives on
        # The tunnel ended while opening (its pod went away): once more, on a new one.
        tunnel, target = await self._current_tunnel()
        return await tunnel.open(port), target

    async def _current_tunnel(self) -> tuple[TunnelConnection, ResolvedTarget]:
        """The tunnel new connections use, started when there is none, with its target (under
        the lock, ``self._target`` is the current tunnel's)."""
        async with self._lock:
            if self.transport == "legacy":
                raise _UseLegacy  # a connection that waited here saw the fallback happen
            tunnel = self._tunnel
            if tunnel is not None and not tunnel.closed:
                cached = self._cached_target()
                if cached is None or cached.pod == tunnel.pod:
                    assert self._target is not None
                    return tunnel, self._target
                # The watch cache ranks another pod first now (this one is terminating, or
                # gone): new connections go there; the old tunnel ends with its last one.
                tunnel.retire()
                self._target = cached
            elif tunnel is not None or self._target is None:
                # The last tunnel ended: its pod may be gone. Resolve again, that pod last.
                self._target = await self._resolve(avoid=tunnel.pod if tunnel else None)
            assert self._tasks is not None
            started: TunnelConnection = await self._tasks.start(self._run_tunnel, self._target)
            self._tunnel = started
            return started, self._target

    async def _run_tunnel(
        self,
        target: ResolvedTarget,
        *,
        task_status: anyio.abc.TaskStatus[TunnelConnection] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with self._open_upgrade(target, "", TUNNEL_SUBPROTOCOL) as transport:
            tunnel = TunnelConnection(
                transport,
                pod=target.pod,
                ping_interval=self._ping_interval,
                pong_timeout=self._pong_timeout,
            )
            task_status.started(tunnel)
            await tunnel.run()
            if tunnel.error is not None:
                _log.info("port-forward tunnel to pod %s ended: %s", target.pod, tunnel.error)

    async def _connect_legacy(self, port: int) -> tuple[LegacyStream, ResolvedTarget]:
        """A legacy-channel connection to ``port`` of the target's pod, and that target."""
        for attempt in range(2):
            target = self._target
            assert target is not None
            stack = contextlib.AsyncExitStack()
            try:
                transport = await stack.enter_async_context(
                    self._open_upgrade(target, f"?ports={port}", LEGACY_SUBPROTOCOL)
                )
            except ExecError as error:
                await stack.aclose()
                if attempt or error.http_status in (400, 401, 403):
                    raise  # no tunnel here, or refused: another pod would say the same
                if error.http_status == 404:  # the pod is gone
                    self._target = await self._resolve(avoid=target.pod)
                    continue
                # A terminating pod's kubelet answers 500: once more if the target moved.
                self._recheck = True
                if not await self._follow_the_target():
                    raise
                continue
            stream = LegacyStream(transport, stack, port, pod=target.pod, keepalive=self._keepalive)
            return stream, target
        raise AssertionError("unreachable")  # pragma: no cover

    # -- local listeners -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def listen(
        self, ports: Sequence[tuple[int, int]], *, address: str = "127.0.0.1"
    ) -> AsyncIterator[list[BoundPort]]:
        """Listen on ``address`` for each ``(local_port, remote_port)`` (local 0: a free port)
        and forward every accepted connection to ``remote_port`` until the block ends; yields
        the bound ports in order. A connection that fails (nothing listening in the pod, the
        pod gone) is closed and logged; the listeners go on.

        Raises:
            ExecError: ``EXEC_INVALID`` for a remote port outside 1..65535 or a local one
                outside 0..65535; ``EXEC_FAILED`` when a local port cannot be bound.
        """
        for local, remote in ports:
            check_port(remote)
            if isinstance(local, bool) or not isinstance(local, int) or not 0 <= local <= 65535:
                raise ExecError(
                    ExecErrorCode.INVALID, f"local port must be within 0..65535, not {local!r}"
                )
        async with contextlib.AsyncExitStack() as stack:
            bound: list[BoundPort] = []
            listeners: list[tuple[anyio.abc.Listener[anyio.abc.SocketStream], int]] = []
            for local, remote in ports:
                try:
                    listener = await anyio.create_tcp_listener(
                        local_host=address, local_port=local, reuse_port=False
                    )
                except OSError as error:
                    raise ExecError(
                        ExecErrorCode.FAILED,
                        f"cannot listen on {address}:{local}: {error.strerror}",
                    ) from None
                await stack.enter_async_context(listener)
                listeners.append((listener, remote))
                bound.append(BoundPort(address, _local_port(listener), remote))
            async with anyio.create_task_group() as tasks:
                # Accepted by hand, not with the listener's serve(): see ._listener.
                for serving, remote in listeners:
                    for listening in _sockets(serving):
                        tasks.start_soon(
                            accept_connections,
                            listening,
                            functools.partial(self._serve, remote),
                            tasks,
                        )
                try:
                    yield bound
                finally:
                    tasks.cancel_scope.cancel()

    async def _serve(self, remote: int, client: LocalConnection) -> None:
        async with client:
            try:
                stream = await self._connect_audited(remote)
            except ExecError as error:
                _log.warning("port-forward to port %d failed: %s", remote, error)
                return
            async with stream:
                await _splice(client, stream, self.idle_timeout, half_close=stream.half_close)


def _local_port(listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> int:
    port: int = _sockets(listener)[0].getsockname()[1]
    return port


def _sockets(listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> list[socket.socket]:
    """The listening sockets of a TCP listener (one per address it is bound to: a listener on
    one address is a MultiListener of one SocketListener)."""
    inners = getattr(listener, "listeners", [listener])
    return [inner.extra(SocketAttribute.raw_socket) for inner in inners]


async def _splice(
    local: anyio.abc.ByteStream,
    remote: anyio.abc.ByteStream,
    idle_timeout: float | None,
    *,
    half_close: bool,
) -> None:
    """Copy both ways, passing each side's end of stream on as a half-close, until both ended
    or either failed (or nothing moved for ``idle_timeout`` seconds). Without ``half_close``
    (the legacy channels) the local side's end ends the connection: the pod could never learn
    of it, and would hold the connection open forever."""
    activity = [anyio.current_time()]

    async def pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        async for data in source:
            activity[0] = anyio.current_time()
            await sink.send(data)
        if sink is remote and not half_close:
            raise anyio.ClosedResourceError  # ends the splice: see the docstring
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await sink.send_eof()

    async def guarded(
        source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, scope: anyio.CancelScope
    ) -> None:
        try:
            await pump(source, sink)
        except (ExecError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
            if isinstance(error, ExecError):
                _log.warning("port-forward connection failed: %s", error)
            scope.cancel()

    async def idle(scope: anyio.CancelScope) -> None:
        assert idle_timeout is not None
        while True:
            left = activity[0] + idle_timeout - anyio.current_time()
            if left <= 0:
                scope.cancel()
                return
            await anyio.sleep(left)

    async with anyio.create_task_group() as tasks:
        if idle_timeout is not None:
            tasks.start_soon(idle, tasks.cancel_scope)
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(guarded, local, remote, tasks.cancel_scope)
            pumps.start_soon(guarded, remote, local, tasks.cancel_scope)
        tasks.cancel_scope.cancel()
