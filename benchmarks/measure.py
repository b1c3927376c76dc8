"""One benchmark measurement, in a process of its own; prints one JSON line.

``run.py`` starts this script once per measurement, so that each one's peak memory
(``ru_maxrss``) is its own and no client shares an interpreter with another or with the server::

    python benchmarks/measure.py KIND --url URL --kubeconfig PATH --pod POD [--bytes N]
        [--message-bytes M]

Throughput kinds (the pod runs ``head -c N /dev/zero``, or with ``--message-bytes`` the
benchmark server's ``bench-stdout N M``; stdout bytes are counted):

- ``raw-sink``: no client at all, the benchmark server's floor: the upgrade written by hand on a
  socket, then ``recv_into`` one buffer until the server closes, parsing nothing (only the last
  bytes are checked for the success Status and the Close);

- ``trio-execute``, ``asyncio-execute``: ``ExecService.execute`` with full resolution, caps raised
  to N through ``ExecLimits``;
- ``trio-interactive``, ``asyncio-interactive``: ``open_interactive(tty=False)``, counting
  ``Stdout`` frames' bytes;
- ``trio-bare``, ``asyncio-bare``: the WebSocket library alone (trio-websocket, websockets) on the
  same pod's exec URL, offering ``v5.channel.k8s.io``, counting channel-1 payload bytes; the same
  transport settings as the adapters (receive buffer, message size, no compression), no core;
- ``asyncio-bare-keep``: the websockets bare loop keeping stdout in one growing ``io.BytesIO``
  as ``execute`` does: what keeping the output costs any client, for ``execute``'s target;
- where trio's time goes (docs/benchmarks.md, "trio: where the time goes"), each one task on
  one ``trio.SocketStream`` reading ``--receive-bytes`` (256 KiB, the trio adapter's) at a time,
  no background task, no channel: ``trio-socket-bare``, the upgrade by hand and the bytes
  read, parsing nothing (``raw-sink`` through trio); ``trio-wsproto-bare``, wsproto (the parser
  under trio-websocket) fed directly; ``trio-sansio-bare``, the ``websockets`` library's
  sans-IO ``ClientProtocol`` (its C speedups) fed directly; and ``trio-websockets-bare``,
  ``websockets``' own trio client (``websockets.trio.client``: a reader task, its own receive
  size), a library that could replace trio-websocket;
- ``kubectl``: ``kubectl exec`` of the same command, its stdout piped here and counted (its peak
  memory is the child's);
- ``official``: the ``kubernetes`` package's ``stream(connect_get_namespaced_pod_exec, ...,
  _preload_content=True)``.

Latency kinds (``--iterations`` runs of ``true`` after 3 warm-ups, median reported):
``trio-latency``, ``asyncio-latency`` (``execute`` with full resolution: GET deployment, LIST pods,
GET replicaset, WebSocket); ``trio-cached-latency``, ``asyncio-cached-latency`` (``execute`` with
the target cache synced: no REST read); ``trio-bare-latency``, ``asyncio-bare-latency`` (the
WebSocket library alone on the known pod, read to its close); ``official-latency`` (``stream``
on the known pod name).

Reports of kuber-exec kinds name the ``source`` directory kuber-exec was imported from.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import attrs
import trio

NAMESPACE = "demo"
PROJECT = "demo"
WORKSPACE_UID = "demo-uid"
DEPLOYMENT = "web"
V5 = "v5.channel.k8s.io"
STDOUT_CHANNEL = 1
# The adapters' transport settings (kuber_exec_trio._websocket, kuber_exec_asyncio._websocket),
# repeated here so that the bare loops measure the same transport without importing the library.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
TRIO_RECEIVE_BUFFER_BYTES = 256 * 1024
ASYNCIO_MAX_QUEUE = 4
WARM_UP_ITERATIONS = 3
RAW_SINK_BUFFER_BYTES = 4 * 1024 * 1024
#: The v4/v5 success Status, as every server here writes it.
SUCCESS_STATUS = b'{"metadata":{},"status":"Success"}'


#: Whether kuber-exec's rows supervise their command (docs/cleanup.md): the default, and what
#: benchmarks/cleanup.py turns off (``KUBER_BENCH_CLEANUP=0``) to measure the prologue's cost.
CLEANUP = os.environ.get("KUBER_BENCH_CLEANUP", "1") != "0"
#: Passed to ExecService only when it is off: bench-compare also runs older trees, whose
#: ExecService has no such option.
CLEANUP_OPTION: dict[str, bool] = {} if CLEANUP else {"cleanup": False}


def head_command(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


def output_command(size: int, message_bytes: int | None = None) -> list[str]:
    """The command whose stdout is ``size`` zero bytes: ``head -c`` (both servers run it; the
    benchmark server in 32 KiB messages), or the benchmark server's ``bench-stdout`` with
    messages of ``message_bytes``."""
    if message_bytes is None:
        return head_command(size)
    return ["bench-stdout", str(size), str(message_bytes)]


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """User plus system CPU time of this process (or of its waited-for children)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def peak_rss_kib() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# -- kuber-exec ---------------------------------------------------------------------------------


