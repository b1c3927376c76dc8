"""``make bench``: kuber-exec's throughput, CPU, memory and latency, side by side with its
baselines, against a server faster than any client.

The client rows run against the benchmark server (``fast_server.py``: output from memory in
32 KiB messages, like the kubelet's), which a raw socket sink shows to be several times faster
than the fastest client; the sandbox rows (its pods are local processes) are the end-to-end
figure. Every measurement runs in a fresh process (``measure.py``), interleaved round by round
so that a noisy neighbour slows every row alike; tables show medians and the ratios the targets
are stated in (docs/benchmarks.md). A missed target is reported, never a failure: benchmarks are
not tests, and this exits non-zero only when a measurement could not run at all.

    python benchmarks/run.py            # the full run, a few minutes on a 2-core machine
    python benchmarks/run.py --quick    # a smoke run of a few seconds

Besides the table on stdout it writes every figure as JSON (``--json``; by default
``benchmarks/results/latest.json``, or ``results/quick.json`` for ``--quick``), with the
machine, the date and the commit; the docs build draws the charts of docs/benchmarks.md from it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import report
from harness import (
    Job,
    Samples,
    check_source,
    rounds,
    server_process,
    show_progress,
    source_env,
)
from measure import TRIO_DIAGNOSTIC_KINDS
from report import MB, size_text

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

#: The rows against the benchmark server, in the order of the issue's table, then the rows that
#: show where trio's time goes (measure.TRIO_DIAGNOSTIC_KINDS; docs/benchmarks.md).
CLIENT_KINDS = (
    "raw-sink",
    "asyncio-bare",
    "trio-bare",
    "asyncio-interactive",
    "asyncio-execute",
    "trio-interactive",
    "trio-execute",
    "kubectl",
)
FAST_KINDS = (*CLIENT_KINDS, "asyncio-bare-keep", *TRIO_DIAGNOSTIC_KINDS)
#: End to end: the clients alone (the sandbox, not the client, bounds them all).
SANDBOX_KINDS = CLIENT_KINDS[1:]
LATENCY_KINDS = (
    "trio-cached-latency",
    "trio-bare-latency",
    "trio-latency",
    "asyncio-cached-latency",
    "asyncio-bare-latency",
    "asyncio-latency",
    "official-latency",
)


@attrs.frozen
class Plan:
    size: int
    small_size: int
    repeat: int
    official_repeat: int
    sandbox_repeat: int
    latency_repeat: int
    iterations: int
    message_bytes: int | None


#: The raw sink reads this many times the clients' bytes: at 100 MB it would finish within a
#: few scheduler time slices, and on a shared machine those decide its rate.
SINK_FACTOR = 10


def throughput_jobs(
    kinds: Sequence[str],
    size: int,
    message_bytes: int | None,
    env: Mapping[str, str] | None = None,
) -> list[Job]:
    def options(count: int) -> tuple[str, ...]:
        found: tuple[str, ...] = ("--bytes", str(count))
        if message_bytes is not None:
            found += ("--message-bytes", str(message_bytes))
        return found

    return [
        Job(kind, kind, options(size * SINK_FACTOR if kind == "raw-sink" else size), env)
        for kind in kinds
    ]


def git_commit() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it."""

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(HERE), *argv], capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "sha": git("rev-parse", "HEAD") or None,
        "describe": git("describe", "--always", "--dirty") or None,
        "subject": git("log", "-1", "--format=%s") or None,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def machine() -> dict[str, Any]:
    import os

    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpus": os.cpu_count() or 1,
        "load_average": os.getloadavg()[0],
    }


