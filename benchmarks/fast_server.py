"""The benchmark API server: a loopback Kubernetes look-alike that is never the bottleneck.

    python benchmarks/fast_server.py [--port 0]

Prints one JSON line (``url``, ``kubeconfig``, ``pod``: the ready pod of Deployment ``web``,
``pid``) on stdout, then serves until its stdin reaches end of file (the parent closed it, or
died), SIGTERM or SIGINT. Plain HTTP on 127.0.0.1, like the sandbox.

One process, one thread, one ``epoll`` loop, non-blocking sockets; no process per session, so
10,000 concurrent idle sessions cost a socket and a small object each.

- **REST**: every non-exec request is answered by the sandbox's own pure REST handler
  (``kuber_exec_sandbox._rest.handle_rest``) over :func:`~kuber_exec_sandbox.demo_cluster`, so
  resolution (GET the Deployment, LIST pods by selector, GET the ReplicaSet), kubectl's discovery
  and the official client read the same JSON as from the sandbox. The model never changes, so
  each distinct request is rendered once and its bytes are reused.
- **Watches** (``?watch=1``, what the target cache reads after its LISTs): a chunked ``200`` that
  stays open, a ``BOOKMARK`` every :data:`BOOKMARK_SECONDS` when allowed, ended cleanly at
  ``timeoutSeconds``. Nothing changes, so there are no other events (but every object as
  ``ADDED`` when no ``resourceVersion`` is given).
- **Exec**: the upgrade is decided by the sandbox's own ``plan_exec`` (404 for an unknown pod,
  403 with an empty body when no offered subprotocol is served, ...), limited to the binary
  ``v5.channel.k8s.io`` and ``v4.channel.k8s.io``. Then the empty message on the lowest writable
  channel, the command's output (``fast_programs``: argv interpreted in memory), the Status on
  channel 3, Close 1000, and a half-close, as the API server does. Output frames come from one
  shared buffer of whole frames per message size (32 KiB by default, the kubelet's): a send is a
  slice of it, never a copy. Pings are answered between frames.
- ``GET /fast-server/stats`` (not a Kubernetes path): the server's CPU seconds, RSS, connections
  and open sessions, and the exec upgrades accepted so far, as JSON, which the benchmarks read
  around each measurement.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import heapq
import ipaddress
import itertools
import json
import os
import resource
import select
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn

from fast_programs import Program, start_program
from fast_wire import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameDecoder,
    RequestHead,
    WireError,
    accept_token,
    chunk,
    close_frame,
    frame,
    http_response,
    parse_head,
)

from kuber_exec_core import ExecError, ExecStreams, Subprotocol
from kuber_exec_core.channels import parse_subprotocol_header
from kuber_exec_core.server import ServerChannel, StdinClosed, StdinReceived
from kuber_exec_sandbox import Cluster, demo_cluster, write_kubeconfig
from kuber_exec_sandbox._exec_request import ExecPlan, plan_exec
from kuber_exec_sandbox._rest import RestResponse, collection_route, handle_rest, is_watch

__all__ = ["BOOKMARK_SECONDS", "STATS_PATH", "Server", "main"]

#: The subprotocols served: the binary ones with a structured Status.
SERVED = (Subprotocol.V5, Subprotocol.V4)
BOOKMARK_SECONDS = 30.0
#: Not a Kubernetes path: the server's CPU, memory and connection counts, as JSON.
STATS_PATH = "/fast-server/stats"
#: After its Close, how long a session reads and drops the client's bytes before closing the
#: socket (closing with unread input sends a reset, which can destroy the client's last frames).
LINGER_SECONDS = 2.0
_RECEIVE_BYTES = 256 * 1024
#: Queued output (echoed stdin) above which a session stops reading its client.
_MAX_QUEUED_BYTES = 4 * 1024 * 1024
_MAX_WATCH_INPUT_BYTES = 64 * 1024
_ACCEPTS_PER_WAKE = 512
_KINDS = {"pods": ("Pod", "v1"), "deployments": ("Deployment", "apps/v1")}
_KINDS["replicasets"] = ("ReplicaSet", "apps/v1")
_WATCH_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    b"Cache-Control: no-cache, private\r\n\r\n"
)

_HTTP, _BODY, _WATCH, _WEBSOCKET, _LINGER, _CLOSED = range(6)
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT


def _exec_route(path: str) -> tuple[str, str] | None:
    parts = path.split("/")
    if (
        len(parts) == 8
        and parts[1:4] == ["api", "v1", "namespaces"]
        and parts[5] == "pods"
        and parts[7] == "exec"
        and parts[4]
        and parts[6]
    ):
        return parts[4], parts[6]
    return None


def _query(head: RequestHead, key: str) -> str | None:
    return next((value for name, value in head.query if name == key), None)


class Connection:
    """One client connection: HTTP requests, then possibly a watch or an exec session.

    Output is a FIFO of byte strings and lazily pulled frame iterators; control frames (pongs)
    jump the queue, but only between chunks, and every chunk is whole frames.
    """

    __slots__ = (
        "_after_output",
        "_body_left",
        "_channel",
        "_control",
        "_current",
        "_decoder",
        "_events",
        "_finished",
        "_inbuf",
        "_mode",
        "_out",
        "_program",
        "_queued",
        "_server",
        "_streams",
        "_watch_number",
        "fd",
        "sock",
    )

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self._server = server
        self.sock = sock
        self.fd = sock.fileno()
        self._mode = _HTTP
        self._inbuf = bytearray()
        self._body_left = 0
        self._out: collections.deque[bytes | memoryview | Iterator[bytes | memoryview]] = (
            collections.deque()
        )
        self._control: collections.deque[bytes] = collections.deque()
        self._current: memoryview | None = None
        self._queued = 0
        self._after_output: Callable[[], None] | None = None
        self._events = _IN
        self._decoder: FrameDecoder | None = None
        self._channel: ServerChannel | None = None
        self._streams = ExecStreams()
        self._program: Program | None = None
        self._finished = False
        self._watch_number = 0

    # -- ProgramIO ---------------------------------------------------------------------------------

    @property
    def stdout(self) -> bool:
        return self._streams.stdout

    def write(self, data: bytes) -> None:
        if self._mode == _CLOSED or self._finished:
            return
        self._out.append(data)
        self._queued += len(data)
        self._flush()

    def stream(self, chunks: Iterator[memoryview | bytes]) -> None:
        if self._mode == _CLOSED or self._finished:
            return
        self._out.append(chunks)
        self._flush()

    def finish(self, status: bytes) -> None:
        if self._mode == _CLOSED or self._finished:
            return
        assert self._channel is not None
        message = self._channel.status_message(status)
        if message is not None:
            assert isinstance(message, bytes)
            self.write(frame(message))
        self._end_session(close_frame())

    def call_later(self, seconds: float, callback: Callable[[], None]) -> None:
        def fire() -> None:
            if not self._finished:
                callback()

        self._server.call_later(seconds, self, fire)

    @property
    def in_session(self) -> bool:
        """Whether this connection is an exec session that has not finished."""
        return self._mode == _WEBSOCKET and not self._finished

    # -- output ------------------------------------------------------------------------------------

    def _next_chunk(self) -> memoryview | None:
        if self._control:
            return memoryview(self._control.popleft())
        out = self._out
        while out:
            item = out[0]
            if isinstance(item, bytes | memoryview):
                out.popleft()
                self._queued -= len(item)
                return memoryview(item)
            produced = next(item, None)
            if produced is not None:
                return memoryview(produced)
            out.popleft()
        return None

    def _flush(self) -> None:
        sock = self.sock
        while True:
            current = self._current
            if current is None:
                current = self._next_chunk()
                if current is None:
                    break
            try:
                sent = sock.send(current)
            except BlockingIOError:
                self._current = current
                break
            except OSError:
                self.close()
                return
            if sent < len(current):
                self._current = current[sent:]
                break  # the socket buffer is full: wait for EPOLLOUT
            self._current = None
        if self._current is None and not self._control and not self._out:
            after, self._after_output = self._after_output, None
            if after is not None:
                after()
                if self._mode == _CLOSED:
                    return
        self._update_events()

    def _update_events(self) -> None:
        if self._mode == _CLOSED:
            return
        events = 0
        if self._queued <= _MAX_QUEUED_BYTES:
            events |= _IN
        if self._current is not None or self._control or self._out:
            events |= _OUT
        if events != self._events:
            self._events = events
            self._server.epoll.modify(self.fd, events)

    def _respond(self, data: bytes, *, close: bool = False) -> None:
        self.write(data)
        if close:
            self._mode = _LINGER  # read nothing more as requests
            self._then(self._shutdown_and_linger)

    def _then(self, action: Callable[[], None]) -> None:
        """Run ``action`` once everything queued so far has been sent."""
        if self._current is None and not self._control and not self._out:
            action()
        else:
            self._after_output = action

    def _shutdown_and_linger(self) -> None:
        self._mode = _LINGER
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()
            return
        self._server.call_later(LINGER_SECONDS, self, self.close)

    def close(self) -> None:
        if self._mode == _CLOSED:
            return
        self._mode = _CLOSED
        self._out.clear()
        self._control.clear()
        self._current = None
        self._server.forget(self)

    # -- input -------------------------------------------------------------------------------------

    def on_events(self, events: int) -> None:
        if events & (_OUT | select.EPOLLERR | select.EPOLLHUP):
            self._flush()
        if self._mode != _CLOSED and events & (_IN | select.EPOLLERR | select.EPOLLHUP):
            self._read()

    def _read(self) -> None:
        try:
            data = self.sock.recv(_RECEIVE_BYTES)
        except BlockingIOError:
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()  # the client closed (or, lingering, answered our half-close)
            return
        mode = self._mode
        if mode == _LINGER:
            return
        if mode == _WEBSOCKET:
            self._websocket_data(data)
        elif mode == _WATCH:
            self._inbuf += data
            if len(self._inbuf) > _MAX_WATCH_INPUT_BYTES:
                self.close()
        else:
            self._inbuf += data
            self._http_data()

    def _http_data(self) -> None:
        while self._mode in (_HTTP, _BODY) and self._inbuf:
            if self._mode == _BODY:
                dropped = min(self._body_left, len(self._inbuf))
                del self._inbuf[:dropped]
                self._body_left -= dropped
                if self._body_left:
                    return
                self._mode = _HTTP
                continue
            try:
                parsed = parse_head(self._inbuf)
                if parsed is None:
                    return
                head, length = parsed
                body = head.content_length
            except WireError as error:
                self._refuse(error)
                return
            del self._inbuf[:length]
            self._request(head)  # no answer here needs the body: it is dropped as it comes
            if body and self._mode == _HTTP:
                self._body_left = body
                self._mode = _BODY

    def _refuse(self, error: WireError) -> None:
        if error.status:
            body = json.dumps({"kind": "Status", "message": str(error), "code": error.status})
            headers = [("Content-Type", "application/json"), ("Connection", "close")]
            self._respond(http_response(error.status, body.encode(), headers), close=True)
        else:
            self.close()

    def _request(self, head: RequestHead) -> None:
        route = _exec_route(head.path)
        if route is not None:
            self._upgrade(head, *route)
            return
        collection = collection_route(head.path)
        if (
            collection is not None
            and collection[2] is None
            and head.method == "GET"
            and is_watch(head.query)
        ):
            self._start_watch(head, collection[0])
            return
        if head.path == STATS_PATH:
            body = json.dumps(self._server.stats()).encode()
            headers = [("Content-Type", "application/json"), ("Cache-Control", "no-cache")]
            self._respond(http_response(200, body, headers), close=head.wants_close)
            return
        self._respond(self._server.rest(head), close=head.wants_close)

    # -- watches -----------------------------------------------------------------------------------

    def _start_watch(self, head: RequestHead, resource_name: str) -> None:
        self.write(_WATCH_HEAD)
        self._mode = _WATCH
        self._watch_number += 1
        number = self._watch_number
        if _query(head, "resourceVersion") in (None, "", "0"):
            for item in self._server.list_items(head):
                self.write(chunk(_event_line("ADDED", item)))
        kind, api_version = _KINDS[resource_name]
        bookmark = _event_line(
            "BOOKMARK",
            {
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self._server.cluster.resource_version)},
            },
        )

        def send_bookmark() -> None:
            if self._mode == _WATCH and self._watch_number == number:
                self.write(chunk(bookmark))
                self._server.call_later(BOOKMARK_SECONDS, self, send_bookmark)

        def end_watch() -> None:
            if self._mode == _WATCH and self._watch_number == number:
                self.write(chunk(b""))
                self._mode = _HTTP
                if head.wants_close:
                    self._respond(b"", close=True)
                else:
                    self._http_data()

        if _query(head, "allowWatchBookmarks") == "true":
            self._server.call_later(BOOKMARK_SECONDS, self, send_bookmark)
        timeout = _query(head, "timeoutSeconds") or ""
        if timeout.isdigit():
            self._server.call_later(int(timeout), self, end_watch)

    # -- exec --------------------------------------------------------------------------------------

    def _upgrade(self, head: RequestHead, namespace: str, pod: str) -> None:
        upgrade = "websocket" in head.tokens("upgrade") and "upgrade" in head.tokens("connection")
        offered = parse_subprotocol_header(head.headers.get("sec-websocket-protocol", []))
        plan = plan_exec(
            self._server.cluster,
            method=head.method,
            namespace=namespace,
            pod_name=pod,
            query=head.query,
            websocket_upgrade=upgrade,
            offered=offered,
            offer_v5=True,
            only_subprotocols=SERVED,
        )
        if isinstance(plan, RestResponse):
            self._respond(_rest_bytes(plan, head), close=upgrade or head.wants_close)
            return
        key = head.header("sec-websocket-key").strip()
        if not key or head.header("sec-websocket-version").strip() != "13":
            self._refuse(
                WireError("a WebSocket upgrade needs Sec-WebSocket-Key and version 13", 400)
            )
            return
        self._accept(key, plan)

    def _accept(self, key: str, plan: ExecPlan) -> None:
        protocol = "" if plan.empty_protocol_header else plan.subprotocol.value
        answer = (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept_token(key)}\r\n"
            f"Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
        )
        self._mode = _WEBSOCKET
        self._server.execs_accepted += 1
        self._channel = ServerChannel(plan.subprotocol)
        self._streams = plan.streams
        self._decoder = FrameDecoder()
        initial = self._channel.initial_message(
            stdout=plan.streams.stdout, stderr=plan.streams.stderr
        )
        assert isinstance(initial, bytes)
        self.write(answer.encode("latin-1") + frame(initial))
        if plan.failure is not None:
            self.finish(plan.failure)
        else:
            self._program = start_program(plan.command, self)
        trailing, self._inbuf = self._inbuf, bytearray()
        if trailing and self._mode == _WEBSOCKET:
            self._websocket_data(bytes(trailing))

    def _end_session(self, close: bytes) -> None:
        """Queue Close (after what is queued), then half-close and linger."""
        self.write(close)
        self._finished = True
        self._then(self._shutdown_and_linger)

    def _websocket_data(self, data: bytes) -> None:
        assert self._decoder is not None
        assert self._channel is not None
        self._decoder.feed(data)
        try:
            frames = self._decoder.frames()
        except WireError:
            self._abandon(close_frame(1002))
            return
        for received in frames:
            if self._mode != _WEBSOCKET:
                return
            if received.opcode == OP_PING:
                self._control.append(frame(received.payload, OP_PONG))
                self._flush()
            elif received.opcode == OP_CLOSE:
                # The client ends the session: echo its code, drop the rest of the output.
                self._abandon(frame(received.payload[:2], OP_CLOSE))
            elif received.opcode in (OP_BINARY, OP_TEXT, OP_CONTINUATION) and not self._finished:
                self._client_message(received.opcode, received.payload)

    def _client_message(self, opcode: int, payload: bytes) -> None:
        assert self._channel is not None
        try:
            message = payload.decode("utf-8") if opcode == OP_TEXT else payload
            event = self._channel.decode_client(message)
        except (ExecError, UnicodeDecodeError):
            # A real server tears the session down on a malformed message (docs/protocol.md).
            self._abandon(close_frame(1002))
            return
        program = self._program
        if program is None:
            return
        if isinstance(event, StdinReceived):
            program.stdin(event.data)
        elif isinstance(event, StdinClosed):
            program.stdin_closed()

    def _abandon(self, close: bytes) -> None:
        if self._finished:
            return
        self._out.clear()
        self._queued = 0
        self._end_session(close)


def _event_line(kind: str, value: object) -> bytes:
    return json.dumps({"type": kind, "object": value}, separators=(",", ":")).encode() + b"\n"


def _rest_bytes(answer: RestResponse, head: RequestHead) -> bytes:
    headers = [("Content-Type", answer.content_type), ("Cache-Control", "no-cache, private")]
    if head.wants_close:
        headers.append(("Connection", "close"))
    return http_response(answer.status, answer.body, headers, head_only=head.method == "HEAD")


class Server:
    """The loop: the listener, every connection, the timers and the stop signal (stdin's EOF)."""

    def __init__(self, listener: socket.socket, cluster: Cluster) -> None:
        self.listener = listener
        self.cluster = cluster
        host, port = listener.getsockname()[:2]
        self.address = f"{host}:{port}"
        self.epoll = select.epoll()
        self.connections: dict[int, Connection] = {}
        self._timers: list[tuple[float, int, Connection | None, Callable[[], None]]] = []
        self._sequence = itertools.count()
        self._rest: dict[tuple[str, str, str], bytes] = {}
        #: Exec sessions accepted so far (the load benchmark counts kuber-exec's cleanup execs).
        self.execs_accepted = 0
        listener.setblocking(False)
        self.epoll.register(listener.fileno(), _IN)

    def call_later(
        self, seconds: float, connection: Connection | None, callback: Callable[[], None]
    ) -> None:
        """Run ``callback`` in ``seconds`` (skipped if ``connection`` has closed meanwhile)."""
        deadline = time.monotonic() + seconds
        heapq.heappush(self._timers, (deadline, next(self._sequence), connection, callback))

    def forget(self, connection: Connection) -> None:
        self.connections.pop(connection.fd, None)
        with contextlib.suppress(OSError):
            self.epoll.unregister(connection.fd)
        connection.sock.close()

    def rest(self, head: RequestHead) -> bytes:
        """The whole response to a REST request, rendered once per distinct request."""
        accept = head.header("accept")
        key = (head.method, head.target, accept)
        cached = self._rest.get(key)
        if cached is None or head.wants_close:
            answer = handle_rest(
                self.cluster,
                head.method,
                head.path,
                head.query,
                accept=accept,
                offer_v5=True,
                server_address=self.address,
            )
            cached = _rest_bytes(answer, head)
            if not head.wants_close:
                self._rest[key] = cached
        return cached

    def stats(self) -> dict[str, object]:
        """The server's own figures, for the benchmarks (``GET /fast-server/stats``)."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with open("/proc/self/statm", encoding="ascii") as statm:
            resident_pages = int(statm.read().split()[1])
        return {
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "rss_kib": resident_pages * (os.sysconf("SC_PAGE_SIZE") // 1024),
            "peak_rss_kib": usage.ru_maxrss,
            "connections": len(self.connections),
            "sessions": sum(1 for c in self.connections.values() if c.in_session),
            "execs": self.execs_accepted,
        }

    def list_items(self, head: RequestHead) -> list[object]:
        """The objects a watch without a resourceVersion starts with (its LIST's items)."""
        query = [(k, v) for k, v in head.query if k in ("labelSelector", "fieldSelector")]
        answer = handle_rest(
            self.cluster,
            "GET",
            head.path,
            query,
            accept="application/json",
            offer_v5=True,
            server_address=self.address,
        )
        items: list[object] = json.loads(answer.body).get("items", [])
        return items

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                sock, _address = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as error:  # EMFILE and the like: shed load, keep serving
                print(f"fast_server: accept failed: {error}", file=sys.stderr)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = Connection(self, sock)
            self.connections[connection.fd] = connection
            self.epoll.register(connection.fd, _IN)

    def _run_timers(self) -> float:
        """Run the due timers; the seconds until the next one (-1: none)."""
        timers = self._timers
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            _deadline, _number, connection, callback = heapq.heappop(timers)
            if connection is None or self.connections.get(connection.fd) is connection:
                self._guarded(connection, callback)
        return max(0.0, timers[0][0] - now) if timers else -1.0

    def _guarded(self, connection: Connection | None, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception:
            # One connection's bug must not stop the server: report it, drop the connection.
            traceback.print_exc(file=sys.stderr)
            if connection is not None:
                connection.close()

    def serve(self, stop_fd: int | None) -> None:
        """Serve until ``stop_fd`` reads end of file (or forever without one)."""
        if stop_fd is not None:
            self.epoll.register(stop_fd, _IN)
        listener_fd = self.listener.fileno()
        try:
            while True:
                timeout = self._run_timers()
                for fd, events in self.epoll.poll(timeout):
                    if fd == listener_fd:
                        self._accept()
                    elif fd == stop_fd:
                        if not os.read(stop_fd, 4096):
                            return
                    elif (connection := self.connections.get(fd)) is not None:
                        self._guarded(connection, functools.partial(connection.on_events, events))
        finally:
            for connection in list(self.connections.values()):
                connection.close()
            self.epoll.close()
            self.listener.close()


def _raise_nofile_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _stop(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    host: str = args.host
    if not ipaddress.ip_address(host).is_loopback:
        parser.error(f"{host} is not a loopback address")
    _raise_nofile_limit()
    signal.signal(signal.SIGTERM, _stop)
    cluster = demo_cluster()
    web = cluster.deployment("demo", "web")
    assert web is not None
    pod = next(p.name for p in cluster.pods_of(web) if p.ready)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, args.port))
    listener.listen(socket.SOMAXCONN)
    port = listener.getsockname()[1]
    url = f"http://[{host}]:{port}" if family == socket.AF_INET6 else f"http://{host}:{port}"
    with tempfile.TemporaryDirectory(prefix="kuber-exec-fast-server-") as directory:
        kubeconfig = Path(directory) / "kubeconfig"
        write_kubeconfig(kubeconfig, url)
        server = Server(listener, cluster)
        ready = {"url": url, "kubeconfig": str(kubeconfig), "pod": pod, "pid": os.getpid()}
        print(json.dumps(ready), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
