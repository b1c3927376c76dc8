"""Load on one process: open N concurrent exec sessions at once, then let them idle.

    python benchmarks/load.py [--sessions 10000] [--idle 20] [--runtime raw|trio|asyncio|all]

Against the benchmark server (``fast_server.py``, one epoll loop, in a process of its own), so
the load is never the server's: it holds every session in a small object and a socket. Each
runtime is measured in a fresh process (``load.py measure RUNTIME ...``), which raises its
``RLIMIT_NOFILE`` to the hard limit. One JSON line per runtime:

- ``trio``, ``asyncio``: N concurrent ``open_interactive`` calls on one backend (each resolves
  its target: GET Deployment, LIST pods, GET ReplicaSet; then the WebSocket; the command is
  ``sleep 3600``, no stdin, no TTY): how many opened (failures counted by error code), the
  seconds until all had, the client CPU spent opening them (per session), the client's RSS per
  open session, then the client's CPU while the N sessions idle for ``--idle`` seconds (keepalive
  pings every ``--ping-interval`` s), as a percentage of one core and per session;
- ``raw``: the same number of bare upgrades on raw sockets, no client library: what the server
  itself costs per session (its RSS and its idle CPU, which every row reports too).

Then (``--resolutions``, trio and asyncio) the client CPU per target resolution with 1, 10, 100
and 1,000 concurrent callers on one backend: it should stay flat.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import os
import resource
import socket
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import trio
from harness import Endpoint, Job, rounds, server_process

from kuber_exec_core import ExecError, ExecRequest, Workspace

COMMAND = ("sleep", "3600")
REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=COMMAND
)
HERE_SCRIPT = (str(Path(__file__).resolve()), "measure")
RUNTIMES = ("raw", "trio", "asyncio")
#: Opening 10,000 sessions takes minutes on a busy 2-core machine.
LOAD_TIMEOUT_SECONDS = 1800.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_kib() -> int:
    """This process's resident set size now (not its peak)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * (os.sysconf("SC_PAGE_SIZE") // 1024)


