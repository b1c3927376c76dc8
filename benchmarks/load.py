"""Load on one process: open N concurrent exec sessions at once, then let them idle.

    python benchmarks/load.py [--sessions 10000] [--idle 20] [--runtime raw|trio|asyncio|all]
        [--cleanup on|off|both] [--json PATH]

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
  Then every session leaves its ``async with`` block at once, as a user's code would: the
  seconds until all had left, the client and server CPU per session to leave, and how many execs
  the server accepted meanwhile. With supervision on (docs/cleanup.md, the default), a session
  that leaves before its command ended (here: all of them) runs a cleanup exec before its block
  is left, so leaving N sessions is N more execs: ``--cleanup both`` (the default) measures each
  runtime with it on and off, in fresh processes, and reports the cleanups' outcomes (from the
  audit events) and the warnings they logged;
- ``raw``: the same number of bare upgrades on raw sockets, no client library: what the server
  itself costs per session (its RSS and its idle CPU, which every row reports too).

Then (``--resolutions``, trio and asyncio, once per runtime) the client CPU per target
resolution with 1, 10, 100 and 1,000 concurrent callers on one backend: it should stay flat.

Besides the JSON lines it prints a table and writes every figure, with the machine, the date and
the commit, to ``--json`` (by default ``benchmarks/results/load.json`` for the full 10,000
sessions, ``results/load-quick.json`` for fewer); the docs quote the committed ``load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import datetime
import json
import logging
import os
import platform
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
from run import RESULTS, git_commit, machine, versions

from kuber_exec_core import ExecError, ExecRequest, Workspace

COMMAND = ("sleep", "3600")
REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=COMMAND
)
HERE_SCRIPT = (str(Path(__file__).resolve()), "measure")
RUNTIMES = ("raw", "trio", "asyncio")
#: The full run, which writes results/load.json (fewer sessions: results/load-quick.json).
FULL_SESSIONS = 10_000
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


class CountingHandler(logging.Handler):
    """Counts the ``kuber_exec`` logger's warnings by their first words (10,000 failed cleanups
    would otherwise be 10,000 lines on stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[" ".join(str(record.msg).split()[:6])] += 1


async def measure_kuber(
    adapter: Any,
    endpoint: Endpoint,
    sessions: int,
    idle: float,
    ping_interval: float,
    *,
    cleanup: bool,
) -> dict[str, Any]:
    config = adapter.ClusterConfig(endpoint.url)
    opened = 0
    failures: collections.Counter[str] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    all_open = anyio.Event()
    release = anyio.Event()

    def audit(event: Any) -> None:
        if event.phase == "ended" and event.kind == "interactive":
            outcomes["not needed" if event.cleanup is None else event.cleanup.value] += 1

    warnings = CountingHandler()
    logger = logging.getLogger("kuber_exec")
    logger.addHandler(warnings)
    logger.propagate = False
    async with adapter.KubernetesBackend(config, ping_interval=ping_interval) as backend:
        service = adapter.ExecService(backend, audit=audit, cleanup=cleanup)
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
            release.set()  # every session leaves its block, as its user's code would
        left = Figures(endpoint)
    logger.removeHandler(warnings)
    return {
        "runtime": adapter.__name__.removeprefix("kuber_exec_"),
        "cleanup": cleanup,
        "sessions": sessions,
        "opened": opened,
        "failures": dict(failures),
        **_per_session(opened, all_opened.since(start), idled.since(all_opened)),
        **_leaving(opened, left.since(idled), left.server["execs"] - idled.server["execs"]),
        "cleanup_outcomes": dict(outcomes),
        "warnings": dict(warnings.counts),
        "ping_interval": ping_interval,
    }


def _leaving(opened: int, delta: dict[str, float], execs: int) -> dict[str, Any]:
    count = max(opened, 1)
    return {
        "leave_seconds": round(delta["seconds"], 2),
        "leave_cpu_seconds": round(delta["cpu_seconds"], 2),
        "leave_cpu_ms_per_session": round(1000 * delta["cpu_seconds"] / count, 3),
        "server_leave_cpu_ms_per_session": round(1000 * delta["server_cpu_seconds"] / count, 3),
        "leave_execs": execs,
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
            runtime,
            measure_kuber(
                adapter,
                endpoint,
                args.sessions,
                args.idle,
                args.ping_interval,
                cleanup=args.cleanup != "off",
            ),
        )
        if args.resolutions:
            figures["resolutions"] = [
                run(runtime, measure_resolutions(adapter, args.url, callers))
                for callers in (1, 10, 100, 1000)
            ]
    return {"kind": runtime, "nofile_limit": limit, **figures}


def jobs(args: argparse.Namespace) -> list[Job]:
    """One job per runtime and cleanup setting; the resolutions run with the first of each
    runtime."""
    runtimes = RUNTIMES if args.runtimes == "all" else (args.runtimes,)
    settings = ("on", "off") if args.cleanup == "both" else (args.cleanup,)
    options: tuple[str, ...] = ("--sessions", str(args.sessions), "--idle", str(args.idle))
    options += ("--ping-interval", str(args.ping_interval))
    listed = []
    for runtime in runtimes:
        for number, setting in enumerate(settings if runtime != "raw" else ("on",)):
            extra: tuple[str, ...] = ("--cleanup", setting)
            if not args.resolutions or number > 0:
                extra += ("--no-resolutions",)
            key = runtime if runtime == "raw" else f"{runtime}, cleanup {setting}"
            listed.append(
                Job(key, runtime, options + extra, script=HERE_SCRIPT, timeout=LOAD_TIMEOUT_SECONDS)
            )
    return listed


