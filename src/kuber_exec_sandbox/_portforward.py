"""``pods/portforward``: both WebSocket transports and SPDY/3.1, served to local listeners.

A sandbox pod's ports are loopback listeners the test maps: ``PodObject.ports`` maps a container
port to the ``(host, port)`` that answers for it, so two pods can "listen" on the same container
port. A port with no mapping, or whose listener refuses, fails that connection with the
kubelet's kind of message on its error stream (the tunnel) or error channel (legacy); the
tunnel lives on.

The upgrade is decided as a real cluster does (:func:`plan_portforward`): 404 for a missing
pod, 400 without a WebSocket upgrade, and when the client offers no tunnel (or the sandbox
serves none, ``tunnel=False``: a cluster without the ``PortForwardWebsockets`` gate) and names
no port, the kubelet's 400 ``query parameter "port" is required``, as plain text.

The third transport is the one every cluster has served since 1.0 and kubectl used before 1.31
(and uses with ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``): an HTTP/1.1 upgrade to ``SPDY/3.1``
negotiated by ``X-Stream-Protocol-Version: portforward.k8s.io``, then the very SPDY session the
tunnel carries in WebSocket messages, as raw bytes on the connection (:class:`SpdyConnection`).
A SPDY upgrade offering no ``portforward.k8s.io`` is the kubelet's 403 (no protocol offered:
400), in plain text.

When the pod is deleted, every forward to it ends: its connections fail and the WebSocket
(or SPDY connection) closes, as when a real pod's network namespace goes away.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Sequence

import attrs
import trio

from kuber_exec_core import NEED_DATA
from kuber_exec_core.portforward import (
    LEGACY_SUBPROTOCOL,
    PORT_REQUIRED_MESSAGE,
    TUNNEL_SUBPROTOCOL,
    ConnectionData,
    ConnectionEnded,
    ConnectionEOF,
    ConnectionRequested,
    ConnectionWritable,
    LegacyServer,
    PortForwardProtocolError,
    TunnelEvent,
    TunnelServer,
)

from ._cluster import Cluster, PodObject
from ._exec_request import upgrade_target
from ._rest import RestResponse, status_response
from ._websocket import ClientGone, FrameTooLarge, WebSocket

__all__ = [
    "SPDY_PROTOCOL",
    "PortForwardPlan",
    "SpdyConnection",
    "plan_portforward",
    "portforward_route",
    "run_portforward",
]

#: The ``X-Stream-Protocol-Version`` of port-forward over a SPDY/3.1 upgrade.
SPDY_PROTOCOL = "portforward.k8s.io"

_READ_BYTES = 64 * 1024
#: Bytes the sandbox holds for one connection's pod side before it stops reading the tunnel (a
#: client without flow control, as kubectl, can send faster than the pod reads).
_MAX_BUFFERED = 1 << 20
#: Bytes queued for the WebSocket above which the forwards wait for the writer.
_HIGH_WATER = 1 << 20
#: How long a closed SPDY connection keeps reading (and dropping) the client's bytes.
_LINGER_SECONDS = 2.0


def portforward_route(path: str) -> tuple[str, str] | None:
    parts = path.split("/")
    if (
        len(parts) == 8
        and parts[1:4] == ["api", "v1", "namespaces"]
        and parts[5] == "pods"
        and parts[7] == "portforward"
        and parts[4]
        and parts[6]
    ):
        return parts[4], parts[6]
    return None


@attrs.frozen(kw_only=True)
class PortForwardPlan:
    """An accepted port-forward upgrade: the pod, the transport, and (legacy) the ports."""

    pod: PodObject
    cluster: Cluster
    subprotocol: str
    ports: tuple[int, ...] = ()
    #: Over an HTTP/1.1 upgrade to SPDY/3.1 (the tunnel's session, without WebSocket framing).
    spdy: bool = False

    @property
    def tunnel(self) -> bool:
        return self.subprotocol == TUNNEL_SUBPROTOCOL


class SpdyConnection:
    """The upgraded connection of a SPDY/3.1 port-forward, with the two calls the tunnel makes of
    a WebSocket: each ``send_message`` is raw bytes on the connection, and ``receive_message``
    whatever bytes arrived (SPDY frames cut anywhere, which the session reassembles)."""

    def __init__(self, stream: trio.SocketStream, trailing: bytes) -> None:
        self._stream = stream
        self._trailing = trailing

    async def send_message(self, message: bytes) -> None:
        """Raises: ClientGone: the connection is closed or broken."""
        try:
            await self._stream.send_all(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise ClientGone("the connection broke") from None

    async def receive_message(self) -> bytes:
        """Raises: ClientGone: the client closed (or broke) the connection."""
        if self._trailing:
            data, self._trailing = self._trailing, b""
            return data
        try:
            data = bytes(await self._stream.receive_some(_READ_BYTES))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            raise ClientGone("the client closed the connection")
        return data

    async def close(self) -> None:
        """Half-close, read and drop what the client still sends (bounded: closing with unread
        input sends a TCP reset, which can destroy the last frames), close. Never raises."""
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._stream.send_eof()
                with trio.move_on_after(_LINGER_SECONDS):
                    while await self._stream.receive_some(_READ_BYTES):
                        pass
        finally:
            with trio.CancelScope(shield=True):
                await self._stream.aclose()

    async def drop(self) -> None:
        """As :meth:`close`: SPDY has no closing frame of its own beyond GOAWAY."""
        await self.close()


def plan_portforward(
    cluster: Cluster,
    *,
    method: str,
    namespace: str,
    pod_name: str,
    query: Sequence[tuple[str, str]],
    websocket_upgrade: bool,
    offered: Sequence[str],
    tunnel: bool,
    spdy_offered: Sequence[str] | None = None,
) -> PortForwardPlan | RestResponse:
    """The plan for a port-forward request, or the HTTP answer that refuses it.

    ``spdy_offered``: the ``X-Stream-Protocol-Version`` values of an upgrade to SPDY/3.1
    (``None``: not a SPDY upgrade)."""
    pod = upgrade_target(cluster, method, namespace, pod_name)
    if isinstance(pod, RestResponse):
        return pod
    if pod.node_name is None:
        return status_response(400, "BadRequest", f"pod {pod.name} does not have a host assigned")
    if spdy_offered is not None and not websocket_upgrade:
        return _plan_spdy(pod, cluster, spdy_offered)
    if not websocket_upgrade:
        return status_response(
            400,
            "BadRequest",
            "Upgrade request required: the sandbox serves port-forward over WebSocket only",
        )
    if tunnel and TUNNEL_SUBPROTOCOL in offered:
        return PortForwardPlan(pod=pod, cluster=cluster, subprotocol=TUNNEL_SUBPROTOCOL)
    texts = [value for key, value in query if key in ("ports", "port")]
    if not texts:
        return RestResponse(400, f"{PORT_REQUIRED_MESSAGE}\n".encode(), "text/plain; charset=utf-8")
    ports: list[int] = []
    for text in texts:
        for piece in text.split(","):
            value = int(piece) if piece.strip().isdigit() else 0
            if not 1 <= value <= 65535:
                return status_response(400, "BadRequest", f"invalid port {piece!r}")
            ports.append(value)
    if offered and LEGACY_SUBPROTOCOL not in offered:
        return RestResponse(403, b"", "text/plain; charset=utf-8")
    return PortForwardPlan(
        pod=pod,
        cluster=cluster,
        subprotocol=LEGACY_SUBPROTOCOL if offered else "",
        ports=tuple(ports),
    )


def _plan_spdy(
    pod: PodObject, cluster: Cluster, offered: Sequence[str]
) -> PortForwardPlan | RestResponse:
    # The kubelet's handshake (httpstream.Handshake): a protocol is required, and must match.
    if not offered:
        message = "unable to upgrade: X-Stream-Protocol-Version is required"
        return RestResponse(400, f"{message}\n".encode(), "text/plain; charset=utf-8")
    if SPDY_PROTOCOL not in offered:
        message = (
            f"unable to upgrade: unable to negotiate protocol: client supports "
            f"[{' '.join(offered)}], server supports [{SPDY_PROTOCOL}]"
        )
        return RestResponse(403, f"{message}\n".encode(), "text/plain; charset=utf-8")
    return PortForwardPlan(pod=pod, cluster=cluster, subprotocol=TUNNEL_SUBPROTOCOL, spdy=True)


def _refused_message(pod: PodObject, port: int, reason: str) -> str:
    # The kubelet's shape: "error forwarding port P to pod ID, uid : <runtime's error>".
    return (
        f"error forwarding port {port} to pod {pod.uid}, uid : failed to connect to "
        f"localhost:{port} inside namespace of pod {pod.name}: {reason}"
    )


async def _connect(pod: PodObject, port: int) -> trio.SocketStream | str:
    """The pod's listener for ``port``, or the failure's message."""
    address = pod.ports.get(port)
    if address is None:
        return _refused_message(pod, port, "connect: connection refused")
    try:
        return await trio.open_tcp_stream(*address)
    except OSError as error:
        reason = "connection refused" if error.errno in (None, errno.ECONNREFUSED) else str(error)
        return _refused_message(pod, port, f"connect: {reason}")


async def _watch_pod(plan: PortForwardPlan, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` once the pod is deleted (woken by the cluster's change signal)."""
    pod, token = plan.pod, trio.lowlevel.current_trio_token()
    changed = [trio.Event()]

    def wake() -> None:  # any thread
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(lambda: changed[0].set())

    remove = plan.cluster.add_listener(wake)
    try:
        while True:
            changed[0] = trio.Event()
            if plan.cluster.pod(pod.namespace, pod.name) is not pod:
                break
            await changed[0].wait()
    finally:
        remove()
    scope.cancel()


