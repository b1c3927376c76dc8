"""kuber-exec's Python peers on one pod: throughput of stdout and latency of ``true``.

Each peer runs in process, as the library does, through its own documented exec call; bench.py
(or anyone) calls one measurement per fresh interpreter:

    PY=$(sh scripts/realcluster/peers-venv.sh)   # the peers' own venv (their pins conflict)
    $PY scripts/realcluster/peers.py --peer kr8s --kind throughput --bytes 100000000 \\
        --namespace kx-target --pod shell-... --kubeconfig /tmp/kuber-rc/admin.kubeconfig

prints one JSON line: ``{"peer", "kind", "value", "unit", "bytes", "iterations", "supported",
"versions", "notes"}``. ``value`` is stdout bytes per second for ``throughput`` (``head -c N
/dev/zero``; every byte counted and the count asserted, the exit status checked) and the median
seconds of one ``true`` for ``latency``. What a peer costs once (importing it, reading the
kubeconfig, creating its client, its first connection and TLS handshake, a GET of the pod where
its API needs the object) is paid before the clock starts, by one untimed ``true``; the clock
covers the exec request (the WebSocket upgrade) to the last byte and the exit status, as
bench.py times kuber-exec's ``execute``. A peer the installed version cannot exec with gives
``"supported": false`` and ``"value": null`` (exit status 0); a measurement that fails exits 1.

The peers and their calls (each reads stdout as it comes, never a whole-output buffer):
- ``official``: ``kubernetes.stream.stream(api.connect_get_namespaced_pod_exec, ...,
  _preload_content=False, binary=True)``, then ``update()``/``read_stdout()`` until closed.
- ``official-aio``: ``kubernetes.aio``: ``WsApiClient`` and
  ``connect_get_namespaced_pod_exec_without_preload_content``, an aiohttp WebSocket demultiplexed
  here (v4.channel.k8s.io: the only protocol it asks for).
- ``kubernetes-asyncio``: ``kubernetes_asyncio``'s ``WsApiClient`` and
  ``connect_get_namespaced_pod_exec(..., _preload_content=False)``, likewise.
- ``kr8s``: ``kr8s.asyncio`` ``Pod.exec(command, stdout=writer, capture_output=False)``.
- ``kubex`` / ``kubex-httpx``: Kubex's experimental ``Api(Pod).exec.stream(...)`` on its aiohttp
  client (what ``create_client()`` picks when both are installed) or on httpx + httpx-ws;
  ``kubex-run``: its ``exec.run(...)`` (aiohttp), which gathers the whole output in memory.
- ``lightkube`` / ``lightkube-async``: ``Client.exec`` / ``AsyncClient.exec`` (lightkube 1.0+)
  with ``stdout=writer``; an older lightkube has no exec: "not supported".

Quirks found (each run's ``notes`` repeat the ones of its peer):
- official (sync): ``capture_all`` is forced on through ``stream()``, so every byte is also
  kept in memory; ``update()`` takes every frame already waiting and joins them with
  ``bytes +=``: quadratic while the server keeps ahead (on the sandbox 20 MB ran at 110 MB/s,
  40 MB at 2 MB/s; on the real 1.37 cluster 10 MB at 1.8 MB/s, 20 MB at 0.7 MB/s, 50 MB not
  done in 85 s). Its ``_preload_content=True`` form joins all output that way. Give it a
  smaller ``--bytes`` and say so.
- kubernetes.aio and kubernetes_asyncio ask only ``v4.channel.k8s.io`` and leave the channel
  bytes to the caller; their preload form decodes everything as UTF-8 text.
- kr8s asks only v4 and, by default (``capture_output=True``), grows stdout with ``bytes +=``
  (quadratic); with a writer and ``capture_output=False`` it streams. Its ``api()`` GETs
  ``/version/`` (the sandbox answers it since this module).
- Kubex asks only v5 (Kubernetes >= 1.30); ``stream()`` bounds each channel to 128 messages and
  closes it, setting ``stdout_truncated``, when the reader falls behind (checked here: a
  failure). On the real 1.37 cluster it truncated 100 MB after 552,960 bytes, twice;
  ``kubex-run`` (``exec.run()``, unbounded) does the size.
- lightkube always sends ``stdin=true`` (its ``exec`` puts the key in the query even without
  stdin); a command that reads stdin would wait for it. Its WebSockets (httpx2) over TLS broke
  on the real 1.37 cluster in 4 of 6 sync runs and 1 of 5 async ones (``SSL:
  WRONG_VERSION_NUMBER`` / ``DECRYPTION_FAILED_OR_BAD_RECORD_MAC``, the apiserver logging
  "tls: bad record MAC" from the client); the sandbox (plain HTTP) never did.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

#: The exec call's exit status as the server sent it ("Success" or the failure's text).
SUCCESS = "Success"


@dataclass(frozen=True)
class Target:
    """Where the commands run: a pod known by name (no resolution timed)."""

    namespace: str
    pod: str
    kubeconfig: str
    container: str = "main"


@dataclass
class Counter:
    """A binary writer that keeps only the count (the peers that take a file object)."""

    received: int = 0

    def write(self, data: bytes) -> int:
        self.received += len(data)
        return len(data)

    def flush(self) -> None:
        pass


@dataclass
class Measurement:
    """One measurement's answer (the JSON line)."""

    peer: str
    kind: str
    value: float | None
    supported: bool = True
    bytes: int = 0
    iterations: int = 0
    versions: dict[str, str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        unit = "bytes/s" if self.kind == "throughput" else "s"
        return {
            "peer": self.peer,
            "kind": self.kind,
            "value": self.value,
            "unit": unit,
            "bytes": self.bytes,
            "iterations": self.iterations,
            "supported": self.supported,
            "versions": self.versions,
            "notes": self.notes,
        }


class NotSupported(Exception):
    """The installed peer cannot run a command in a pod."""


class ExecFailed(RuntimeError):
    """The command did not end with the success status, or stdout came short."""


def head(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


TRUE = ["true"]

#: A run of one command: (command, where stdout goes) -> None, raising ExecFailed.
SyncRun = Callable[[list[str], Counter], None]
AsyncRun = Callable[[list[str], Counter], Awaitable[None]]


def _check_status(peer: str, status: str | None) -> None:
    if status != SUCCESS:
        raise ExecFailed(f"{peer}: the command ended with {status!r}")


# --- official client, sync (websocket-client) -------------------------------------------------


@contextmanager
def official(target: Target, notes: list[str]) -> Iterator[SyncRun]:
    from kubernetes import client, config
    from kubernetes.stream import stream

    configuration = client.Configuration()
    config.load_kube_config(config_file=target.kubeconfig, client_configuration=configuration)
    api = client.CoreV1Api(client.ApiClient(configuration))
    notes.append(
        "official: stream(_preload_content=False, binary=True) read with update() and "
        "read_stdout(); "
        "its WSClient also keeps every stdout byte in a BytesIO (capture_all cannot be turned "
        "off through stream()), and one update() joins every frame already waiting with "
        "bytes += (quadratic while the server keeps ahead of the reader)"
    )

    def run(command: list[str], out: Counter) -> None:
        ws = stream(
            api.connect_get_namespaced_pod_exec, target.pod, target.namespace,
            command=command, container=target.container,
            stderr=True, stdin=False, stdout=True, tty=False,
            _preload_content=False, binary=True,
        )  # fmt: skip
        try:
            while ws.is_open():
                # update() waits for the first frame, then takes every frame already there;
                # read_stdout() then pops what it joined without polling again (peek_stdout()
                # would poll once more per turn).
                ws.update(timeout=1)
                out.write(ws.read_stdout(timeout=0))
            out.write(ws.read_stdout(timeout=0))  # what the last update() left
            ws.read_stderr(timeout=0)
            code = ws.returncode
        finally:
            ws.close()
        _check_status("official", SUCCESS if code == 0 else f"exit code {code}")

    yield run


# --- WebSocket demultiplexing shared by kubernetes.aio and kubernetes_asyncio -----------------


async def _aiohttp_exec(peer: str, connect: Any, out: Counter) -> None:
    """Read a channel.k8s.io stream on an aiohttp WebSocket: stdout counted, the status checked.

    Both generated clients return the ``ws_connect`` context manager and leave the
    demultiplexing to the caller (their ``_preload_content=True`` path decodes everything as
    text into one string)."""
    import aiohttp

    status: str | None = None
    async with connect as ws:
        async for message in ws:
            if message.type != aiohttp.WSMsgType.BINARY:
                continue
            data: bytes = message.data
            if not data:
                continue
            if data[0] == 1:
                out.write(data[1:])
            elif data[0] == 3 and len(data) > 1:
                status = json.loads(data[1:]).get("status")
    _check_status(peer, status)


@asynccontextmanager
async def official_aio(target: Target, notes: list[str]) -> AsyncIterator[AsyncRun]:
    from kubernetes.aio import client, config
    from kubernetes.aio.stream import WsApiClient

    configuration = client.Configuration()
    await config.load_kube_config(config_file=target.kubeconfig, client_configuration=configuration)
    notes.append(
        "official-aio: kubernetes.aio WsApiClient, "
        "connect_get_namespaced_pod_exec_without_preload_content (v4.channel.k8s.io only)"
    )
    async with WsApiClient(configuration=configuration) as api_client:
        api = client.CoreV1Api(api_client)

        async def run(command: list[str], out: Counter) -> None:
            connect = await api.connect_get_namespaced_pod_exec_without_preload_content(
                target.pod, target.namespace, command=command, container=target.container,
                stderr=True, stdin=False, stdout=True, tty=False,
            )  # fmt: skip
            await _aiohttp_exec("official-aio", connect, out)

        yield run


@asynccontextmanager
async def kubernetes_asyncio(target: Target, notes: list[str]) -> AsyncIterator[AsyncRun]:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    configuration = client.Configuration()
    await config.load_kube_config(config_file=target.kubeconfig, client_configuration=configuration)
    notes.append(
        "kubernetes-asyncio: WsApiClient, connect_get_namespaced_pod_exec(_preload_content=False)"
        " (v4.channel.k8s.io only)"
    )
    async with WsApiClient(configuration=configuration) as api_client:
        api = client.CoreV1Api(api_client)

        async def run(command: list[str], out: Counter) -> None:
            connect = await api.connect_get_namespaced_pod_exec(
                target.pod, target.namespace, command=command, container=target.container,
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
            )  # fmt: skip
            await _aiohttp_exec("kubernetes-asyncio", connect, out)

        yield run


# --- kr8s ---------------------------------------------------------------------------------------


@asynccontextmanager
async def kr8s(target: Target, notes: list[str]) -> AsyncIterator[AsyncRun]:
    import kr8s.asyncio
    from kr8s.asyncio.objects import Pod

    api = await kr8s.asyncio.api(kubeconfig=target.kubeconfig, namespace=target.namespace)
    pod = await Pod.get(target.pod, namespace=target.namespace, api=api)
    notes.append(
        "kr8s: Pod.exec(stdout=writer, stderr=writer, capture_output=False); its default "
        "capture_output=True grows stdout with bytes += (quadratic) (v4.channel.k8s.io only)"
    )
    errors = Counter()

    async def run(command: list[str], out: Counter) -> None:
        done = await pod.exec(
            command, container=target.container, stdout=out, stderr=errors,
            capture_output=False, check=False,
        )  # fmt: skip
        _check_status("kr8s", SUCCESS if done.returncode == 0 else f"exit {done.returncode}")

    yield run


# --- Kubex ------------------------------------------------------------------------------------


def _read_yaml(path: str) -> Any:
    from yaml import safe_load

    with open(path) as file:
        return safe_load(file)


def _kubex(choice: str, collect: bool = False) -> Callable[[Target, list[str]], Any]:
    """Kubex on its ``choice`` of HTTP client; ``collect``: ``exec.run()`` (the whole output
    gathered in memory, unbounded) instead of iterating ``exec.stream()``'s stdout."""
    name = f"kubex ({choice}{', run()' if collect else ''})"

    @asynccontextmanager
    async def peer(target: Target, notes: list[str]) -> AsyncIterator[AsyncRun]:
        from kubex.api import Api
        from kubex.client import ClientChoice, create_client
        from kubex.configuration.configuration import KubeConfig
        from kubex.configuration.file_config import configure_from_kubeconfig
        from kubex.k8s.v1_37.core.v1.pod import Pod

        kubeconfig = KubeConfig.model_validate(_read_yaml(target.kubeconfig))
        configuration = await configure_from_kubeconfig(kubeconfig)
        client = await create_client(configuration, ClientChoice(choice))
        if collect:
            notes.append(
                f"{name}: Api(Pod).exec.run() (experimental; v5.channel.k8s.io only, so "
                "Kubernetes >= 1.30): the whole output gathered in memory, then counted"
            )
        else:
            notes.append(
                f"{name}: Api(Pod).exec.stream() (experimental; v5.channel.k8s.io only, so "
                "Kubernetes >= 1.30), stdout iterated; its per-channel buffer of 128 messages "
                "closes stdout when the reader falls behind (stdout_truncated: a failure here)"
            )
        async with client:
            api: Any = Api(Pod, client=client, namespace=target.namespace)

            async def stream(command: list[str], out: Counter) -> None:
                async with api.exec.stream(
                    target.pod, command=command, container=target.container, stderr=True
                ) as session:
                    async for chunk in session.stdout:
                        out.write(chunk)
                    status = await session.wait_for_status()
                    if session.stdout_truncated:
                        raise ExecFailed(
                            f"{name}: stdout truncated after {out.received:,} bytes "
                            "(its 128-message buffer was full)"
                        )
                _check_status(name, None if status is None else status.status)

            async def run(command: list[str], out: Counter) -> None:
                result = await api.exec.run(target.pod, command=command, container=target.container)
                out.write(result.stdout)
                _check_status(name, SUCCESS if result.exit_code == 0 else f"{result.status}")

            yield run if collect else stream

    return peer


# --- lightkube --------------------------------------------------------------------------------


def _lightkube_exec_or_reason(client_class: type) -> None:
    if not hasattr(client_class, "exec"):
        raise NotSupported(
            f"lightkube {_version('lightkube')} has no exec (pods/exec came in lightkube 1.0)"
        )


@contextmanager
def lightkube(target: Target, notes: list[str]) -> Iterator[SyncRun]:
    import lightkube as lk

    _lightkube_exec_or_reason(lk.Client)
    from lightkube.config.kubeconfig import KubeConfig

    client = lk.Client(config=KubeConfig.from_file(target.kubeconfig), namespace=target.namespace)
    notes.append(
        "lightkube: Client.exec(stdout=writer, stderr=writer, decode=None) "
        "(httpx2; always asks stdin=true on the wire)"
    )
    errors = Counter()
    try:

        def run(command: list[str], out: Counter) -> None:
            done = client.exec(
                target.pod, namespace=target.namespace, container=target.container,
                command=command, stdout=out, stderr=errors, decode=None,
            )  # fmt: skip
            _check_status("lightkube", SUCCESS if done.exit_code == 0 else f"exit {done.exit_code}")

        yield run
    finally:
        client.close()


@asynccontextmanager
async def lightkube_async(target: Target, notes: list[str]) -> AsyncIterator[AsyncRun]:
    import lightkube as lk

    _lightkube_exec_or_reason(lk.AsyncClient)
    from lightkube.config.kubeconfig import KubeConfig

    client = lk.AsyncClient(
        config=KubeConfig.from_file(target.kubeconfig), namespace=target.namespace
    )
    notes.append(
        "lightkube-async: AsyncClient.exec(stdout=writer, stderr=writer, decode=None) "
        "(httpx2; always asks stdin=true on the wire)"
    )
    errors = Counter()
    async with client:

        async def run(command: list[str], out: Counter) -> None:
            done = await client.exec(
                target.pod, namespace=target.namespace, container=target.container,
                command=command, stdout=out, stderr=errors, decode=None,
            )  # fmt: skip
            _check_status(
                "lightkube-async", SUCCESS if done.exit_code == 0 else f"exit {done.exit_code}"
            )

        yield run


# --- the table of peers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A peer: its session (sync or async context manager) and the distributions it runs on."""

    session: Callable[[Target, list[str]], Any]
    is_async: bool
    distributions: tuple[str, ...]


PEERS: dict[str, Peer] = {
    "official": Peer(official, False, ("kubernetes", "websocket-client")),
    "official-aio": Peer(official_aio, True, ("kubernetes", "aiohttp")),
    "kubernetes-asyncio": Peer(kubernetes_asyncio, True, ("kubernetes-asyncio", "aiohttp")),
    "kr8s": Peer(kr8s, True, ("kr8s", "httpx", "httpx-ws")),
    "kubex": Peer(_kubex("aiohttp"), True, ("kubex", "aiohttp")),
    "kubex-httpx": Peer(_kubex("httpx"), True, ("kubex", "httpx", "httpx-ws")),
    "kubex-run": Peer(_kubex("aiohttp", collect=True), True, ("kubex", "aiohttp")),
    "lightkube": Peer(lightkube, False, ("lightkube", "httpx2")),
    "lightkube-async": Peer(lightkube_async, True, ("lightkube", "httpx2")),
}

KINDS = ("throughput", "latency")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def versions(peer: str) -> dict[str, str | None]:
    """The installed versions of what the peer runs on (None: not installed)."""
    return {name: _version(name) for name in PEERS[peer].distributions}


def _throughput_of(seconds: float, out: Counter, size: int, peer: str) -> float:
    if out.received != size:
        raise ExecFailed(f"{peer}: received {out.received:,} of {size:,} stdout bytes")
    return size / seconds


def _sync_measure(peer: str, kind: str, target: Target, size: int, iterations: int,
                  notes: list[str]) -> float:  # fmt: skip
    with PEERS[peer].session(target, notes) as run:
        run(TRUE, Counter())  # one-time costs: client, connection, TLS
        if kind == "latency":
            samples = []
            for _ in range(iterations):
                start = time.perf_counter()
                run(TRUE, Counter())
                samples.append(time.perf_counter() - start)
            return statistics.median(samples)
        out = Counter()
        start = time.perf_counter()
        run(head(size), out)
        return _throughput_of(time.perf_counter() - start, out, size, peer)


async def _async_measure(peer: str, kind: str, target: Target, size: int, iterations: int,
                         notes: list[str]) -> float:  # fmt: skip
    async with PEERS[peer].session(target, notes) as run:
        await run(TRUE, Counter())  # one-time costs: client, connection, TLS
        if kind == "latency":
            samples = []
            for _ in range(iterations):
                start = time.perf_counter()
                await run(TRUE, Counter())
                samples.append(time.perf_counter() - start)
            return statistics.median(samples)
        out = Counter()
        start = time.perf_counter()
        await run(head(size), out)
        return _throughput_of(time.perf_counter() - start, out, size, peer)


def measure(
    peer: str, kind: str, target: Target, size: int = 0, iterations: int = 20
) -> Measurement:
    """One measurement of one peer, in this interpreter (call it in a fresh one each time).

    ``throughput``: bytes per second of ``head -c size /dev/zero``'s stdout; ``latency``: the
    median seconds of ``iterations`` runs of ``true``. A peer its installed version cannot exec
    with comes back ``supported=False`` with no value; any other failure raises."""
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r} (one of {', '.join(PEERS)})")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if kind == "throughput" and size <= 0:
        raise ValueError("throughput needs --bytes > 0")
    if kind == "latency" and iterations <= 0:
        raise ValueError("latency needs --iterations > 0")
    answer = Measurement(
        peer, kind, None, bytes=size if kind == "throughput" else 0,
        iterations=iterations if kind == "latency" else 1, versions=versions(peer),
    )  # fmt: skip
    try:
        # What a peer warns (kr8s: "Kubernetes version v1.37.2 is not supported") goes in notes.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _measure_into(answer, target, size, iterations)
        seen = dict.fromkeys(f"{peer} warned: {w.message}" for w in caught)
        answer.notes.extend(seen)
    except NotSupported as reason:
        answer.supported = False
        answer.notes.append(str(reason))
    return answer


def _measure_into(answer: Measurement, target: Target, size: int, iterations: int) -> None:
    peer, kind = answer.peer, answer.kind
    if PEERS[peer].is_async:
        answer.value = asyncio.run(
            _async_measure(peer, kind, target, size, iterations, answer.notes)
        )
    else:
        answer.value = _sync_measure(peer, kind, target, size, iterations, answer.notes)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--peer", required=True, choices=sorted(PEERS))
    parser.add_argument("--kind", required=True, choices=KINDS)
    parser.add_argument("--bytes", type=int, default=0, help="throughput: stdout size")
    parser.add_argument("--iterations", type=int, default=20, help="latency: samples")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--pod", required=True)
    parser.add_argument("--container", default="main")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds before a hung measurement is ended"
    )
    args = parser.parse_args(argv)
    if args.kind == "throughput" and args.bytes <= 0:
        parser.error("--kind throughput needs --bytes N (N > 0)")
    if args.iterations <= 0:
        parser.error("--iterations must be > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A peer that hangs (a stream that never ends) prints where it was and exits non-zero.
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    target = Target(args.namespace, args.pod, os.path.abspath(args.kubeconfig), args.container)
    try:
        answer = measure(args.peer, args.kind, target, args.bytes, args.iterations)
    finally:
        faulthandler.cancel_dump_traceback_later()
    print(json.dumps(answer.as_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
