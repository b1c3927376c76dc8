"""What recording costs: ``yes`` in a TTY session, recorded against unrecorded, interleaved.

On the sandbox (in a process of its own; its pods are local processes), each round runs
``yes | head -c BYTES`` in ``open_interactive(tty=True)`` three ways, in an order that rotates
from round to round: unrecorded; recorded whole (a cap above the run, so every byte is encoded
and written to a file); recorded with a small cap (the recording stops early, the session goes
on). It prints the output rate of each (MB/s of terminal output the consumer received, median
of the rounds), the recorded/unrecorded ratios, the client's CPU time per 100 MB of output (what
the recorder costs, whichever side is the bottleneck), and the process's peak RSS growth during each
kind of run, for two sizes of run: with the recorder streaming to disk and holding at most
about 2 MiB, the peak does not grow with the size of the run.

    python benchmarks/recording.py [--megabytes 64] [--rounds 5] [--backend trio|asyncio]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from harness import server_process

from kuber_exec_core import ExecRequest, Exit, Stdout, Workspace

_SMALL_CAP = 16 * 1024 * 1024


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _one_run(
    service: Any, adapter: Any, size: int, recording: Any
) -> tuple[float, int, float]:
    """One session; returns (MB/s of output, peak RSS growth in bytes, client CPU seconds per
    100 MB of output: this process's, the recorder's writer thread included)."""
    request = ExecRequest(
        workspace=Workspace(project="demo", uid="demo-uid"),
        deployment="web",
        command=["sh", "-c", f"yes | head -c {size}"],
    )
    baseline = _rss()
    peak = baseline
    received = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss())
            await anyio.sleep(0.02)  # The sampling period, not a synchronisation.

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sample)
        started = time.perf_counter()
        cpu = time.process_time()
        async with service.open_interactive(request, recording=recording) as session:
            async for frame in session:
                if isinstance(frame, Stdout):
                    received += len(frame.data)
                elif isinstance(frame, Exit):
                    break
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
        tasks.cancel_scope.cancel()
    peak = max(peak, _rss())
    # A TTY turns each "\n" into "\r\n": more bytes arrive than `head` wrote.
    assert received >= size, (received, size)
    return received / elapsed / 1e6, peak - baseline, cpu / received * 1e8


async def _main(url: str, folder: str, args: argparse.Namespace) -> None:
    adapter: Any
    if args.backend == "trio":
        import kuber_exec_trio as adapter
    else:
        import kuber_exec_asyncio as adapter
    size = args.megabytes * 1_000_000
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend)

        def kinds(run: int) -> dict[str, Any]:
            path = os.path.join(folder, f"run-{run}.cast")
            return {
                "unrecorded": None,
                "recorded": adapter.Recording(destination=path, max_bytes=1 << 40),
                "capped": adapter.Recording(destination=path, max_bytes=_SMALL_CAP),
            }

        await _one_run(service, adapter, 1_000_000, None)  # warm up
        rates: dict[str, list[float]] = {"unrecorded": [], "recorded": [], "capped": []}
        peaks: dict[str, list[int]] = {name: [] for name in rates}
        cpus: dict[str, list[float]] = {name: [] for name in rates}
        for run in range(args.rounds):
            choices = list(kinds(run).items())
            shift = run % len(choices)
            for name, recording in choices[shift:] + choices[:shift]:
                rate, peak, cpu = await _one_run(service, adapter, size, recording)
                rates[name].append(rate)
                peaks[name].append(peak)
                cpus[name].append(cpu)
        # The same with a run four times the size: the peak must not follow it.
        big = {}
        for name, recording in kinds(args.rounds).items():
            big[name] = (await _one_run(service, adapter, 4 * size, recording))[1]
    median = {name: statistics.median(values) for name, values in rates.items()}
    mib = 1024 * 1024
    print(f"yes in a TTY session, {args.megabytes} MB per run, {args.rounds} interleaved rounds, "
          f"{args.backend}")  # fmt: skip
    for name in rates:
        print(
            f"  {name:<11} {median[name]:8.1f} MB/s   "
            f"ratio {median[name] / median['unrecorded']:.3f}   "
            f"client CPU {statistics.median(cpus[name]):5.2f} s/100 MB   "
            f"peak RSS growth {max(peaks[name]) / mib:5.1f} MiB "
            f"({4 * args.megabytes} MB run: {big[name] / mib:5.1f} MiB)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=["trio", "asyncio"], default="trio")
    args = parser.parse_args()
    # The sandbox in its own process: the client measured shares no GIL with the server.
    with (
        server_process("sandbox") as endpoint,
        tempfile.TemporaryDirectory(prefix="kuber-rec-bench-") as folder,
    ):
        anyio.run(_main, endpoint.url, folder, args, backend=args.backend)


if __name__ == "__main__":
    main()