class _Dropped(Exception):
    """The fault ``Faults.drop_port_forward_after`` ends this WebSocket now."""


class _Counting:
    """The WebSocket's send side, counting toward an armed drop (``None``: none armed)."""

    def __init__(self, websocket: WebSocket | SpdyConnection, drop_after: int | None) -> None:
        self._websocket = websocket
        self._left = drop_after

    async def send_message(self, message: bytes) -> None:
        await self._websocket.send_message(message)
        if self._left is not None:
            self._left -= len(message)
            if self._left <= 0:
                raise _Dropped

    async def receive_message(self) -> bytes | str:
        return await self._websocket.receive_message()


async def run_portforward(websocket: WebSocket | SpdyConnection, plan: PortForwardPlan) -> None:
    """Serve one accepted port-forward WebSocket (or SPDY connection) until either side ends it
    (or an armed ``drop_port_forward_after`` fault drops it)."""
    pod = plan.pod
    drop_after = plan.cluster.faults.take_forward_drop(pod.namespace, pod.name)
    counting = _Counting(websocket, drop_after)
    dropped = drop_after == 0
    try:
        if not dropped:
            if plan.tunnel:
                await _Tunnel(counting, plan).run()
            else:
                await _run_legacy(counting, plan)
    except* _Dropped:
        dropped = True
    finally:
        if dropped:
            await websocket.drop()
        else:
            await websocket.close()


