"""How long leaving a session takes when something is blocked, on both runtimes.

    python benchmarks/leave.py [--runs N]

Against the loopback sandbox (started here, in a thread). Each scenario prints one JSON line:
the runtime, the scenario and the seconds from "leave" (the end of the ``async with`` body, a
cancellation, or the cap error) to the call returning, over ``--runs`` runs (max and median).

- ``blocked-stdin``: ``cat`` whose output nobody reads; stdin is sent until a send blocks, the
  send is cancelled after 0.5 s, then the block is left;
- ``full-queue``: ``yes`` with nobody reading: the frame queue and every buffer fill, then leave;
- ``cap-while-sending-stdin``: ``execute`` of ``cat`` with 10 MB of stdin and a 1-byte stdout cap;
- ``cancelled-caller``: ``execute`` of ``sleep 30`` (which reads no stdin) with 10 MB of stdin,
  cancelled after 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import trio

import kuber_exec_asyncio
import kuber_exec_trio
from kuber_exec_core import ExecError, ExecRequest, Stdin, Workspace
from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread


def request(*command: str) -> ExecRequest:
    return ExecRequest(
        workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=command
    )


async def blocked_stdin(service: Any) -> float:
    async with service.open_interactive(request("cat"), tty=False) as session:
        with anyio.move_on_after(0.5):
            while True:
                await session.send(Stdin(b"z" * 65536))
        left = time.perf_counter()
    return time.perf_counter() - left


async def full_queue(service: Any) -> float:
    async with service.open_interactive(request("yes"), tty=False, queue_capacity=4) as session:
        await anyio.sleep(0.5)  # measurement only: let every buffer fill
        left = time.perf_counter()
        del session
    return time.perf_counter() - left


async def cap_while_sending_stdin(service: Any) -> float:
    with contextlib.suppress(ExecError):
        await service.execute(request("cat"), stdin=b"y" * 10_000_000, stdout_cap=1)
    # The cap error is raised at the first byte over the cap, a few ms after the start.
    return float("nan")


async def cancelled_caller(service: Any) -> float:
    left = 0.0
    with anyio.CancelScope() as scope:

        async def cancel_later() -> None:
            nonlocal left
            await anyio.sleep(0.2)
            left = time.perf_counter()
            scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancel_later)
            await service.execute(request("sleep", "30"), stdin=b"y" * 10_000_000)
    return time.perf_counter() - left


async def timed_total(function: Callable[[Any], Awaitable[float]], service: Any) -> float:
    start = time.perf_counter()
    measured = await function(service)
    return measured if measured == measured else time.perf_counter() - start  # nan: total


SCENARIOS: dict[str, Callable[[Any], Awaitable[float]]] = {
    "blocked-stdin": blocked_stdin,
    "full-queue": full_queue,
    "cap-while-sending-stdin": cap_while_sending_stdin,
    "cancelled-caller": cancelled_caller,
}


async def main(adapter: Any, url: str, runs: int, limit: float) -> list[dict[str, object]]:
    lines: list[dict[str, object]] = []
    async with adapter.KubernetesBackend(adapter.ClusterConfig(url)) as backend:
        service = adapter.ExecService(backend)
        for name, function in SCENARIOS.items():
            times = []
            for _ in range(runs):
                with anyio.move_on_after(limit) as scope:
                    times.append(await timed_total(function, service))
                if scope.cancelled_caught:
                    times.append(float("inf"))
            lines.append(
                {
                    "runtime": adapter.__name__.removeprefix("kuber_exec_"),
                    "scenario": name,
                    "max_s": round(max(times), 4),
                    "median_s": round(statistics.median(times), 4),
                    "runs": runs,
                }
            )
            print(json.dumps(lines[-1]), flush=True)
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--limit", type=float, default=30.0, help="give up on a run after this")
    arguments = parser.parse_args()
    with run_sandbox_in_thread(demo_cluster()) as sandbox:
        trio.run(main, kuber_exec_trio, sandbox.url, arguments.runs, arguments.limit)
        asyncio.run(main(kuber_exec_asyncio, sandbox.url, arguments.runs, arguments.limit))