def _adapter(runtime: str) -> Any:
    if runtime == "trio":
        import kuber_exec_trio

        return kuber_exec_trio
    import kuber_exec_asyncio

    return kuber_exec_asyncio


def _request(adapter: Any, command: list[str]) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project=PROJECT, uid=WORKSPACE_UID),
        deployment=DEPLOYMENT,
        command=tuple(command),
    )


@attrs.frozen
class Transfer:
    """What one timed transfer received, how long it took and the CPU it used."""

    received: int
    seconds: float
    cpu_seconds: float
    #: Peak RSS (KiB) when the transfer started; ``None`` when measured in another process.
    rss_before_kib: int | None = None


class Stopwatch:
    """Wall-clock and CPU time of this process between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self._wall = self._cpu = 0.0
        self._rss = 0

    def start(self) -> None:
        self._rss = peak_rss_kib()
        self._cpu = cpu_seconds()
        self._wall = time.perf_counter()

    def stop(self, received: int) -> Transfer:
        seconds = time.perf_counter() - self._wall
        return Transfer(received, seconds, cpu_seconds() - self._cpu, self._rss)


async def kuber_execute(runtime: str, url: str, command: list[str], size: int) -> Transfer:
    adapter = _adapter(runtime)
    limits = adapter.ExecLimits(max_output_cap_bytes=size, default_output_cap_bytes=size)
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend, limits, **CLEANUP_OPTION)
        # A long-lived service's one-time costs (HTTP pool, TLS defaults, worker thread) are
        # not the transfer: pay them first. The timed call still resolves the target.
        await service.execute(_request(adapter, ["true"]))
        stopwatch = Stopwatch()
        stopwatch.start()
        result = await service.execute(_request(adapter, command))
        transfer = stopwatch.stop(len(result.stdout))
        if result.exit_code != 0:
            raise RuntimeError(f"exit code {result.exit_code}")
        return transfer


async def kuber_interactive(runtime: str, url: str, command: list[str]) -> Transfer:
    adapter = _adapter(runtime)
    received = 0
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend, **CLEANUP_OPTION)
        await service.execute(_request(adapter, ["true"]))  # as in kuber_execute
        stopwatch = Stopwatch()
        stopwatch.start()
        request = _request(adapter, command)
        async with service.open_interactive(request, tty=False) as session:
            async for frame in session:
                if isinstance(frame, adapter.Stdout):
                    received += len(frame.data)
                elif isinstance(frame, adapter.Exit):
                    if frame.exit_code != 0:
                        raise RuntimeError(f"exit code {frame.exit_code}")
                elif isinstance(frame, adapter.Error):
                    raise frame.to_exception()
        return stopwatch.stop(received)


async def kuber_latency(runtime: str, url: str, iterations: int) -> list[float]:
    adapter = _adapter(runtime)
    clock = _clock(runtime)
    timings: list[float] = []
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend, **CLEANUP_OPTION)
        request = _request(adapter, ["true"])
        for index in range(WARM_UP_ITERATIONS + iterations):
            started = clock()
            result = await service.execute(request)
            elapsed = clock() - started
            if result.exit_code != 0:
                raise RuntimeError(f"exit code {result.exit_code}")
            if index >= WARM_UP_ITERATIONS:
                timings.append(elapsed)
    return timings


# -- the bare WebSocket loops -------------------------------------------------------------------


def exec_url(url: str, pod: str, command: list[str]) -> str:
    query = urlencode([("command", part) for part in command] + [("stdout", "true")])
    base = "ws" + url.removeprefix("http")
    return f"{base}/api/v1/namespaces/{NAMESPACE}/pods/{pod}/exec?{query}"


async def bare_trio(
    url: str, pod: str, command: list[str], receive_bytes: int = TRIO_RECEIVE_BUFFER_BYTES
) -> Transfer:
    import trio_websocket

    received = 0
    stopwatch = Stopwatch()
    stopwatch.start()
    async with trio_websocket.open_websocket_url(
        exec_url(url, pod, command),
        subprotocols=[V5],
        message_queue_size=1,
        max_message_size=MAX_MESSAGE_BYTES,
        receive_buffer_size=receive_bytes,
    ) as websocket:
        if websocket.subprotocol != V5:
            raise RuntimeError(f"negotiated {websocket.subprotocol!r}")
        try:
            while True:
                message = await websocket.get_message()
                if message[0] == STDOUT_CHANNEL:
                    received += len(message) - 1
        except trio_websocket.ConnectionClosed:
            pass
    return stopwatch.stop(received)


async def bare_asyncio(url: str, pod: str, command: list[str], *, keep: bool = False) -> Transfer:
    from websockets.asyncio.client import connect

    return await _bare_websockets(connect, url, pod, command, keep=keep)


async def _bare_websockets(
    connect: Any, url: str, pod: str, command: list[str], *, keep: bool = False
) -> Transfer:
    """The ``websockets`` bare loop with ``connect`` (its asyncio or its trio client); with
    ``keep``, stdout is kept in one growing ``io.BytesIO`` as ``execute`` keeps it."""
    received = 0
    kept = io.BytesIO()
    stopwatch = Stopwatch()
    stopwatch.start()
    async with connect(
        exec_url(url, pod, command),
        subprotocols=[V5],
        compression=None,
        max_size=MAX_MESSAGE_BYTES,
        max_queue=ASYNCIO_MAX_QUEUE,
        ping_interval=None,
        proxy=None,
    ) as websocket:
        if websocket.subprotocol != V5:
            raise RuntimeError(f"negotiated {websocket.subprotocol!r}")
        async for message in websocket:
            if isinstance(message, bytes) and message[0] == STDOUT_CHANNEL:
                received += len(message) - 1
                if keep:
                    kept.write(memoryview(message)[1:])
    if keep and len(kept.getvalue()) != received:
        raise RuntimeError("the kept output is not what was received")
    return stopwatch.stop(received)


def _hand_upgrade(url: str, pod: str, command: list[str]) -> bytes:
    """The exec upgrade request, written by hand (the rows that parse nothing)."""
    parts = urlsplit(url)
    path = exec_url(url, pod, command).split("/", 3)[3]
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    return (
        f"GET /{path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {V5}\r\n\r\n"
    ).encode("ascii")


def _check_unparsed(kind: str, wire: int, tail: bytes, size: int) -> None:
    """An unparsed read counts as ``size`` payload bytes only if it is at least that long and
    ends with the success Status and a Close frame."""
    expected_end = bytes((0x80 | 2, len(SUCCESS_STATUS) + 1, 3)) + SUCCESS_STATUS
    if wire < size or not tail.endswith(expected_end + b"\x88\x02\x03\xe8"):
        raise RuntimeError(f"{kind}: {wire} bytes that did not end in the success Status")


async def bare_trio_socket(
    url: str, pod: str, command: list[str], size: int, receive_bytes: int
) -> Transfer:
    """``raw-sink`` through trio: the upgrade by hand on a ``trio.SocketStream``, then
    ``receive_some`` until the server closes, parsing nothing: trio's own cost per byte."""
    parts = urlsplit(url)
    upgrade = _hand_upgrade(url, pod, command)
    wire = 0
    tail = b""
    stopwatch = Stopwatch()
    stopwatch.start()
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    async with stream:
        await stream.send_all(upgrade)
        while data := await stream.receive_some(receive_bytes):
            wire += len(data)
            tail = (tail + data[-64:])[-64:]
    transfer = stopwatch.stop(size)
    _check_unparsed("trio-socket-bare", wire, tail, size)
    return transfer


