"""What shared sessions cost: the ring's throughput cost, memory per idle detached session, and
the reattach time at the library level.

On the sandbox (in a process of its own; its pods are local processes):

* **throughput**: ``yes | head -c BYTES`` in a TTY, read through ``open_interactive`` directly
  and through a ``SessionHost`` viewer (the ring in between, acknowledging as it reads),
  interleaved, median of the rounds, and the ratio (the issue's goal: at most 5 % slower);
* **memory per idle detached session**: N shared ``sh`` sessions whose one owner attached,
  read the prompt and detached (the ring holds a few bytes; each session's exec WebSocket,
  reader task and queue are what is left), measured as the growth of this process's traced
  Python allocations (tracemalloc) divided by N, and the RSS growth divided by N;
* **reattach**: a viewer detaches while output is pending and attaches again from its offset;
  the time from ``attach`` to its first resumed byte (p50, p95).

    python benchmarks/shared_sessions.py [--megabytes 32] [--rounds 5] [--sessions 50]
        [--backend asyncio|trio]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
from harness import server_process

from kuber_exec_core import ExecRequest, Stdin, Stdout, Workspace
from kuber_exec_core.sharing import Chunk, Role

_DEMO = Workspace(project="demo", uid="demo-uid")


def _request(*command: str) -> ExecRequest:
    return ExecRequest(workspace=_DEMO, deployment="web", command=list(command))


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _direct(service: Any, size: int) -> float:
    request = _request("sh", "-c", f"yes | head -c {size}")
    started = time.perf_counter()
    received = 0
    async with service.open_interactive(request) as session:
        async for frame in session:
            if isinstance(frame, Stdout):
                received += len(frame.data)
    return received / (time.perf_counter() - started) / 1e6


async def _shared(host: Any, size: int) -> float:
    request = _request("sh", "-c", f"yes | head -c {size}")
    started = time.perf_counter()
    received = 0
    shared = await host.open(request)
    async with shared.attach(Role.OWNER) as viewer:
        async for answer in viewer:
            if isinstance(answer, Chunk):
                received += len(answer.data)
    return received / (time.perf_counter() - started) / 1e6


async def _idle_memory(host: Any, count: int) -> tuple[float, float]:
    tracemalloc.start()
    before_traced, before_rss = tracemalloc.get_traced_memory()[0], _rss()
    sessions = []
    for _ in range(count):
        shared = await host.open(_request("sh"))
        async with shared.attach(Role.OWNER) as viewer:
            await viewer.send(Stdin(b"echo ready\n"))
            seen = b""
            async for answer in viewer:
                if isinstance(answer, Chunk):
                    seen += answer.data
                    if b"ready\r\n" in seen:
                        break
        sessions.append(shared)
    traced, rss = tracemalloc.get_traced_memory()[0], _rss()
    tracemalloc.stop()
    for shared in sessions:
        await shared.end()
    return (traced - before_traced) / count, (rss - before_rss) / count


async def _read_until(viewer: Any, needle: bytes) -> None:
    seen = b""
    with anyio.fail_after(30):
        async for answer in viewer:
            if isinstance(answer, Chunk):
                seen += answer.data
                if needle in seen:
                    return


async def _reattach(host: Any, rounds: int) -> list[float]:
    shared = await host.open(_request("sh"))
    times = []
    async with shared.attach(Role.OWNER) as viewer:
        key = viewer.key
        await viewer.send(Stdin(b"stty -echo\n"))
        await _read_until(viewer, b"# ")
        position = viewer.position
    for index in range(rounds):
        # Output arrives while nobody watches; the next attach resumes it.
        async with shared.attach(viewer=key, resume_from=position) as viewer:
            await viewer.send(Stdin(b"echo pending%d\n" % index))
            position = viewer.position
        with anyio.fail_after(10):
            while shared.bytes_written <= position:  # noqa: ASYNC110 - a benchmark's wait
                await anyio.sleep(0.001)
        started = time.perf_counter()
        async with shared.attach(viewer=key, resume_from=position) as viewer:
            answer = await viewer.__anext__()
            times.append((time.perf_counter() - started) * 1000)
            assert isinstance(answer, Chunk)
            if b"pending%d\r\n" % index not in answer.data:
                await _read_until(viewer, b"pending%d\r\n" % index)
            position = viewer.position
    await shared.end()
    return times


async def _run(url: str, args: argparse.Namespace) -> None:
    adapter: Any
    if args.backend == "trio":
        import kuber_exec_trio as adapter
    else:
        import kuber_exec_asyncio as adapter
    size = args.megabytes * 1_000_000
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend)
        async with adapter.SessionHost(service) as host:
            await _direct(service, 1_000_000)  # warm up
            await _shared(host, 1_000_000)
            direct: list[float] = []
            shared: list[float] = []
            for index in range(args.rounds):
                order = [(_direct, service, direct), (_shared, host, shared)]
                for run, target, into in order if index % 2 == 0 else order[::-1]:
                    into.append(await run(target, size))
            d, s = statistics.median(direct), statistics.median(shared)
            print(f"throughput ({args.megabytes} MB of yes, median of {args.rounds}):")
            print(f"  open_interactive   {d:8.1f} MB/s")
            cost = (1 - s / d) * 100
            print(f"  SessionHost viewer {s:8.1f} MB/s   ratio {s / d:.3f} ({cost:+.1f} % cost)")
            traced, rss = await _idle_memory(host, args.sessions)
            print(f"memory per idle detached session ({args.sessions} sessions):")
            print(
                f"  traced Python allocations {traced / 1024:8.1f} KiB   RSS {rss / 1024:8.1f} KiB"
            )
            times = sorted(await _reattach(host, args.rounds * 4))
            p50 = statistics.median(times)
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            print(f"reattach to first resumed byte (library, {len(times)} tries):")
            print(f"  p50 {p50:.2f} ms   p95 {p95:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    with server_process("sandbox") as endpoint:
        anyio.run(_run, endpoint.url, args, backend=args.backend)


if __name__ == "__main__":
    main()