def table(rows: list[dict[str, Any]], resolutions: list[dict[str, Any]]) -> list[str]:
    """The rows as the text table the docs quote."""
    header = (
        f"{'runtime':<22}{'opened':>8}{'open s':>8}{'RSS KiB':>9}{'idle CPU':>10}"
        f"{'us/ping':>9}{'srv KiB':>9}{'leave s':>9}{'leave ms':>10}{'execs':>7}  cleanups"
    )
    lines = [header, "-" * (len(header) + 12)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['key']:<22}  failed: {row['error']}")
            continue
        per_ping = row["idle_cpu_us_per_session_second"] * row.get("ping_interval", 0)
        leave = row.get("leave_seconds")
        outcomes = ", ".join(f"{k} {v}" for k, v in row.get("cleanup_outcomes", {}).items())
        lines.append(
            f"{row['key']:<22}{row['opened']:>8,}{row['open_seconds']:>8.1f}"
            f"{row['rss_kib_per_session']:>9.1f}{row['idle_cpu_percent_of_a_core']:>9.1f}%"
            + (f"{per_ping:>9.0f}" if "ping_interval" in row else f"{'-':>9}")
            + f"{row['server_rss_kib_per_session']:>9.1f}"
            + (
                f"{leave:>9.1f}{row['leave_cpu_ms_per_session']:>10.2f}{row['leave_execs']:>7,}"
                f"  {outcomes or '-'}"
                if leave is not None
                else f"{'-':>9}{'-':>10}{'-':>7}  -"
            )
        )
        if row.get("failures"):
            lines.append(f"{'':<22}  failures: {row['failures']}")
        if row.get("warnings"):
            lines.append(f"{'':<22}  warnings: {row['warnings']}")
    if resolutions:
        lines += ["", "client CPU per target resolution, by concurrent callers on one backend:"]
        for line in resolutions:
            lines.append(
                f"  {line['runtime']:<8}{line['concurrent_resolutions']:>6,} callers: "
                f"{line['cpu_ms_per_resolution']:.2f} ms"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("command", nargs="?", default="run", choices=["run", "measure"])
    parser.add_argument("runtime", nargs="?")
    parser.add_argument("--url")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--pod")
    parser.add_argument("--sessions", type=int, default=FULL_SESSIONS)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--ping-interval", type=float, default=5.0)
    parser.add_argument("--runtime", dest="runtimes", choices=[*RUNTIMES, "all"], default="all")
    parser.add_argument(
        "--cleanup",
        choices=["on", "off", "both"],
        default="both",
        help="supervision and the cleanup on leave (docs/cleanup.md): on, off, or each in turn",
    )
    parser.add_argument("--no-resolutions", dest="resolutions", action="store_false")
    parser.add_argument("--json", type=Path, help="where to write the results as JSON")
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure_one(args.runtime, args)), flush=True)
        return 0
    started = datetime.datetime.now(datetime.UTC)
    before = machine()
    rows: list[dict[str, Any]] = []
    resolutions: list[dict[str, Any]] = []
    with server_process("fast") as endpoint:
        for job in jobs(args):
            sample = rounds(endpoint, [job], 1, f"{args.sessions} sessions")[job.key]
            if sample.error is not None:
                rows.append({"key": job.key, "runtime": job.kind, "error": sample.error})
                print(json.dumps(rows[-1]), flush=True)
                continue
            figures = {"key": job.key, **sample.reports[0]}
            resolutions += figures.pop("resolutions", [])
            figures.pop("server_cpu_seconds", None)  # the whole process's; per session is above
            rows.append(figures)
            print(json.dumps(figures), flush=True)
    for line in resolutions:
        print(json.dumps(line), flush=True)
    elapsed = datetime.datetime.now(datetime.UTC) - started
    commit = git_commit()
    out = [
        f"kuber-exec load, {started:%Y-%m-%d %H:%M} UTC, {elapsed.total_seconds():.0f} s, "
        f"commit {commit['describe']}",
        f"Python {platform.python_version()} on {before['cpu_model']} x {before['cpus']} CPUs, "
        f"load average {before['load_average']:.1f} at the start",
        f"{args.sessions:,} concurrent `sleep 3600` sessions in one process per row (no TTY, no "
        f"stdin), idle {args.idle:g} s, pings every {args.ping_interval:g} s; then all leave.",
        "RSS KiB: client RSS per open session; idle CPU: the client's, % of one core; us/ping: "
        "idle client CPU per session per ping interval;",
        "srv KiB: the server's RSS per session; leave s: until every block was left; leave ms: "
        "client CPU per session to leave; execs: execs",
        "the server accepted while they left (the cleanups); cleanups: the audit events' outcomes.",
        "",
        *table(rows, resolutions),
    ]
    print("\n".join(out), flush=True)
    results = {
        "format": 1,
        "source": "benchmarks/load.py",
        "started": started.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed.total_seconds(), 1),
        "commit": commit,
        "machine": {**before, "load_average_end": machine()["load_average"]},
        "versions": versions(None),
        "plan": {
            "sessions": args.sessions,
            "idle_seconds": args.idle,
            "ping_interval": args.ping_interval,
            "cleanup": args.cleanup,
        },
        "rows": rows,
        "resolutions": resolutions,
        "table": out,
    }
    quick = args.sessions < FULL_SESSIONS
    json_path: Path = args.json or RESULTS / ("load-quick.json" if quick else "load.json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
