"""What cluster-wide limits cost the API server: Lease requests per second with S sessions open
over R replicas, the previous design (one Lease per session, renewed) against the session
records (one heartbeat per replica), and what taking a slot costs as a workspace fills up.

Against the sandbox, which serves Leases and counts every call (``LeaseStore.calls``). The
replicas are simulated in this process: R ``KubernetesBackend``s, each with its own HTTP client
and ``ClusterSlots`` (its own heartbeat). A session here is a held slot (the slot's context
manager entered, as ``ExecService`` enters it around an exec), without an exec: the exec's own
traffic is the same in both designs, and S processes would measure the sandbox, not the Leases.
S sessions are spread over S / 10 workspaces, limit 10 each.

    python benchmarks/lease_load.py            # writes benchmarks/results/lease_load.json
    python benchmarks/lease_load.py --quick    # S = 1,000 only, shorter windows
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

import kuber_exec_trio
from kuber_exec_anyio._kubernetes._lease_slots import LeaseWorkspaceSlots
from kuber_exec_anyio._kubernetes._legacy_slots import LegacySlotLeases
from kuber_exec_core import ExecError, Workspace
from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread

RESULTS = Path(__file__).with_name("results") / "lease_load.json"
NAMESPACE = "platform"
LIMIT = 10
WRITES = ("create", "update", "delete")


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


async def steady_state(
    url: str, store: Any, design: str, sessions: int, replicas: int, window: float
) -> dict[str, Any]:
    """Open ``sessions`` over ``replicas``, then count the Lease calls over ``window`` s."""
    async with AsyncExitStack() as stack:
        holders: list[Any] = []
        for index in range(replicas):
            slots = kuber_exec_trio.ClusterSlots(NAMESPACE, replica=f"{design}-{index}")
            backend = kuber_exec_trio.KubernetesBackend(
                kuber_exec_trio.ClusterConfig(url),
                cluster_slots=slots,
                max_concurrent_requests=32,
            )
            await stack.enter_async_context(backend)
            if design == "session records":
                holders.append(LeaseWorkspaceSlots(LIMIT, slots, backend.rest_client))
            else:
                holders.append(LegacySlotLeases(LIMIT, slots, backend.rest_client))
        opened = 0
        started = time.monotonic()
        release = anyio.Event()
        all_open = anyio.Event()

        refused = 0

        async def hold(index: int) -> None:
            nonlocal opened, refused
            workspace = Workspace(project=f"p{index // LIMIT}", uid=f"u{index // LIMIT}")
            try:
                async with holders[index % replicas].hold(workspace):
                    opened += 1
                    if opened + refused == sessions:
                        all_open.set()
                    await release.wait()
            except ExecError:
                # The per-session design on a loaded machine: a renewal came too late, another
                # session took the slot over, and this one found the workspace full.
                refused += 1
                if opened + refused == sessions:
                    all_open.set()

        async with anyio.create_task_group() as tasks:
            for index in range(sessions):
                tasks.start_soon(hold, index)
                if index % 100 == 99:
                    await anyio.lowlevel.checkpoint()  # let the first ones start writing
            await all_open.wait()
            open_seconds = time.monotonic() - started
            before = store.calls.copy()
            await anyio.sleep(window)  # the measurement window (not synchronisation)
            calls = store.calls - before
            release.set()
    writes = sum(calls[verb] for verb in WRITES)
    return {
        "design": design,
        "sessions": sessions,
        "replicas": replicas,
        "window_s": window,
        "open_s": round(open_seconds, 1),
        "refused": refused,
        "writes_per_s": round(writes / window, 1),
        "reads_per_s": round((calls["get"] + calls["list"]) / window, 1),
        "calls": dict(calls),
    }


async def taking(url: str, store: Any, design: str) -> list[dict[str, Any]]:
    """Calls and latency of one more session when 0, N/2 and N-1 of N are held."""
    rows = []
    async with AsyncExitStack() as stack:
        slots = kuber_exec_trio.ClusterSlots(NAMESPACE, replica=f"take-{design}")
        backend = kuber_exec_trio.KubernetesBackend(
            kuber_exec_trio.ClusterConfig(url), cluster_slots=slots
        )
        await stack.enter_async_context(backend)
        if design == "session records":
            holder: Any = LeaseWorkspaceSlots(LIMIT, slots, backend.rest_client)
        else:
            holder = LegacySlotLeases(LIMIT, slots, backend.rest_client)
        workspace = Workspace(project=f"take-{design[:3]}", uid="u")
        async with holder.hold(workspace):  # warm: the heartbeat, the connection
            pass
        for taken in (0, LIMIT // 2, LIMIT - 1):
            async with AsyncExitStack() as held:
                for _ in range(taken):
                    await held.enter_async_context(holder.hold(workspace))
                samples = []
                counts = []
                for _ in range(20):
                    before = sum(store.calls.values())
                    start = time.perf_counter()
                    async with holder.hold(workspace):
                        samples.append(time.perf_counter() - start)
                        counts.append(sum(store.calls.values()) - before)
                samples.sort()
                rows.append(
                    {
                        "design": design,
                        "taken": taken,
                        "calls_to_take": max(counts),
                        "median_ms": round(samples[len(samples) // 2] * 1000, 2),
                    }
                )
    return rows


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"Lease API load, {result['started']}, commit {result['commit']}",
        f"{result['machine']}; sandbox API server on loopback; {LIMIT} sessions per workspace",
        "",
        "design               sessions  replicas  writes/s  reads/s  writes/min/session  refused",
        "-" * 88,
    ]
    for row in result["steady"]:
        per_session = row["writes_per_s"] * 60 / row["sessions"]
        lines.append(
            f"{row['design']:<20} {row['sessions']:>8,} {row['replicas']:>9} "
            f"{row['writes_per_s']:>9.1f} {row['reads_per_s']:>8.1f} {per_session:>19.3f} "
            f"{row['refused']:>8}"
        )
    lines += ["", "design               held   calls to take one more   median ms", "-" * 64]
    for row in result["taking"]:
        lines.append(
            f"{row['design']:<20} {row['taken']:>4}/{LIMIT} {row['calls_to_take']:>24} "
            f"{row['median_ms']:>11.2f}"
        )
    return lines


async def measure(sandbox: Any, quick: bool, sizes: tuple[int, ...]) -> dict[str, Any]:
    window = 10.0 if quick else 20.0
    steady = []
    taken = []
    for design in ("per-session leases", "session records"):
        taken += await taking(sandbox.url, sandbox.leases, design)
        for sessions in sizes:
            for replicas in (3, 20):
                row = await steady_state(
                    sandbox.url, sandbox.leases, design, sessions, replicas, window
                )
                print(json.dumps(row), flush=True)
                steady.append(row)
    return {"steady": steady, "taking": taken}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s windows, S = 1,000 only")
    parser.add_argument("--sessions", default="1000,10000", help="the values of S")
    arguments = parser.parse_args()
    began = time.time()
    # The sandbox runs in a thread of its own, started from outside the measuring event loop.
    with run_sandbox_in_thread(demo_cluster()) as sandbox:
        sizes = (1_000,) if arguments.quick else tuple(map(int, arguments.sessions.split(",")))
        figures = anyio.run(measure, sandbox, arguments.quick, sizes, backend="trio")
    result = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began)),
        "elapsed_seconds": round(time.time() - began),
        "commit": _commit(),
        "machine": f"Python {platform.python_version()} on {platform.machine()}, "
        f"{len(__import__('os').sched_getaffinity(0))} CPUs",
        **figures,
    }
    result["table"] = table(result)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(result["table"]))
    sys.exit(0)
