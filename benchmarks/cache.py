"""The target cache's benchmarks (issue 13), side by side in one run, as ratios.

    python benchmarks/cache.py            # the full run (a minute or two)
    python benchmarks/cache.py --quick    # a smoke run

Like ``run.py`` (whose harness it uses), every measurement runs in a fresh interpreter
(``measure.py`` for the latencies, ``cache.py measure KIND ...`` for the rest), interleaved round
by round, against the benchmark server (``fast_server.py``) in a process of its own; medians of
the rounds are shown.

- Latency of a small command (``true``, ``execute`` with full resolution) with the cache warm,
  against a bare WebSocket exec of the same pod (the goal is at most 1.2x), the official
  ``kubernetes`` client's bare pod exec, and kuber-exec without the cache (three REST reads).
- Memory of the cache's store for 10,000 pods in 1,000 namespaces (one Deployment, one ReplicaSet
  and 10 pods each, the sandbox's JSON fed to the reflectors directly), from ``tracemalloc``.
- Time to open 1,000 concurrent interactive sessions with the cache warm (all open at once, then
  all closed).

Writes the figures as JSON too (``--json``; default ``results/cache.json``, ``cache-quick.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure
from harness import Job, Samples, rounds, server_process
from report import CACHE_GOAL, ratio, times

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
LABELS = {
    "cached-trio": "kuber-exec trio, cache warm",
    "cached-asyncio": "kuber-exec asyncio, cache warm",
    "uncached-trio": "kuber-exec trio, no cache",
    "uncached-asyncio": "kuber-exec asyncio, no cache",
    "bare-trio": "trio-websocket bare exec",
    "bare-asyncio": "websockets bare exec",
    "official": "official client stream()",
    "sessions-trio": "trio, 1,000 sessions",
    "sessions-asyncio": "asyncio, 1,000 sessions",
}
SESSIONS_TIMEOUT_SECONDS = 120.0


# -- measurements (each in its own process) -------------------------------------------------------


def _clock(runtime: str) -> Callable[[], float]:
    return trio.current_time if runtime == "trio" else asyncio.get_running_loop().time


def adapter_timeout(runtime: str, seconds: float) -> Any:
    return anyio.fail_after(seconds)


async def open_sessions(runtime: str, url: str, count: int) -> dict[str, float]:
    """Open ``count`` interactive sessions (``cat``, no TTY) at once with the cache warm; the
    seconds until all are open, and until all have closed again."""
    adapter = measure._adapter(runtime)
    clock = _clock(runtime)
    async with (
        adapter.KubernetesBackend(adapter.ClusterConfig(url), ping_interval=None) as backend,
        backend.watch([measure.NAMESPACE]) as cache,
    ):
        with adapter_timeout(runtime, 30):
            await cache.wait_synced()
        service = adapter.ExecService(backend)
        request = measure._request(adapter, ["cat"])
        await service.execute(measure._request(adapter, ["true"]))  # one-time costs first
        opened = 0
        all_open = Gate(runtime)
        release = Gate(runtime)

        async def one() -> None:
            nonlocal opened
            async with service.open_interactive(request, tty=False) as _session:
                opened += 1
                if opened == count:
                    all_open.set()
                await release.wait()

        started = clock()
        with adapter_timeout(runtime, SESSIONS_TIMEOUT_SECONDS):
            if runtime == "trio":
                async with trio.open_nursery() as nursery:
                    for _ in range(count):
                        nursery.start_soon(one)
                    await all_open.wait()
                    open_seconds = clock() - started
                    release.set()
            else:
                async with asyncio.TaskGroup() as group:
                    for _ in range(count):
                        group.create_task(one())
                    await all_open.wait()
                    open_seconds = clock() - started
                    release.set()
        return {"open_seconds": open_seconds, "total_seconds": clock() - started}


class Gate:
    """An event of the running runtime."""

    def __init__(self, runtime: str) -> None:
        self._event: trio.Event | asyncio.Event = (
            trio.Event() if runtime == "trio" else asyncio.Event()
        )

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


def store_memory(namespaces: int, pods_per_namespace: int) -> dict[str, float]:
    """The store's retained memory once every reflector has listed the sandbox's JSON."""
    from kuber_exec_core.kube import ApiResponse
    from kuber_exec_core.watch import WatchStore
    from kuber_exec_sandbox import Cluster, PodSpec
    from kuber_exec_sandbox._rest import handle_rest  # the sandbox's LIST answers, no socket

    names = [f"ns-{index:04d}" for index in range(namespaces)]
    cluster = Cluster()
    for name in names:
        specs = [PodSpec(name=f"web-{index:02d}") for index in range(pods_per_namespace)]
        cluster.add_deployment(name, "web", workspace_uid=f"uid-{name}", pods=specs)
    # The LIST bodies first: the sandbox's own bookkeeping must not count as the store's.
    bodies: dict[tuple[str, str], bytes] = {}
    for name in names:
        for reflector in WatchStore().watch(name).reflectors:
            request = reflector.next_event()
            answer = handle_rest(
                cluster,
                "GET",
                request.path,
                list(request.query),
                accept="application/json",
                offer_v5=True,
                server_address="bench",
            )
            assert answer.status == 200
            bodies[name, request.path] = answer.body
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = WatchStore()
    started = time.perf_counter()
    for name in names:
        watch = store.watch(name)
        for reflector in watch.reflectors:
            body = bodies.pop((name, reflector.next_event().path))
            reflector.list_received(ApiResponse(status=200, body=body))
        assert watch.synced
    seconds = time.perf_counter() - started
    del body
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    pods = sum(len(w.pods.items) for w in store)
    objects = sum(len(r.items) for w in store for r in w.reflectors)
    assert pods == namespaces * pods_per_namespace
    return {
        "namespaces": namespaces,
        "pods": pods,
        "objects": objects,
        "retained_bytes": retained,
        "bytes_per_object": retained / objects,
        "list_seconds": seconds,
    }


def _run(runtime: str, body: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        return await body()

    return trio.run(main) if runtime == "trio" else asyncio.run(main())


def measure_one(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in this process (the store's memory, or opening sessions); its report."""
    family, _, runtime = kind.partition("-")
    if kind == "memory":
        return {"kind": kind, **store_memory(args.namespaces, args.pods_per_namespace)}
    if family == "sessions":
        measure._adapter(runtime)
        figures = _run(runtime, lambda: open_sessions(runtime, args.url, args.sessions))
        return {"kind": kind, "sessions": args.sessions, **figures}
    raise SystemExit(f"unknown measurement {kind!r}")