async def bare_trio_wsproto(url: str, pod: str, command: list[str], receive_bytes: int) -> Transfer:
    """wsproto, the parser under trio-websocket, fed from a ``trio.SocketStream`` in this task:
    trio-websocket without its reader task, its memory channel and its message assembly."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.connection import ConnectionState
    from wsproto.events import (
        AcceptConnection,
        BytesMessage,
        CloseConnection,
        Ping,
        RejectConnection,
        Request,
    )

    parts = urlsplit(url)
    target = exec_url(url, pod, command).split("/", 3)[3]
    connection = WSConnection(ConnectionType.CLIENT)
    received = 0
    channel = -1
    at_start = True  # the next BytesMessage event begins a message (its first byte: the channel)
    stopwatch = Stopwatch()
    stopwatch.start()
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    async with stream:
        await stream.send_all(
            connection.send(Request(host=parts.netloc, target=f"/{target}", subprotocols=[V5]))
        )
        while True:
            data = await stream.receive_some(receive_bytes)
            connection.receive_data(data or None)
            for event in connection.events():
                if isinstance(event, BytesMessage):
                    payload = event.data
                    if at_start and payload:
                        channel = payload[0]
                        payload_bytes = len(payload) - 1
                    else:
                        payload_bytes = len(payload)
                    if channel == STDOUT_CHANNEL:
                        received += payload_bytes
                    at_start = event.message_finished
                elif isinstance(event, AcceptConnection):
                    if event.subprotocol != V5:
                        raise RuntimeError(f"negotiated {event.subprotocol!r}")
                elif isinstance(event, RejectConnection):
                    raise RuntimeError(f"refused: {event.status_code}")
                elif isinstance(event, Ping) or (
                    isinstance(event, CloseConnection)
                    and connection.state is ConnectionState.REMOTE_CLOSING
                ):  # the answer wsproto expects (none to the end of the stream)
                    await stream.send_all(connection.send(event.response()))
            if not data:
                break
    return stopwatch.stop(received)


async def bare_trio_sansio(url: str, pod: str, command: list[str], receive_bytes: int) -> Transfer:
    """The ``websockets`` library's sans-IO ``ClientProtocol`` (its C speedups) fed from a
    ``trio.SocketStream`` in this task: what a one-task trio transport on it would cost."""
    from websockets.client import ClientProtocol
    from websockets.frames import Frame, Opcode
    from websockets.protocol import State
    from websockets.uri import parse_uri

    uri = parse_uri(exec_url(url, pod, command))
    protocol = ClientProtocol(
        uri,
        subprotocols=[V5],  # type: ignore[list-item]
        max_size=MAX_MESSAGE_BYTES,
    )
    received = 0
    channel = -1
    stopwatch = Stopwatch()
    stopwatch.start()
    stream = await trio.open_tcp_stream(uri.host, uri.port)

    async def flush() -> None:
        for chunk in protocol.data_to_send():
            if chunk:
                await stream.send_all(chunk)
            else:  # the end of the stream: half-close
                await stream.send_eof()

    async with stream:
        protocol.send_request(protocol.connect())
        await flush()
        while protocol.state is not State.CLOSED:
            data = await stream.receive_some(receive_bytes)
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            for event in protocol.events_received():
                if not isinstance(event, Frame):  # the handshake's Response
                    if protocol.handshake_exc is not None:
                        raise protocol.handshake_exc
                    if protocol.subprotocol != V5:
                        raise RuntimeError(f"negotiated {protocol.subprotocol!r}")
                elif event.opcode is Opcode.BINARY:
                    channel = event.data[0] if event.data else -1
                    if channel == STDOUT_CHANNEL:
                        received += len(event.data) - 1
                elif event.opcode is Opcode.CONT and channel == STDOUT_CHANNEL:
                    received += len(event.data)
            await flush()
            if not data:
                break
    return stopwatch.stop(received)


async def bare_trio_websockets(url: str, pod: str, command: list[str]) -> Transfer:
    """``websockets``' own trio client (a reader task, its own receive size): the library that
    could replace trio-websocket, with the asyncio bare loop's settings."""
    from websockets.trio.client import connect

    return await _bare_websockets(connect, url, pod, command)


