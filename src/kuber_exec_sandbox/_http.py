"""HTTP/1.1 on one connection (``h11``): REST answers, and the hand-off of exec upgrades.

A connection serves requests one after another (keep-alive) until the client closes it, a
request is malformed (400, then close), or an exec upgrade takes the connection over. Request
heads are capped at 64 KiB and bodies at 1 MiB (kept only for the Lease and review APIs of
``._platform``). Only the method and path are ever logged: never headers and never the query.
Without a ``required_token`` any bearer token is accepted and ignored; with one, every request
(REST and exec upgrade) must carry it (``Authorization: Bearer`` or the
``base64url.bearer.authorization.k8s.io.`` subprotocol) or gets the API server's 401 Status.
Then the :class:`~._access.AccessPolicy` says whom the request acts as (impersonation) and
whether that user may exec.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import h11
import trio
from wsproto.utilities import generate_accept_token

from kuber_exec_core import Subprotocol
from kuber_exec_core.channels import parse_subprotocol_header

from ._access import AccessPolicy, UserInfo, forbidden
from ._cluster import Cluster
from ._ephemeral import handle_ephemeral
from ._exec_request import ExecPlan, plan_exec
from ._leases import LeaseStore
from ._logs import LogPlan, plan_log
from ._platform import handle_platform
from ._portforward import (
    SPDY_PROTOCOL,
    PortForwardPlan,
    SpdyConnection,
    plan_portforward,
    portforward_route,
    run_portforward,
)
from ._rest import RestResponse, handle_rest, status_response
from ._runtime import ContainerRuntime
from ._watch import DEFAULT_BOOKMARK_INTERVAL, WatchHub, WatchPlan, plan_watch
from ._websocket import WebSocket

__all__ = ["ConnectionHandler", "ExecRunner"]

_log = logging.getLogger("kuber_exec_sandbox")
_MAX_HEAD_BYTES = 64 * 1024
_MAX_BODY_BYTES = 1024 * 1024
_LINGER_SECONDS = 2.0
# Small reads so h11 notices an oversized head (it checks its buffer between reads).
_RECEIVE_BYTES = 16 * 1024
_BEARER_SUBPROTOCOL = "base64url.bearer.authorization.k8s.io."

#: Runs an accepted exec on its WebSocket until the session ends.
ExecRunner = Callable[[WebSocket, ExecPlan], Awaitable[None]]


class _BodyTooLarge(Exception):
    pass


@attrs.frozen
class _Request:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, list[str]]
    body: bytes = b""

    def header(self, name: str) -> str:
        return ",".join(self.headers.get(name, []))


def _pod_subresource(path: str) -> tuple[str, str, str] | None:
    parts = path.split("/")
    # ['', 'api', 'v1', 'namespaces', ns, 'pods', pod, subresource]
    if (
        len(parts) == 8
        and parts[1:4] == ["api", "v1", "namespaces"]
        and parts[5] == "pods"
        and parts[7] in ("exec", "attach", "log", "ephemeralcontainers")
        and parts[4]
        and parts[6]
    ):
        return parts[4], parts[6], parts[7]
    return None


def _exec_route(path: str) -> tuple[str, str] | None:
    route = _pod_subresource(path)
    if route is None or route[2] not in ("exec", "attach"):
        return None
    return route[0], route[1]


def _is_websocket_upgrade(request: _Request) -> bool:
    upgrade = {v.strip().lower() for v in request.header("upgrade").split(",")}
    connection = {v.strip().lower() for v in request.header("connection").split(",")}
    return "websocket" in upgrade and "upgrade" in connection


def _is_spdy_upgrade(request: _Request) -> bool:
    # kubectl before 1.31 (or KUBECTL_PORT_FORWARD_WEBSOCKETS=false): "Upgrade: SPDY/3.1".
    upgrade = {v.strip().lower() for v in request.header("upgrade").split(",")}
    connection = {v.strip().lower() for v in request.header("connection").split(",")}
    return "spdy/3.1" in upgrade and "upgrade" in connection


def _stream_protocols(request: _Request) -> list[str]:
    values = request.headers.get("x-stream-protocol-version", [])
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


async def _linger(stream: trio.SocketStream) -> None:
    # After an answer that closes the connection (an error, or "Connection: close" refused
    # upgrade), read and drop what the client still sends, for a bounded time: closing with unread
    # input sends a TCP reset, which can destroy the answer before the client reads it.
    await stream.send_eof()
    with trio.move_on_after(_LINGER_SECONDS):
        while await stream.receive_some(_RECEIVE_BYTES):
            pass


async def _wait_for_close(connection: h11.Connection, stream: trio.SocketStream) -> None:
    # Return when the client has closed (or broken) its end. Bytes it sends meanwhile (a next
    # request, which HTTP/1.1 clients do not send before the response ends) wait in h11.
    try:
        while data := await stream.receive_some(_RECEIVE_BYTES):
            connection.receive_data(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def _stream_chunked(
    connection: h11.Connection,
    stream: trio.SocketStream,
    content_type: str,
    produce: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[bool]],
) -> bool:
    """A chunked 200 whose body ``produce`` sends (it returns whether it finished). Closing
    its end is how a client stops a stream: that is noticed at once, not at the next chunk (a
    watch without bookmarks or a quiet log may send nothing for hours). Returns True when the
    connection must close without ending the body (the client left, or ``produce`` did not
    finish: a dropped watch)."""
    headers = [
        ("Content-Type", content_type),
        ("Transfer-Encoding", "chunked"),
        ("Cache-Control", "no-cache, private"),
    ]
    await stream.send_all(connection.send(h11.Response(status_code=200, headers=headers)) or b"")

    async def send(data: bytes) -> None:
        await stream.send_all(connection.send(h11.Data(data=data)) or b"")

    finished = False

    async def run(done: trio.CancelScope) -> None:
        nonlocal finished
        finished = await produce(send)
        done.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, nursery.cancel_scope)
        await _wait_for_close(connection, stream)
        nursery.cancel_scope.cancel()
    if not finished:
        return True
    await stream.send_all(connection.send(h11.EndOfMessage()) or b"")
    return False


@attrs.define
class ConnectionHandler:
    """Serves HTTP connections for one sandbox (a ``trio.serve_tcp`` handler)."""

    cluster: Cluster
    offer_v5: bool
    server_address: str
    run_exec: ExecRunner
    required_token: str | None = None
    #: Serve exec only in these subprotocols (None: what the cluster version serves).
    only_subprotocols: tuple[Subprotocol, ...] | None = None
    #: Wakes the open watches (``serve_sandbox`` connects it to the cluster's touches).
    watches: WatchHub = attrs.field(factory=WatchHub)
    #: Seconds between the bookmarks of a watch that allows them.
    bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL
    #: Who may do what (impersonation, exec, Leases); allows everything until enforced.
    access: AccessPolicy = attrs.field(factory=AccessPolicy)
    #: The ``coordination.k8s.io/v1`` Leases.
    leases: LeaseStore = attrs.field(factory=LeaseStore)
    #: The containers' processes and logs (``pods/log``); ``serve_sandbox`` sets it.
    runtime: ContainerRuntime | None = None
    #: Serve port-forward's tunnel (``SPDY/3.1+portforward.k8s.io``); False answers as a
    #: cluster without the ``PortForwardWebsockets`` gate (legacy channels only).
    portforward_tunnel: bool = True

    async def __call__(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD_BYTES)
        try:
            await self._serve(connection, stream)
            if connection.our_state is h11.MUST_CLOSE and connection.their_state is not h11.CLOSED:
                await _linger(stream)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # The client went away; nothing to answer.
        except* Exception:
            # A bug in one connection must not stop the server (nor reach the client).
            _log.exception("the sandbox failed to serve a connection")
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve(self, connection: h11.Connection, stream: trio.SocketStream) -> None:
        while True:
            try:
                request = await self._read_request(connection, stream)
            except h11.RemoteProtocolError as error:
                if connection.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    answer = status_response(
                        error.error_status_hint, "BadRequest", f"malformed HTTP request: {error}"
                    )
                    await self._respond(connection, stream, answer, close=True)
                return
            except _BodyTooLarge:
                answer = status_response(413, "RequestEntityTooLarge", "the request is too large")
                await self._respond(connection, stream, answer, close=True)
                return
            if request is None:
                return
            _log.debug("%s %s", request.method, request.path)
            if await self._dispatch(connection, stream, request):
                return  # The WebSocket session owned the connection and has closed it.
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()

    async def _next_event(self, connection: h11.Connection, stream: trio.SocketStream) -> object:
        while True:
            event = connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await stream.receive_some(_RECEIVE_BYTES)
            connection.receive_data(data)

    async def _read_request(
        self, connection: h11.Connection, stream: trio.SocketStream
    ) -> _Request | None:
        event = await self._next_event(connection, stream)
        if not isinstance(event, h11.Request):
            return None  # ConnectionClosed: the client is done.
        body = bytearray()
        while True:
            part = await self._next_event(connection, stream)
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > _MAX_BODY_BYTES:
                    raise _BodyTooLarge
            elif isinstance(part, h11.EndOfMessage) or part is h11.PAUSED:
                break
            else:
                return None
        target = urlsplit(event.target.decode("latin-1"))
        headers: dict[str, list[str]] = {}
        for name, value in event.headers:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        return _Request(
            method=event.method.decode("ascii", "replace"),
            path=unquote(target.path),
            query=parse_qsl(target.query, keep_blank_values=True),
            headers=headers,
            body=bytes(body),
        )

    def _authorized(self, request: _Request) -> bool:
        token = self.required_token
        if token is None:
            return True
        presented = request.header("authorization").strip()
        if presented.startswith("Bearer ") and hmac.compare_digest(
            presented.removeprefix("Bearer ").strip().encode(), token.encode()
        ):
            return True
        # Clients that cannot set headers send the token as a subprotocol (docs/protocol.md).
        encoded = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
        expected = f"{_BEARER_SUBPROTOCOL}{encoded}".encode()
        offered = parse_subprotocol_header(request.headers.get("sec-websocket-protocol", []))
        return any(hmac.compare_digest(entry.encode(), expected) for entry in offered)

    async def _dispatch(
        self, connection: h11.Connection, stream: trio.SocketStream, request: _Request
    ) -> bool:
        if not self._authorized(request):
            answer = status_response(401, "Unauthorized", "Unauthorized")
            await self._respond(connection, stream, answer, close=_is_websocket_upgrade(request))
            return False
        who = self.access.identify(request.headers)
        if not isinstance(who, UserInfo):
            answer = RestResponse(who[0], json.dumps(who[1]).encode())
            await self._respond(connection, stream, answer, close=_is_websocket_upgrade(request))
            return False
        platform = handle_platform(
            request.method,
            request.path,
            request.body,
            who,
            leases=self.leases,
            access=self.access,
            query=request.query,
            content_type=request.header("content-type"),
        )
        if platform is not None:
            await self._respond(connection, stream, platform, head_only=request.method == "HEAD")
            return False
        forward = portforward_route(request.path)
        if forward is not None:
            return await self._portforward(connection, stream, request, who, forward)
        sub = _pod_subresource(request.path)
        if sub is not None and sub[2] in ("log", "ephemeralcontainers"):
            return await self._pod_subresource(connection, stream, request, who, sub)
        route = _exec_route(request.path)
        if route is None:
            watch = plan_watch(self.cluster, request.method, request.path, request.query)
            if isinstance(watch, WatchPlan):
                return await self._stream_watch(connection, stream, watch)
            answer = (
                watch
                if watch is not None
                else handle_rest(
                    self.cluster,
                    request.method,
                    request.path,
                    request.query,
                    accept=request.header("accept"),
                    offer_v5=self.offer_v5,
                    server_address=self.server_address,
                )
            )
            await self._respond(connection, stream, answer, head_only=request.method == "HEAD")
            return False
        upgrade = _is_websocket_upgrade(request)
        attach = sub is not None and sub[2] == "attach"
        denied = (
            self.access.authorize_attach(who, route[0], route[1])
            if attach
            else self.access.authorize_exec(who, route[0], route[1])
        )
        if denied is not None:
            answer = RestResponse(denied[0], json.dumps(denied[1]).encode())
            await self._respond(connection, stream, answer, close=upgrade)
            return False
        offered = parse_subprotocol_header(request.headers.get("sec-websocket-protocol", []))
        plan = plan_exec(
            self.cluster,
            method=request.method,
            namespace=route[0],
            pod_name=route[1],
            query=request.query,
            websocket_upgrade=upgrade,
            offered=offered,
            offer_v5=self.offer_v5,
            only_subprotocols=self.only_subprotocols,
            attach=attach,
        )
        if isinstance(plan, RestResponse):
            await self._respond(connection, stream, plan, close=upgrade)
            return False
        key = request.header("sec-websocket-key").strip()
        if not key or request.header("sec-websocket-version").strip() != "13":
            answer = status_response(
                400, "BadRequest", "a WebSocket upgrade needs Sec-WebSocket-Key and version 13"
            )
            await self._respond(connection, stream, answer, close=True)
            return False
        await self._accept(connection, stream, key, plan)
        return True

    async def _pod_subresource(
        self,
        connection: h11.Connection,
        stream: trio.SocketStream,
        request: _Request,
        who: UserInfo,
        route: tuple[str, str, str],
    ) -> bool:
        namespace, pod, subresource = route
        if subresource == "ephemeralcontainers":
            verb = {"GET": "get", "PATCH": "patch", "PUT": "update"}.get(request.method, "")
            if verb and not self.access.allows(who, verb, "pods", subresource, namespace):
                denied = forbidden(who.name, verb, "pods", subresource, namespace, pod)
                await self._respond(
                    connection, stream, RestResponse(denied[0], json.dumps(denied[1]).encode())
                )
                return False
            answer = handle_ephemeral(
                self.cluster,
                request.method,
                namespace,
                pod,
                request.header("content-type"),
                request.body,
            )
            await self._respond(connection, stream, answer)
            return False
        if request.method not in ("GET", "HEAD"):
            answer = status_response(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
            await self._respond(connection, stream, answer)
            return False
        if not self.access.allows(who, "get", "pods", "log", namespace):
            denied = forbidden(who.name, "get", "pods", "log", namespace, pod)
            await self._respond(
                connection, stream, RestResponse(denied[0], json.dumps(denied[1]).encode())
            )
            return False
        assert self.runtime is not None
        plan = plan_log(self.cluster, self.runtime, namespace, pod, request.query)
        if isinstance(plan, RestResponse):
            await self._respond(connection, stream, plan)
            return False
        return await self._stream_log(connection, stream, plan)

    async def _stream_log(
        self, connection: h11.Connection, stream: trio.SocketStream, plan: LogPlan
    ) -> bool:
        # Text; following, it stays open until the process ends or the client closes its end
        # (how a client stops ``logs -f``).
        async def produce(send: Callable[[bytes], Awaitable[None]]) -> bool:
            await plan.run(send)
            return True

        return await _stream_chunked(connection, stream, "text/plain", produce)

    async def _portforward(
        self,
        connection: h11.Connection,
        stream: trio.SocketStream,
        request: _Request,
        who: UserInfo,
        route: tuple[str, str],
    ) -> bool:
        upgrade = _is_websocket_upgrade(request)
        spdy = _is_spdy_upgrade(request)
        denied = self.access.authorize_portforward(who, route[0], route[1])
        offered = parse_subprotocol_header(request.headers.get("sec-websocket-protocol", []))
        plan = (
            RestResponse(denied[0], json.dumps(denied[1]).encode())
            if denied is not None
            else plan_portforward(
                self.cluster,
                method=request.method,
                namespace=route[0],
                pod_name=route[1],
                query=request.query,
                websocket_upgrade=upgrade,
                offered=offered,
                tunnel=self.portforward_tunnel,
                spdy_offered=_stream_protocols(request) if spdy else None,
            )
        )
        if isinstance(plan, PortForwardPlan) and plan.spdy:
            await run_portforward(await self._upgrade_spdy(connection, stream), plan)
            return True
        key = request.header("sec-websocket-key").strip()
        if isinstance(plan, PortForwardPlan) and (
            not key or request.header("sec-websocket-version").strip() != "13"
        ):
            plan = status_response(
                400, "BadRequest", "a WebSocket upgrade needs Sec-WebSocket-Key and version 13"
            )
        if isinstance(plan, RestResponse):
            await self._respond(connection, stream, plan, close=upgrade or spdy)
            return False
        websocket = await self._upgrade(connection, stream, key, plan.subprotocol)
        await run_portforward(websocket, plan)
        return True

    async def _upgrade(
        self, connection: h11.Connection, stream: trio.SocketStream, key: str, protocol: str
    ) -> WebSocket:
        headers: list[tuple[str, str]] = [
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", generate_accept_token(key.encode("ascii")).decode("ascii")),
        ]
        if protocol:
            headers.append(("Sec-WebSocket-Protocol", protocol))
        await stream.send_all(
            connection.send(h11.InformationalResponse(status_code=101, headers=headers)) or b""
        )
        trailing, _closed = connection.trailing_data
        return WebSocket(stream, bytes(trailing))

    async def _upgrade_spdy(
        self, connection: h11.Connection, stream: trio.SocketStream
    ) -> SpdyConnection:
        headers = [
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", SPDY_PROTOCOL),
        ]
        await stream.send_all(
            connection.send(h11.InformationalResponse(status_code=101, headers=headers)) or b""
        )
        trailing, _closed = connection.trailing_data
        return SpdyConnection(stream, bytes(trailing))

    async def _accept(
        self, connection: h11.Connection, stream: trio.SocketStream, key: str, plan: ExecPlan
    ) -> None:
        headers: list[tuple[str, str]] = [
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", generate_accept_token(key.encode("ascii")).decode("ascii")),
        ]
        # docs/protocol.md: no offer -> legacy protocol, answered with an *empty* header.
        protocol = "" if plan.empty_protocol_header else plan.subprotocol.value
        headers.append(("Sec-WebSocket-Protocol", protocol))
        await stream.send_all(
            connection.send(h11.InformationalResponse(status_code=101, headers=headers)) or b""
        )
        trailing, _closed = connection.trailing_data
        await self.run_exec(WebSocket(stream, bytes(trailing)), plan)

    async def _stream_watch(
        self, connection: h11.Connection, stream: trio.SocketStream, watch: WatchPlan
    ) -> bool:
        # The event lines (._watch). True: the connection must close without ending the body
        # (Cluster.drop_watches), as a broken network would.
        async def produce(send: Callable[[bytes], Awaitable[None]]) -> bool:
            return await watch.run(self.watches, send, self.bookmark_interval)

        self.watches.open += 1
        try:
            return await _stream_chunked(connection, stream, "application/json", produce)
        finally:
            self.watches.open -= 1

    async def _respond(
        self,
        connection: h11.Connection,
        stream: trio.SocketStream,
        answer: RestResponse,
        *,
        close: bool = False,
        head_only: bool = False,
    ) -> None:
        headers: list[tuple[str, str]] = [
            ("Content-Type", answer.content_type),
            ("Content-Length", str(len(answer.body))),
            ("Cache-Control", "no-cache, private"),
        ]
        if close:
            headers.append(("Connection", "close"))
        data = connection.send(h11.Response(status_code=answer.status, headers=headers)) or b""
        if not head_only:
            data += connection.send(h11.Data(data=answer.body)) or b""
        data += connection.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)