# -- the tunnel ----------------------------------------------------------------------------------


@attrs.define(eq=False)
class _Forward:
    request_id: str
    inbound: bytearray = attrs.field(factory=bytearray)
    arrived: trio.Event = attrs.field(factory=trio.Event)
    drained: trio.Event = attrs.field(factory=trio.Event)
    client_eof: bool = False
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)


class _Tunnel:
    def __init__(self, websocket: _Counting, plan: PortForwardPlan) -> None:
        self.websocket = websocket
        self.plan = plan
        self.tunnel = TunnelServer()
        self.forwards: dict[str, _Forward] = {}
        self.writable = trio.Event()
        self.kick = trio.Event()
        self.sent = trio.Event()
        #: Bytes the writer took from the session, and bytes it finished sending.
        self.taken = 0
        self.written = 0
        self.ended = False
        self.cancel_scope = trio.CancelScope()

    async def flush(self) -> None:
        """Have the writer send what is queued; wait while over ``_HIGH_WATER`` is queued. The
        bytes taken from the session hold every connection's frames: only the writer, which is
        cancelled with the whole tunnel, ever holds them."""
        self.kick.set()
        while self.tunnel.session.pending_bytes > _HIGH_WATER and not self.ended:
            sent = self.sent
            await sent.wait()

    async def write(self) -> None:
        try:
            while True:
                kick = self.kick
                await kick.wait()
                self.kick = trio.Event()
                data = self.tunnel.data_to_send()
                self.taken += len(data)
                if data:
                    await self.websocket.send_message(data)
                self.written += len(data)
                self.sent.set()
                self.sent = trio.Event()
        finally:
            self.ended = True
            self.sent.set()

    async def run(self) -> None:
        with self.cancel_scope:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_watch_pod, self.plan, self.cancel_scope)
                    nursery.start_soon(self.write)
                    await self.flush()
                    await self.read(nursery)
                    # What the reader queued last (a GOAWAY) goes out before the end. The
                    # writer takes bytes from the session before sending them, so nothing
                    # pending is not everything sent: wait until what it took is written too.
                    # (Waking at a turn that had ended before a later turn took the GOAWAY,
                    # then cancelling that turn's send, lost it about one run in five.)
                    self.kick.set()
                    while not self.ended and (
                        self.tunnel.session.pending_bytes or self.written < self.taken
                    ):
                        sent = self.sent
                        await sent.wait()
                    nursery.cancel_scope.cancel()
            except* (ClientGone, FrameTooLarge):
                pass

    async def read(self, nursery: trio.Nursery) -> None:
        while True:
            message = await self.websocket.receive_message()
            if isinstance(message, str):
                return
            try:
                self.tunnel.receive_data(message)
                # The session may find the error while parsing or while handing out events.
                while (event := self.tunnel.next_event()) is not NEED_DATA:
                    self.on_event(event, nursery)
            except PortForwardProtocolError:
                return  # run() sends the GOAWAY it queued
            self.kick.set()  # the reader never waits for the writer
            for forward in list(self.forwards.values()):
                while len(forward.inbound) > _MAX_BUFFERED and forward.request_id in self.forwards:
                    forward.drained = trio.Event()
                    await forward.drained.wait()

    def on_event(self, event: TunnelEvent, nursery: trio.Nursery) -> None:
        if isinstance(event, ConnectionRequested):
            started = _Forward(event.request_id)
            self.forwards[event.request_id] = started
            nursery.start_soon(self.forward, started, event.port)
            return
        if isinstance(event, ConnectionWritable):
            self.writable.set()
            self.writable = trio.Event()
            return
        if not isinstance(event, ConnectionData | ConnectionEOF | ConnectionEnded):
            return
        forward = self.forwards.get(event.request_id)
        if forward is None:
            return
        if isinstance(event, ConnectionData):
            forward.inbound += event.data
            forward.arrived.set()
        elif isinstance(event, ConnectionEOF):
            forward.client_eof = True
            forward.arrived.set()
        elif event.reset:
            del self.forwards[event.request_id]
            forward.scope.cancel()
            forward.drained.set()

    async def forward(self, forward: _Forward, port: int) -> None:
        request_id = forward.request_id
        try:
            with forward.scope, contextlib.suppress(ClientGone):
                target = await _connect(self.plan.pod, port)
                if isinstance(target, str):
                    self.tunnel.fail(request_id, target)
                    return
                async with target, trio.open_nursery() as nursery:
                    nursery.start_soon(self.to_pod, forward, target)
                    await self.from_pod(forward, target)
                self.tunnel.finish(request_id)
        finally:
            self.forwards.pop(request_id, None)
            forward.drained.set()
            self.kick.set()  # the writer sends the connection's last frames

    async def to_pod(self, forward: _Forward, target: trio.SocketStream) -> None:
        while True:
            if forward.inbound:
                data = bytes(forward.inbound)
                forward.inbound.clear()
                forward.drained.set()
                try:
                    await target.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                self.tunnel.consumed(forward.request_id, len(data))
                self.kick.set()  # never wait for the senders' backpressure while reading
                continue
            if forward.client_eof:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await target.send_eof()
                return
            forward.arrived = trio.Event()
            await forward.arrived.wait()

    async def from_pod(self, forward: _Forward, target: trio.SocketStream) -> None:
        request_id = forward.request_id
        while True:
            try:
                data = await target.receive_some(_READ_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self.tunnel.close_write(request_id)
                await self.flush()
                return
            view = memoryview(data)
            while view:
                if self.tunnel.send_window(request_id) == 0:
                    if request_id not in self.forwards:
                        return
                    await self.writable.wait()
                    continue
                taken = self.tunnel.send(request_id, bytes(view))
                view = view[taken:]
                await self.flush()


# -- the legacy channels -------------------------------------------------------------------------


async def _run_legacy(websocket: _Counting, plan: PortForwardPlan) -> None:
    codec = LegacyServer(plan.ports)
    targets: list[trio.SocketStream | None] = []
    try:
        for message in codec.opening_messages():
            await websocket.send_message(message)
        for index, port in enumerate(plan.ports):
            connected = await _connect(plan.pod, port)
            if isinstance(connected, str):
                await websocket.send_message(codec.error(index, connected))
                targets.append(None)
            else:
                targets.append(connected)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_pod, plan, nursery.cancel_scope)
                remaining = [sum(t is not None for t in targets)]

                async def from_pod(index: int, target: trio.SocketStream) -> None:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        while data := await target.receive_some(_READ_BYTES):
                            await websocket.send_message(codec.encode(index, data))
                    remaining[0] -= 1
                    if not remaining[0]:
                        nursery.cancel_scope.cancel()

                for index, opened in enumerate(targets):
                    if opened is not None:
                        nursery.start_soon(from_pod, index, opened)
                if not remaining[0]:
                    nursery.cancel_scope.cancel()  # nothing to forward: the WebSocket ends
                    return
                while True:
                    received = codec.receive_message(await websocket.receive_message())
                    if received is not None and (pod_side := targets[received[0]]) is not None:
                        with contextlib.suppress(
                            trio.BrokenResourceError, trio.ClosedResourceError
                        ):
                            await pod_side.send_all(received[1])
        finally:
            for leftover in targets:
                if leftover is not None:
                    with trio.CancelScope(shield=True):
                        await leftover.aclose()
    except* (ClientGone, FrameTooLarge, PortForwardProtocolError):
        pass