# -- the run --------------------------------------------------------------------------------------

#: The latency rows and the ``measure.py`` kind each one runs.
MEASURE_KINDS = {
    "cached-trio": "trio-cached-latency",
    "cached-asyncio": "asyncio-cached-latency",
    "uncached-trio": "trio-latency",
    "uncached-asyncio": "asyncio-latency",
    "bare-trio": "trio-bare-latency",
    "bare-asyncio": "asyncio-bare-latency",
    "official": "official-latency",
}
HERE_SCRIPT = (str(Path(__file__).resolve()), "measure")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f}"


def latency_table(samples: dict[str, Samples]) -> tuple[list[str], dict[str, Any]]:
    def median(kind: str) -> float | None:
        sample = samples.get(kind)
        return None if sample is None else sample.median("median_seconds")

    header = (
        f"{'client (true, median of medians)':<34}{'ms':>8}{'vs bare':>9}"
        f"{'vs official':>13}{'vs no cache':>13}"
    )
    lines = [header, "-" * len(header)]
    figures: dict[str, Any] = {}
    official = median("official")
    for kind, sample in samples.items():
        runtime = kind.partition("-")[2]
        value = median(kind)
        if sample.error is not None or value is None:
            lines.append(f"{LABELS[kind]:<34}  failed: {sample.error}")
            continue
        bare = median(f"bare-{runtime}") if runtime else None
        uncached = median(f"uncached-{runtime}") if runtime else None
        vs_bare = ratio(value, bare) if kind.startswith(("cached", "uncached")) else None
        vs_official = ratio(value, official) if kind != "official" else None
        vs_uncached = ratio(value, uncached) if kind.startswith("cached") else None
        lines.append(
            f"{LABELS[kind]:<34}{_ms(value):>8}{times(vs_bare):>9}"
            f"{times(vs_official):>13}{times(vs_uncached):>13}"
        )
        figures[kind] = {
            "median_seconds": value,
            "min_seconds": sample.median("min_seconds"),
            "vs_bare": vs_bare,
            "vs_official": vs_official,
            "vs_uncached": vs_uncached,
        }
    for runtime in ("trio", "asyncio"):
        vs = figures.get(f"cached-{runtime}", {}).get("vs_bare")
        if vs is not None:
            mark = "pass" if vs <= CACHE_GOAL else "MISS"
            lines.append(f"target: {runtime} cache warm <= {CACHE_GOAL}x bare: {vs:.2f}x {mark}")
    return lines, figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the target cache's benchmarks")
    parser.add_argument("command", nargs="?", default="run", choices=["run", "measure"])
    parser.add_argument("kind", nargs="?")
    parser.add_argument("--url")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--pod")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--iterations", type=int, default=30, help="latency samples per round")
    parser.add_argument("--repeat", type=int, help="rounds (5; 1 with --quick)")
    parser.add_argument("--sessions", type=int, default=1000, help="concurrent sessions")
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--pods-per-namespace", type=int, default=10)
    parser.add_argument(
        "--no-latency",
        dest="latency",
        action="store_false",
        help="skip the latency rows (make bench's run.py measures them already)",
    )
    parser.add_argument("--json", type=Path, help="where to write the results")
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure_one(args.kind, args)), flush=True)
        return 0
    quick: bool = args.quick
    repeat = args.repeat or (1 if quick else 5)
    iterations = 5 if quick else args.iterations
    sessions = 50 if quick else args.sessions
    started = time.time()
    out: list[str] = []
    latency_jobs = [
        Job(key, kind, ("--iterations", str(iterations))) for key, kind in MEASURE_KINDS.items()
    ]
    session_jobs = [
        Job(key, key, ("--sessions", str(sessions)), script=HERE_SCRIPT)
        for key in ("sessions-trio", "sessions-asyncio")
    ]
    memory_options: tuple[str, ...] = ("--namespaces", str(100 if quick else args.namespaces))
    memory_options += ("--pods-per-namespace", str(args.pods_per_namespace))
    with server_process("fast") as endpoint:
        latency = rounds(endpoint, latency_jobs, repeat, "latency") if args.latency else {}
        opened = rounds(endpoint, session_jobs, min(repeat, 3), "sessions")
        memory = rounds(
            endpoint, [Job("memory", "memory", memory_options, script=HERE_SCRIPT)], 1, "memory"
        )
    figures: dict[str, Any] = {}
    if latency:
        lines, figures = latency_table(latency)
        out += ["Small-command latency (benchmark server on loopback)", *lines, ""]
    out.append(f"Opening {sessions} concurrent interactive sessions, cache warm")
    session_figures: dict[str, Any] = {}
    for kind, sample in opened.items():
        if sample.error is not None:
            out.append(f"{LABELS[kind]:<34}  failed: {sample.error}")
            continue
        open_seconds, total = sample.median("open_seconds"), sample.median("total_seconds")
        out.append(f"{kind:<20} all open in {open_seconds:.2f} s, all closed by {total:.2f} s")
        session_figures[kind] = {"sessions": sessions, "open_seconds": open_seconds}
        session_figures[kind]["total_seconds"] = total
    out.append("")
    report = memory["memory"]
    memory_figures: dict[str, Any] = {}
    if report.error is not None or not report.reports:
        out.append(f"cache memory: failed: {report.error}")
    else:
        memory_figures = report.reports[0]
        out.append(
            f"Cache memory: {memory_figures['pods']} pods in {memory_figures['namespaces']} "
            f"namespaces ({memory_figures['objects']} objects): "
            f"{memory_figures['retained_bytes'] / 2**20:.1f} MiB retained, "
            f"{memory_figures['bytes_per_object']:.0f} bytes per object; "
            f"LIST and parse {memory_figures['list_seconds']:.2f} s"
        )
    print("\n".join(out))
    json_path: Path = args.json or RESULTS / ("cache-quick.json" if quick else "cache.json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    results = {
        "started": started,
        "elapsed_seconds": time.time() - started,
        "quick": quick,
        "repeat": repeat,
        "iterations": iterations,
        "latency": figures,
        "sessions": session_figures,
        "memory": memory_figures,
        "table": out,
    }
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