def raw_sink(url: str, pod: str, command: list[str], size: int) -> Transfer:
    """The floor under every client: the upgrade, then ``recv_into`` one buffer until the
    server closes, parsing nothing. It proves the server's speed, not a client's.

    The payload is counted as ``size`` once the wire bytes are at least that many and end with
    the success Status and a Close frame (the last bytes are the only ones looked at).
    """
    parts = urlsplit(url)
    upgrade = _hand_upgrade(url, pod, command)
    buffer = bytearray(RAW_SINK_BUFFER_BYTES)
    view = memoryview(buffer)
    tail = b""
    wire = 0
    stopwatch = Stopwatch()
    stopwatch.start()
    with socket.create_connection((parts.hostname, parts.port)) as connection:
        connection.sendall(upgrade)
        while count := connection.recv_into(buffer):
            wire += count
            tail = (tail + view[max(0, count - 64) : count])[-64:]
    transfer = stopwatch.stop(size)
    _check_unparsed("raw-sink", wire, tail, size)
    return transfer


async def cached_latency(runtime: str, url: str, iterations: int) -> list[float]:
    """``execute`` of ``true`` with the target cache warm: no REST read, one WebSocket."""
    adapter = _adapter(runtime)
    clock = _clock(runtime)
    timings: list[float] = []
    async with (
        adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend,
        backend.watch([NAMESPACE]) as cache,
    ):
        with anyio.fail_after(30):
            await cache.wait_synced()
        service = adapter.ExecService(backend, **CLEANUP_OPTION)
        request = _request(adapter, ["true"])
        for index in range(WARM_UP_ITERATIONS + iterations):
            started = clock()
            result = await service.execute(request)
            elapsed = clock() - started
            if result.exit_code != 0:
                raise RuntimeError(f"exit code {result.exit_code}")
            if index >= WARM_UP_ITERATIONS:
                timings.append(elapsed)
    return timings