def raise_nofile_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Figures:
    """The client's and the server's CPU and memory between two points of the run."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.rss = rss_kib()
        self.cpu = cpu_seconds()
        self.wall = time.perf_counter()
        self.server = endpoint.stats() or {}

    def since(self, start: Figures) -> dict[str, float]:
        return {
            "seconds": self.wall - start.wall,
            "cpu_seconds": self.cpu - start.cpu,
            "rss_kib": self.rss - start.rss,
            "server_cpu_seconds": self.server["cpu_seconds"] - start.server["cpu_seconds"],
            "server_rss_kib": self.server["rss_kib"] - start.server["rss_kib"],
        }


def _per_session(
    opened: int, open_delta: dict[str, float], idle: dict[str, float]
) -> dict[str, Any]:
    count = max(opened, 1)
    wall = max(idle["seconds"], 1e-9)
    return {
        "open_seconds": round(open_delta["seconds"], 2),
        "open_cpu_seconds": round(open_delta["cpu_seconds"], 2),
        "open_cpu_ms_per_session": round(1000 * open_delta["cpu_seconds"] / count, 3),
        "rss_kib_per_session": round(open_delta["rss_kib"] / count, 2),
        "idle_seconds": round(idle["seconds"], 1),
        "idle_cpu_percent_of_a_core": round(100 * idle["cpu_seconds"] / wall, 2),
        "idle_cpu_us_per_session_second": round(1e6 * idle["cpu_seconds"] / wall / count, 3),
        "server_rss_kib_per_session": round(open_delta["server_rss_kib"] / count, 2),
        "server_open_cpu_ms_per_session": round(1000 * open_delta["server_cpu_seconds"] / count, 3),
        "server_idle_cpu_us_per_session_second": round(
            1e6 * idle["server_cpu_seconds"] / wall / count, 3
        ),
    }


async def measure_kuber(
    adapter: Any, endpoint: Endpoint, sessions: int, idle: float, ping_interval: float
) -> dict[str, Any]:
    config = adapter.ClusterConfig(endpoint.url)
    opened = 0
    failures: collections.Counter[str] = collections.Counter()
    all_open = anyio.Event()
    release = anyio.Event()
    async with adapter.KubernetesBackend(config, ping_interval=ping_interval) as backend:
        service = adapter.ExecService(backend)
        await service.resolve_target(REQUEST)  # the HTTP pool's first connection: not the load

        def settled() -> None:
            if opened + sum(failures.values()) == sessions:
                all_open.set()

        async def one() -> None:
            nonlocal opened
            try:
                async with service.open_interactive(REQUEST, tty=False, stdin=False):
                    opened += 1
                    settled()
                    await release.wait()
            except ExecError as error:
                failures[f"{error.code.value}: {error.message[:80]}"] += 1
                settled()

        start = Figures(endpoint)
        async with anyio.create_task_group() as tasks:
            for _ in range(sessions):
                tasks.start_soon(one)
            await all_open.wait()
            all_opened = Figures(endpoint)
            await anyio.sleep(idle)  # the measurement itself: the sessions idle
            idled = Figures(endpoint)
            release.set()
    return {
        "runtime": adapter.__name__.removeprefix("kuber_exec_"),
        "sessions": sessions,
        "opened": opened,
        "failures": dict(failures),
        **_per_session(opened, all_opened.since(start), idled.since(all_opened)),
        "ping_interval": ping_interval,
    }


def _raw_upgrade(endpoint: Endpoint) -> bytes:
    parts = urlsplit(endpoint.url)
    query = "&".join(f"command={word}" for word in COMMAND) + "&stdout=true"
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    return (
        f"GET /api/v1/namespaces/demo/pods/{endpoint.pod}/exec?{query} HTTP/1.1\r\n"
        f"Host: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
    ).encode("ascii")


def measure_raw(endpoint: Endpoint, sessions: int, idle: float) -> dict[str, Any]:
    """``sessions`` bare upgrades, one after another on blocking sockets, held open idle."""
    parts = urlsplit(endpoint.url)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    held: list[socket.socket] = []
    failures: collections.Counter[str] = collections.Counter()
    start = Figures(endpoint)
    try:
        for _ in range(sessions):
            try:
                connection = socket.create_connection(address, timeout=30)
            except OSError as error:
                failures[f"connect: {error.strerror or error}"] += 1
                continue
            held.append(connection)
            connection.sendall(_raw_upgrade(endpoint))
            answer = b""
            # The 101 and the empty stdout message ([0x82, 0x01, 0x01]) that follows it.
            while not answer.endswith(b"\r\n\r\n\x82\x01\x01"):
                data = connection.recv(4096)
                if not data:
                    break
                answer += data
            if not answer.startswith(b"HTTP/1.1 101 "):
                failures[f"answered {answer[:40]!r}"] += 1
        opened = len(held) - sum(failures.values())
        all_opened = Figures(endpoint)
        time.sleep(idle)  # the measurement itself: the sessions idle
        idled = Figures(endpoint)
    finally:
        for connection in held:
            connection.close()
    return {
        "runtime": "raw",
        "sessions": sessions,
        "opened": opened,
        "failures": dict(failures),
        **_per_session(opened, all_opened.since(start), idled.since(all_opened)),
        "server_sessions": all_opened.server.get("sessions"),
    }


async def measure_resolutions(adapter: Any, url: str, callers: int) -> dict[str, Any]:
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend)
        await service.resolve_target(REQUEST)  # warm: the first connection's setup
        repeats = max(1, 1000 // callers)
        start, cpu_start = time.perf_counter(), cpu_seconds()
        for _ in range(repeats):
            async with anyio.create_task_group() as tasks:
                for _ in range(callers):
                    tasks.start_soon(service.resolve_target, REQUEST)
        cpu = cpu_seconds() - cpu_start
        wall = time.perf_counter() - start
    total = repeats * callers
    return {
        "runtime": adapter.__name__.removeprefix("kuber_exec_"),
        "concurrent_resolutions": callers,
        "resolutions": total,
        "cpu_ms_per_resolution": round(1000 * cpu / total, 2),
        "seconds": round(wall, 2),
    }


def run(runtime: str, coroutine: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    if runtime == "asyncio":
        return asyncio.run(coroutine)

    async def main() -> dict[str, Any]:
        return await coroutine

    return trio.run(main)


def measure_one(runtime: str, args: argparse.Namespace) -> dict[str, Any]:
    """One runtime's load, in this process."""
    limit = raise_nofile_limit()
    endpoint = Endpoint("fast", args.url, args.kubeconfig, args.pod)
    if runtime == "raw":
        figures = measure_raw(endpoint, args.sessions, args.idle)
    else:
        if runtime == "trio":
            import kuber_exec_trio as adapter
        else:
            import kuber_exec_asyncio as adapter  # type: ignore[no-redef]
        figures = run(
            runtime, measure_kuber(adapter, endpoint, args.sessions, args.idle, args.ping_interval)
        )
        if args.resolutions:
            figures["resolutions"] = [
                run(runtime, measure_resolutions(adapter, args.url, callers))
                for callers in (1, 10, 100, 1000)
            ]
    return {"kind": runtime, "nofile_limit": limit, **figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "measure"])
    parser.add_argument("runtime", nargs="?")
    parser.add_argument("--url")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--pod")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--ping-interval", type=float, default=5.0)
    parser.add_argument("--runtime", dest="runtimes", choices=[*RUNTIMES, "all"], default="all")
    parser.add_argument("--no-resolutions", dest="resolutions", action="store_false")
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure_one(args.runtime, args)), flush=True)
        return 0
    runtimes = RUNTIMES if args.runtimes == "all" else (args.runtimes,)
    options: tuple[str, ...] = ("--sessions", str(args.sessions), "--idle", str(args.idle))
    options += ("--ping-interval", str(args.ping_interval))
    if not args.resolutions:
        options += ("--no-resolutions",)
    failed = False
    with server_process("fast") as endpoint:
        for runtime in runtimes:
            job = Job(runtime, runtime, options, script=HERE_SCRIPT, timeout=LOAD_TIMEOUT_SECONDS)
            sample = rounds(endpoint, [job], 1, f"{args.sessions} sessions")[runtime]
            if sample.error is not None:
                failed = True
                print(json.dumps({"runtime": runtime, "error": sample.error}), flush=True)
                continue
            figures = sample.reports[0]
            resolutions = figures.pop("resolutions", [])
            figures.pop("server_cpu_seconds", None)  # the whole process's; per session is above
            print(json.dumps(figures), flush=True)
            for line in resolutions:
                print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
