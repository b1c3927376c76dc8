"""Load on one backend: open N interactive sessions at once, then let them idle.

    python benchmarks/load.py [--sessions 1000] [--idle 20] [--runtime trio|asyncio|both]

The sandbox runs in a subprocess of its own (``kuber-exec sandbox``), so the CPU figures are the
client's alone. For each runtime one JSON line: how many of the N concurrent ``open_interactive``
calls opened, the seconds until all had opened, the client CPU seconds (user + system) spent
opening them (and per session), then the client's CPU use while the N sessions idle for
``--idle`` seconds, as a percentage of one core (keepalive pings every ``--ping-interval`` s).
Each session runs ``sleep`` with no stdin and no TTY; failures are counted by error code.

Then (``--resolutions``) the client CPU per target resolution (GET Deployment, LIST pods, GET
ReplicaSet) with 1, 10, 100 and 1,000 concurrent callers on one backend: it should stay flat.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import anyio
import trio

import kuber_exec_asyncio
import kuber_exec_trio
from kuber_exec_core import ExecError, ExecRequest, Workspace

REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"),
    deployment="web",
    command=("sleep", "3600"),
)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(
    adapter: Any, url: str, sessions: int, idle: float, ping_interval: float
) -> dict[str, object]:
    config = adapter.ClusterConfig(url)
    opened = 0
    failures: collections.Counter[str] = collections.Counter()
    all_open = anyio.Event()
    release = anyio.Event()
    done = 0
    async with adapter.KubernetesBackend(config, ping_interval=ping_interval) as backend:
        service = adapter.ExecService(backend)

        async def one() -> None:
            nonlocal opened, done
            try:
                async with service.open_interactive(REQUEST, tty=False, stdin=False):
                    opened += 1
                    if opened + sum(failures.values()) == sessions:
                        all_open.set()
                    await release.wait()
            except ExecError as error:
                failures[f"{error.code.value}: {error.message[:80]}"] += 1
                if opened + sum(failures.values()) == sessions:
                    all_open.set()

        start, cpu_start = time.perf_counter(), cpu_seconds()
        async with anyio.create_task_group() as tasks:
            for _ in range(sessions):
                tasks.start_soon(one)
            await all_open.wait()
            open_seconds = time.perf_counter() - start
            open_cpu = cpu_seconds() - cpu_start
            idle_cpu_start, idle_start = cpu_seconds(), time.perf_counter()
            await anyio.sleep(idle)  # the measurement itself: the sessions idle
            idle_cpu = cpu_seconds() - idle_cpu_start
            idle_wall = time.perf_counter() - idle_start
            release.set()
    return {
        "runtime": adapter.__name__.removeprefix("kuber_exec_"),
        "sessions": sessions,
        "opened": opened,
        "failures": dict(failures),
        "open_seconds": round(open_seconds, 2),
        "open_cpu_seconds": round(open_cpu, 2),
        "open_cpu_ms_per_session": round(1000 * open_cpu / sessions, 2),
        "idle_seconds": round(idle_wall, 1),
        "idle_cpu_percent_of_a_core": round(100 * idle_cpu / idle_wall, 2),
        "ping_interval": ping_interval,
    }


async def measure_resolutions(adapter: Any, url: str, callers: int) -> dict[str, object]:
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend)
        await service.resolve_target(REQUEST)  # warm: the first connection's setup
        rounds = max(1, 1000 // callers)
        start, cpu_start = time.perf_counter(), cpu_seconds()
        for _ in range(rounds):
            async with anyio.create_task_group() as tasks:
                for _ in range(callers):
                    tasks.start_soon(service.resolve_target, REQUEST)
        cpu = cpu_seconds() - cpu_start
        wall = time.perf_counter() - start
    total = rounds * callers
    return {
        "runtime": adapter.__name__.removeprefix("kuber_exec_"),
        "concurrent_resolutions": callers,
        "resolutions": total,
        "cpu_ms_per_resolution": round(1000 * cpu / total, 2),
        "seconds": round(wall, 2),
    }


def start_sandbox(directory: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kuber_exec_sandbox",
            "--kubeconfig-out",
            str(directory / "kubeconfig"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    if not first.startswith("kuber-exec sandbox API server: "):
        process.kill()
        raise SystemExit(f"the sandbox did not start: {first!r}")
    return process, first.split(": ", 1)[1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--ping-interval", type=float, default=5.0)
    parser.add_argument("--runtime", choices=["trio", "asyncio", "both"], default="both")
    parser.add_argument("--no-resolutions", dest="resolutions", action="store_false")
    arguments = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * arguments.sessions)), hard))
    runtimes = ["trio", "asyncio"] if arguments.runtime == "both" else [arguments.runtime]
    for runtime in runtimes:
        with tempfile.TemporaryDirectory() as directory:
            sandbox, url = start_sandbox(Path(directory))
            try:
                options = (url, arguments.sessions, arguments.idle, arguments.ping_interval)
                adapter = kuber_exec_trio if runtime == "trio" else kuber_exec_asyncio
                lines = [run(runtime, measure(adapter, *options))]
                if arguments.resolutions:
                    for callers in (1, 10, 100, 1000):
                        lines.append(run(runtime, measure_resolutions(adapter, url, callers)))
            finally:
                sandbox.terminate()
                sandbox.wait(timeout=60)
                assert sandbox.stdout is not None
                sandbox.stdout.close()
        for line in lines:
            print(json.dumps(line), flush=True)


def run(runtime: str, coroutine: Coroutine[Any, Any, dict[str, object]]) -> dict[str, object]:
    if runtime == "asyncio":
        return asyncio.run(coroutine)

    async def main() -> dict[str, object]:
        return await coroutine

    return trio.run(main)


if __name__ == "__main__":
    main()