async def bare_latency_trio(url: str, pod: str, iterations: int) -> list[float]:
    """A bare trio-websocket exec of ``true`` on the known pod, read to its close."""
    import trio_websocket

    timings: list[float] = []
    for index in range(WARM_UP_ITERATIONS + iterations):
        started = trio.current_time()
        async with trio_websocket.open_websocket_url(
            exec_url(url, pod, ["true"]),
            subprotocols=[V5],
            message_queue_size=1,
            max_message_size=MAX_MESSAGE_BYTES,
            receive_buffer_size=TRIO_RECEIVE_BUFFER_BYTES,
        ) as websocket:
            try:
                while True:
                    await websocket.get_message()
            except trio_websocket.ConnectionClosed:
                pass
        if index >= WARM_UP_ITERATIONS:
            timings.append(trio.current_time() - started)
    return timings


async def bare_latency_asyncio(url: str, pod: str, iterations: int) -> list[float]:
    """A bare ``websockets`` exec of ``true`` on the known pod, read to its close."""
    from websockets.asyncio.client import connect

    loop = asyncio.get_running_loop()
    timings: list[float] = []
    for index in range(WARM_UP_ITERATIONS + iterations):
        started = loop.time()
        async with connect(
            exec_url(url, pod, ["true"]),
            subprotocols=[V5],  # type: ignore[list-item]
            compression=None,
            max_size=MAX_MESSAGE_BYTES,
            max_queue=ASYNCIO_MAX_QUEUE,
            ping_interval=None,
            proxy=None,
        ) as websocket:
            async for _message in websocket:
                pass
        if index >= WARM_UP_ITERATIONS:
            timings.append(loop.time() - started)
    return timings


def _clock(runtime: str) -> Callable[[], float]:
    return trio.current_time if runtime == "trio" else asyncio.get_running_loop().time


# -- kubectl and the official client ------------------------------------------------------------