def versions(kubectl: str | None) -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("kuber-exec", "trio-websocket", "websockets", "kubernetes"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    found["kubectl"] = None
    if kubectl is not None:
        try:
            done = subprocess.run(
                [kubectl, "version", "--client", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            found["kubectl"] = json.loads(done.stdout)["clientVersion"]["gitVersion"]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
    return found


def parse_plan(argv: Sequence[str] | None) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(description="kuber-exec benchmarks")
    parser.add_argument("--quick", action="store_true", help="a small smoke run (seconds)")
    parser.add_argument("--size-mb", type=float, help="the large output size (100)")
    parser.add_argument("--small-size-mb", type=float, help="the official client's size (30)")
    parser.add_argument("--repeat", type=int, help="rounds on the benchmark server (5)")
    parser.add_argument("--sandbox-repeat", type=int, help="rounds on the sandbox (3)")
    parser.add_argument("--iterations", type=int, help="latency samples per round (30)")
    parser.add_argument(
        "--message-bytes",
        type=int,
        help="the benchmark server's stdout message size (32768, what the kubelet sends)",
    )
    parser.add_argument("--no-sandbox", action="store_true", help="skip the end-to-end rows")
    parser.add_argument(
        "--src",
        type=Path,
        help="measure the kuber-exec of this src directory (another checkout's), first on "
        "PYTHONPATH; the servers and the measurement scripts stay this tree's",
    )
    parser.add_argument("--json", type=Path, help="where to write the results as JSON")
    args = parser.parse_args(argv)
    quick: bool = args.quick
    repeat = args.repeat or (1 if quick else 5)
    plan = Plan(
        size=int((args.size_mb or (4 if quick else 100)) * MB),
        small_size=int((args.small_size_mb or (1 if quick else 30)) * MB),
        repeat=repeat,
        # Seconds per run at 30 MB (quadratic buffering): fewer rounds.
        official_repeat=1 if quick else 2,
        sandbox_repeat=args.sandbox_repeat or (1 if quick else 3),
        latency_repeat=repeat,
        iterations=args.iterations or (5 if quick else 30),
        message_bytes=args.message_bytes,
    )
    return plan, args


def main(argv: Sequence[str] | None = None) -> int:
    plan, args = parse_plan(argv)
    kubectl = shutil.which("kubectl")
    fast_kinds = [k for k in FAST_KINDS if k != "kubectl" or kubectl is not None]
    sandbox_kinds = [k for k in SANDBOX_KINDS if k != "kubectl" or kubectl is not None]
    env = None if args.src is None else source_env(args.src.resolve())
    started = datetime.datetime.now(datetime.UTC)
    before = machine()
    with server_process("fast") as fast:
        big = rounds(
            fast,
            throughput_jobs(fast_kinds, plan.size, plan.message_bytes, env),
            plan.repeat,
            f"stdout {size_text(plan.size)}",
        )
        small = rounds(
            fast,
            throughput_jobs(fast_kinds, plan.small_size, plan.message_bytes, env),
            plan.repeat,
            f"stdout {size_text(plan.small_size)}",
        )
        small |= rounds(
            fast,
            throughput_jobs(["official"], plan.small_size, plan.message_bytes, env),
            plan.official_repeat,
            f"official client at {size_text(plan.small_size)}",
        )
        latency = rounds(
            fast,
            [
                Job(kind, kind, ("--iterations", str(plan.iterations)), env)
                for kind in LATENCY_KINDS
            ],
            plan.latency_repeat,
            "latency of `true`",
        )
    sandbox: dict[str, Samples] = {}
    if not args.no_sandbox:
        with server_process("sandbox") as endpoint:
            sandbox = rounds(
                endpoint,
                throughput_jobs(sandbox_kinds, plan.size, None, env),
                plan.sandbox_repeat,
                f"sandbox, stdout {size_text(plan.size)}",
            )
    show_progress("")
    expected = (args.src or HERE.parent / "src").resolve()
    for group in (big, small, latency, sandbox):
        for sample in group.values():
            check_source(sample, expected)
    elapsed = datetime.datetime.now(datetime.UTC) - started
    commit = git_commit()
    if args.src is not None:
        commit["measured_src"] = str(args.src.resolve())
    found = report.targets(big, small, latency, (plan.size, plan.small_size))
    message = f"{plan.message_bytes} bytes" if plan.message_bytes else "32 KiB"
    out: list[str] = [
        f"kuber-exec benchmarks, {started:%Y-%m-%d %H:%M} UTC, {elapsed.total_seconds():.0f} s"
        f"{' (--quick)' if args.quick else ''}, commit {commit['describe']}"
        + (f", kuber-exec from {args.src}" if args.src else ""),
        f"Python {platform.python_version()} on {before['cpu_model']} x {before['cpus']} CPUs, "
        f"load average {before['load_average']:.1f} at the start; kubectl: {kubectl or 'none'}",
        "Each row is a fresh process; stdout bytes counted; medians of interleaved rounds "
        f"({plan.repeat} on the benchmark server,",
        f"{plan.sandbox_repeat} on the sandbox, {plan.official_repeat} for the official client). "
        "CPU: user+sys of the client per 100 MB;",
        "server CPU: the benchmark server's, per 100 MB, over the client's whole process life. "
        "+MiB: peak RSS above the RSS before",
        "the transfer. % floor: throughput against the websockets bare loop. 1 MB = 10^6 bytes.",
        "",
        f"Benchmark server, stdout {size_text(plan.size)} in {message} messages:",
        *report.throughput_table(big, server_cpu=True),
        "",
        f"Benchmark server, stdout {size_text(plan.small_size)} (with the official client):",
        *report.throughput_table(small, server_cpu=True),
        "",
        f"Latency of `true` on the benchmark server, {plan.iterations} runs after 3 warm-ups, "
        f"median of {plan.latency_repeat} rounds;",
        "cache warm: no REST read; no cache: GET deployment, LIST pods, GET replicaset; "
        "bare exec: the WebSocket alone:",
        *report.latency_table(latency),
        "",
    ]
    if sandbox:
        out += [
            f"End to end on the sandbox (pods are processes: `head -c N /dev/zero`), "
            f"stdout {size_text(plan.size)}:",
            *report.throughput_table(sandbox, server_cpu=False),
            "",
        ]
    out += ["Targets (a miss is reported, not a failure; machines are noisy):", *found.lines]
    print("\n".join(out), flush=True)
    results = {
        "format": 2,
        "source": "benchmarks/run.py",
        "started": started.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed.total_seconds(), 1),
        "quick": args.quick,
        "commit": commit,
        "machine": {**before, "load_average_end": machine()["load_average"]},
        "versions": versions(kubectl),
        "plan": attrs.asdict(plan),
        "throughput": {
            "fast": {str(plan.size): report.rows(big), str(plan.small_size): report.rows(small)},
            "sandbox": {str(plan.size): report.rows(sandbox)} if sandbox else {},
        },
        "latency": {"fast": report.rows(latency)},
        "targets": found.figures,
        "table": out,
    }
    json_path: Path = args.json or RESULTS / ("quick.json" if args.quick else "latest.json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    failed = [s for group in (big, small, latency, sandbox) for s in _failed(group)]
    return 1 if failed else 0


def _failed(samples: Mapping[str, Samples]) -> list[Samples]:
    return [sample for sample in samples.values() if sample.error is not None]


if __name__ == "__main__":
    sys.exit(main())