def kubectl_exec(kubeconfig: str, pod: str, command: list[str]) -> tuple[Transfer, int]:
    """What kubectl wrote to its stdout (its start-up included: that is how it is used), its
    own CPU time and its own peak RSS (KiB)."""
    started = time.perf_counter()
    argv = ["kubectl", "--kubeconfig", kubeconfig, "-n", NAMESPACE, "exec", pod, "--"]
    process = subprocess.Popen([*argv, *command], stdout=subprocess.PIPE)
    assert process.stdout is not None
    received = 0
    buffer = bytearray(1024 * 1024)
    with process.stdout:
        while count := os.readv(process.stdout.fileno(), [buffer]):
            received += count
    if process.wait() != 0:
        raise RuntimeError(f"kubectl exited {process.returncode}")
    seconds = time.perf_counter() - started
    # The only child this process ever waited for.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    transfer = Transfer(received, seconds, children.ru_utime + children.ru_stime)
    return transfer, children.ru_maxrss


def _official_api(kubeconfig: str) -> Any:
    from kubernetes import client, config

    config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    return client.CoreV1Api()


def _official_exec(api: Any, pod: str, command: list[str]) -> str:
    from kubernetes.stream import stream

    output: str = stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        NAMESPACE,
        command=command,
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=True,
    )
    return output


def official(kubeconfig: str, pod: str, command: list[str]) -> Transfer:
    api = _official_api(kubeconfig)
    stopwatch = Stopwatch()
    stopwatch.start()
    # The output is zero bytes, ASCII: one character per byte.
    return stopwatch.stop(len(_official_exec(api, pod, command)))


def official_latency(kubeconfig: str, pod: str, iterations: int) -> list[float]:
    api = _official_api(kubeconfig)
    timings: list[float] = []
    for index in range(WARM_UP_ITERATIONS + iterations):
        started = time.perf_counter()
        _official_exec(api, pod, ["true"])
        elapsed = time.perf_counter() - started
        if index >= WARM_UP_ITERATIONS:
            timings.append(elapsed)
    return timings


# -- the entry point ----------------------------------------------------------------------------


THROUGHPUT_KINDS = (
    "raw-sink",
    "trio-execute",
    "trio-interactive",
    "trio-bare",
    "trio-socket-bare",
    "trio-wsproto-bare",
    "trio-sansio-bare",
    "trio-websockets-bare",
    "asyncio-execute",
    "asyncio-interactive",
    "asyncio-bare",
    "asyncio-bare-keep",
    "kubectl",
    "official",
)
#: The rows that show where trio's time goes (each its own loop on a trio stream).
TRIO_DIAGNOSTIC_KINDS = (
    "trio-socket-bare",
    "trio-wsproto-bare",
    "trio-sansio-bare",
    "trio-websockets-bare",
)
LATENCY_KINDS = (
    "trio-latency",
    "asyncio-latency",
    "trio-cached-latency",
    "asyncio-cached-latency",
    "trio-bare-latency",
    "asyncio-bare-latency",
    "official-latency",
)


def _run_async(runtime: str, body: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        return await body()

    return trio.run(main) if runtime == "trio" else asyncio.run(main())


def preload(kind: str) -> None:
    """Import what ``kind`` uses before the clock starts (imports are not the transfer)."""
    runtime, _, mode = kind.removesuffix("-latency").partition("-")
    if kind.startswith("official"):
        import kubernetes.stream  # noqa: F401
    elif kind in TRIO_DIAGNOSTIC_KINDS:
        import websockets.client
        import websockets.trio.client
        import wsproto  # noqa: F401
    elif mode in ("bare", "bare-keep"):
        if runtime == "trio":
            import trio_websocket  # noqa: F401
        else:
            import websockets.asyncio.client  # noqa: F401
    elif runtime in ("trio", "asyncio"):
        _adapter(runtime)


def throughput(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    size: int = args.bytes
    command = output_command(size, args.message_bytes)
    receive: int = args.receive_bytes
    runtime, _, mode = kind.partition("-")
    preload(kind)
    child_peak: int | None = None
    if kind == "kubectl":
        transfer, child_peak = kubectl_exec(args.kubeconfig, args.pod, command)
    elif kind == "official":
        transfer = official(args.kubeconfig, args.pod, command)
    elif kind == "raw-sink":
        transfer = raw_sink(args.url, args.pod, command, size)
    elif mode == "execute":
        transfer = _run_async(runtime, lambda: kuber_execute(runtime, args.url, command, size))
    elif mode == "interactive":
        transfer = _run_async(runtime, lambda: kuber_interactive(runtime, args.url, command))
    elif kind == "trio-socket-bare":
        transfer = _run_async(
            runtime, lambda: bare_trio_socket(args.url, args.pod, command, size, receive)
        )
    elif kind == "trio-wsproto-bare":
        transfer = _run_async(
            runtime, lambda: bare_trio_wsproto(args.url, args.pod, command, receive)
        )
    elif kind == "trio-sansio-bare":
        transfer = _run_async(
            runtime, lambda: bare_trio_sansio(args.url, args.pod, command, receive)
        )
    elif kind == "trio-websockets-bare":
        transfer = _run_async(runtime, lambda: bare_trio_websockets(args.url, args.pod, command))
    elif kind == "asyncio-bare-keep":
        transfer = _run_async(runtime, lambda: bare_asyncio(args.url, args.pod, command, keep=True))
    elif runtime == "trio":
        transfer = _run_async(runtime, lambda: bare_trio(args.url, args.pod, command, receive))
    else:
        transfer = _run_async(runtime, lambda: bare_asyncio(args.url, args.pod, command))
    if transfer.received != size:
        raise RuntimeError(f"{kind}: received {transfer.received} bytes, expected {size}")
    return {
        "kind": kind,
        "bytes": transfer.received,
        "seconds": transfer.seconds,
        "cpu_seconds": transfer.cpu_seconds,
        "peak_rss_kib": child_peak if child_peak is not None else peak_rss_kib(),
        "rss_before_kib": transfer.rss_before_kib,
        **_source(kind),
    }


def _source(kind: str) -> dict[str, str]:
    """Where kuber-exec was imported from (``bench-compare`` checks it is the tree it meant)."""
    if not kind.startswith(("trio-", "asyncio-")) or "-bare" in kind:
        return {}
    import kuber_exec_core

    return {"source": str(Path(kuber_exec_core.__file__).resolve().parents[1])}


def latency(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    iterations: int = args.iterations
    preload(kind)
    runtime, _, mode = kind.removesuffix("-latency").partition("-")
    if kind == "official-latency":
        timings = official_latency(args.kubeconfig, args.pod, iterations)
    elif mode == "bare":
        bare = bare_latency_trio if runtime == "trio" else bare_latency_asyncio
        timings = _run_async(runtime, lambda: bare(args.url, args.pod, iterations))
    elif mode == "cached":
        timings = _run_async(runtime, lambda: cached_latency(runtime, args.url, iterations))
    else:
        timings = _run_async(runtime, lambda: kuber_latency(runtime, args.url, iterations))
    return {
        "kind": kind,
        "iterations": len(timings),
        "median_seconds": statistics.median(timings),
        "min_seconds": min(timings),
        "peak_rss_kib": peak_rss_kib(),
        **_source(kind),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("kind", choices=THROUGHPUT_KINDS + LATENCY_KINDS)
    parser.add_argument("--url", required=True, help="the API server's URL")
    parser.add_argument("--kubeconfig", required=True, help="its kubeconfig")
    parser.add_argument("--pod", required=True, help="the ready pod of Deployment web")
    parser.add_argument("--bytes", type=int, default=1024 * 1024, help="output size")
    parser.add_argument(
        "--message-bytes",
        type=int,
        help="run `bench-stdout BYTES MESSAGE_BYTES` (the benchmark server only) instead of head",
    )
    parser.add_argument("--iterations", type=int, default=30, help="latency samples")
    parser.add_argument(
        "--receive-bytes",
        type=int,
        default=TRIO_RECEIVE_BUFFER_BYTES,
        help="the trio bare loops' receive size (256 KiB, the trio adapter's)",
    )
    args = parser.parse_args(argv)
    kind: str = args.kind
    report = latency(kind, args) if kind in LATENCY_KINDS else throughput(kind, args)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
