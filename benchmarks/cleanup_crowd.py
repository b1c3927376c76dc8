"""A crowd leaving at once: how many of its processes are left running (issue 39).

    python benchmarks/cleanup_crowd.py [--sessions 500,3000,10000] [--runtime trio,asyncio]
        [--json PATH]

Against the sandbox (``sandbox_server.py``, pods are this machine's processes), each in a
process of its own. For every runtime and crowd size S, in a fresh client process
(``cleanup_crowd.py measure ...``) and fresh sandboxes:

1. open S non-TTY ``cat`` sessions (``open_interactive(..., tty=False)``, stdin open, so each
   ``cat`` waits for input) from one process, at most 100 opening at a time, through the watch
   cache; wait until every session's ``cat`` runs (its ``KUBER_EXEC_SESSION`` variable is in
   ``/proc/PID/environ``);
2. leave every block at once; each call returns within its bound (``2 * cleanup_grace + 2``,
   6 s by default), reporting ``pending`` for a cleanup not settled by then;
3. wait until the services' ``cleanup_status`` shows nothing in progress, at most the
   background limit (60 s, counted from each session's queueing) after the last call returned,
   and count those sessions' processes still running: once when the last call has returned,
   once when the cleanups have settled.

A sandbox holds five descriptors per session (the socket, three pipes, a pidfd) and
``RLIMIT_NOFILE``'s hard limit cannot be raised without privileges: S above
``--sessions-per-sandbox`` (3,000 with a hard limit of 20,000) is spread over several sandboxes,
each with its own backend and ``ExecService`` in the one client process (reported as
``sandboxes``). Every process raises its soft limit to the hard one.

With ``CLEANUP_CROWD_LOG=PREFIX`` in the environment, each run's log (the crew's line per batch,
warnings) is kept in ``PREFIX-RUNTIME-S.log``.

Prints one JSON line per run, then a table; writes them, with the machine, the date and the
commit, to ``--json`` (``benchmarks/results/cleanup_crowd.json`` by default), which
docs/cleanup.md quotes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import anyio
from harness import Endpoint, server_process
from run import RESULTS, git_commit, machine, versions

from kuber_exec_core import ExecRequest, Workspace
from kuber_exec_core.supervision import SESSION_ENVIRONMENT_VARIABLE

HERE = Path(__file__).resolve().parent
SIZES = (500, 3000, 10_000)
RUNTIMES = ("trio", "asyncio")
OPENING_AT_ONCE = 100
#: The longest the crowd's cleanups may go on after the last call returned (the crew's
#: BACKGROUND_LIMIT from each one's queueing, which was before), plus a margin.
SETTLE_SECONDS = 60.0 + 5.0
#: The Lease namespace of the kill runs, the replicas' lease duration, and how long the survivor
#: is given: its first sweep comes one duration after it starts (the dead replica's heartbeat
#: has expired by then), the cleanups take up to the crew's 60 s, and a second sweep follows.
SLOTS_NAMESPACE = "kuber-exec"
KILL_DURATION = 10
KILL_BOUND = 2 * KILL_DURATION + 60.0 + 10.0


def raise_fd_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def running(session_ids: set[str]) -> int:
    """How many processes on this machine carry one of ``session_ids`` in their environment."""
    wanted = {f"{SESSION_ENVIRONMENT_VARIABLE}={i}".encode() for i in session_ids}
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                environment = file.read()
        except OSError:
            continue
        if SESSION_ENVIRONMENT_VARIABLE.encode() in environment and wanted.intersection(
            environment.split(b"\0")
        ):
            count += 1
    return count


async def scan(session_ids: set[str]) -> int:
    """:func:`running` in a worker thread: a scan of /proc at 10,000 processes takes seconds,
    which would block the event loop (and a replica's heartbeat: it would fence)."""
    return await anyio.to_thread.run_sync(running, set(session_ids))


# The client: one run, in its own process.


async def recorded(urls: Sequence[str]) -> int:
    """Sessions whose pod and supervision are in the sandboxes' session records."""
    import httpx

    count = 0
    async with httpx.AsyncClient() as http:
        for url in urls:
            answer = await http.get(
                f"{url}/apis/coordination.k8s.io/v1/namespaces/{SLOTS_NAMESPACE}/leases",
                params={"labelSelector": "kuber-exec.io/role=sessions"},
            )
            for lease in answer.json()["items"]:
                annotations = lease["metadata"].get("annotations") or {}
                stored = json.loads(annotations.get("kuber-exec.io/sessions", "{}"))
                count += sum(1 for entry in stored.values() if entry[2] is not None)
    return count


async def crowd(
    adapter: Any, urls: Sequence[str], sessions: int, hold: Path | None = None
) -> dict[str, Any]:
    """Open the crowd and leave it at once; with ``hold`` (a replica to kill), open it with
    cluster slots, write its session ids to ``hold`` once all are recorded, print ``held``,
    and wait to be killed."""
    request = ExecRequest(
        workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=["cat"]
    )
    ids: set[str] = set()
    failures: list[str] = []
    leave = anyio.Event()
    opening = anyio.Semaphore(OPENING_AT_ONCE)

    async def one(service: Any) -> None:
        held = True
        await opening.acquire()
        try:
            async with service.open_interactive(request, tty=False) as session:
                opening.release()
                held = False
                ids.add(session._session.supervision.session_id)
                await leave.wait()
        except Exception as error:  # counted, and the run goes on
            failures.append(f"{type(error).__name__}: {error}"[:200])
        finally:
            if held:
                opening.release()

    async with AsyncExitStack() as stack:
        services = []
        for index, url in enumerate(urls):
            slots = (
                None
                if hold is None
                else adapter.ClusterSlots(
                    SLOTS_NAMESPACE, duration=KILL_DURATION, replica=f"doomed-{index}"
                )
            )
            backend = await stack.enter_async_context(
                adapter.KubernetesBackend(adapter.ClusterConfig(url), cluster_slots=slots)
            )
            cache = await stack.enter_async_context(backend.watch(["demo"]))
            with anyio.fail_after(60):
                await cache.wait_synced()
            services.append(adapter.ExecService(backend))
        started = time.monotonic()
        async with anyio.create_task_group() as tasks:
            for index in range(sessions):
                tasks.start_soon(one, services[index % len(services)])
            while len(ids) + len(failures) < sessions:  # noqa: ASYNC110 - a count, not an order
                await anyio.sleep(0.2)
            opened = time.monotonic() - started
            # Every cat running before the leave (a scan of /proc takes a while at 10,000).
            while await scan(ids) < len(ids) and time.monotonic() - started < 300:  # noqa: ASYNC110
                await anyio.sleep(0.5)  # /proc changes with no event to wait on
            before = await scan(ids)
            if hold is not None:
                with anyio.fail_after(300):
                    while await recorded(urls) < len(ids):  # noqa: ASYNC110
                        await anyio.sleep(0.5)  # the records change with no event here
                await anyio.Path(hold).write_text("\n".join(sorted(ids)))
                print(json.dumps({"held": len(ids), "running": before}), flush=True)
                await anyio.sleep_forever()
            left_at = time.monotonic()
            leave.set()
        returned_at = time.monotonic()
        returned = returned_at - left_at
        left_at_return = await scan(ids)
        settled: float | None = None
        # Each cleanup may go on for 60 s from its queueing, before its caller returned.
        while time.monotonic() - returned_at < SETTLE_SECONDS:
            if all(service.cleanup_status.in_progress == 0 for service in services):
                settled = time.monotonic() - left_at
                break
            await anyio.sleep(0.2)
        left_after = await scan(ids)
        statuses = [service.cleanup_status for service in services]
    return {
        "sessions": sessions,
        "sandboxes": len(urls),
        "opened": len(ids),
        "open_failures": len(failures),
        "first_failure": failures[0] if failures else None,
        "open_seconds": round(opened, 1),
        "running_before_leave": before,
        "callers_returned_seconds": round(returned, 2),
        "left_when_callers_returned": left_at_return,
        "settled_seconds": None if settled is None else round(settled, 2),
        "left": left_after,
        **{
            field: sum(getattr(status, field) for status in statuses)
            for field in ("done", "failed", "abandoned", "pending", "execs")
        },
    }


async def survive(adapter: Any, urls: Sequence[str], ids: set[str]) -> dict[str, Any]:
    """A surviving replica: cluster slots on every sandbox, until the dead one's sessions are
    all ended (or the bound passes)."""
    started = time.monotonic()
    async with AsyncExitStack() as stack:
        for index, url in enumerate(urls):
            slots = adapter.ClusterSlots(
                SLOTS_NAMESPACE, duration=KILL_DURATION, replica=f"survivor-{index}"
            )
            await stack.enter_async_context(
                adapter.KubernetesBackend(adapter.ClusterConfig(url), cluster_slots=slots)
            )
        gone: float | None = None
        while time.monotonic() - started < KILL_BOUND:
            if await scan(ids) == 0:
                gone = time.monotonic() - started
                break
            await anyio.sleep(0.5)  # /proc changes with no event to wait on
        left = await scan(ids)
    return {"left": left, "cleaned_seconds": None if gone is None else round(gone, 1)}


def measure(runtime: str, urls: Sequence[str], sessions: int, hold: Path | None = None) -> None:
    raise_fd_limit()
    if os.environ.get("CLEANUP_CROWD_LOG"):
        # The crew's batch lines and warnings, on stderr (the driver keeps them in a file).
        logging.basicConfig(
            level=logging.INFO, format="%(relativeCreated)8.0f ms %(levelname)s %(message)s"
        )
    if runtime == "trio":
        import kuber_exec_trio as adapter
    else:
        import kuber_exec_asyncio as adapter  # type: ignore[no-redef]
    result = anyio.run(crowd, adapter, urls, sessions, hold, backend=runtime)
    print(json.dumps({"runtime": runtime, **result}), flush=True)


def survivor(runtime: str, urls: Sequence[str], ids_file: Path) -> None:
    raise_fd_limit()
    if runtime == "trio":
        import kuber_exec_trio as adapter
    else:
        import kuber_exec_asyncio as adapter  # type: ignore[no-redef]
    ids = set(ids_file.read_text().split())
    result = anyio.run(survive, adapter, urls, ids, backend=runtime)
    print(json.dumps(result), flush=True)


# The driver.


def one_run(runtime: str, sessions: int, per_sandbox: int) -> dict[str, Any]:
    count = math.ceil(sessions / per_sandbox)
    with ExitStack() as stack:
        endpoints: list[Endpoint] = [
            stack.enter_context(server_process("sandbox")) for _ in range(count)
        ]
        done = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "measure",
                runtime,
                str(sessions),
                *(endpoint.url for endpoint in endpoints),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    log = os.environ.get("CLEANUP_CROWD_LOG")
    if log:
        Path(f"{log}-{runtime}-{sessions}.log").write_text(done.stderr, encoding="utf-8")
    return last_json(done, runtime, sessions)


def last_json(
    done: subprocess.CompletedProcess[str], runtime: str, sessions: int
) -> dict[str, Any]:
    """A child run's last JSON line, or the error that ended it."""
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {
            "runtime": runtime,
            "sessions": sessions,
            "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300],
        }
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def kill_run(runtime: str, sessions: int, per_sandbox: int) -> dict[str, Any]:
    """Open the crowd in a replica with cluster slots, ``kill -9`` it, and count what a
    surviving replica has not ended within ``KILL_BOUND`` seconds."""
    count = math.ceil(sessions / per_sandbox)
    script = str(Path(__file__).resolve())
    with ExitStack() as stack:
        endpoints: list[Endpoint] = [
            stack.enter_context(server_process("sandbox")) for _ in range(count)
        ]
        urls = [endpoint.url for endpoint in endpoints]
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        ids_file = scratch / "ids"
        errors = stack.enter_context((scratch / "stderr").open("w"))
        doomed = subprocess.Popen(
            [sys.executable, script, "hold", runtime, str(sessions), str(ids_file), *urls],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        assert doomed.stdout is not None
        held: dict[str, Any] = {}
        for line in doomed.stdout:
            if line.startswith("{"):
                held = json.loads(line)
                break
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        doomed.stdout.close()
        if "held" not in held:
            said = (scratch / "stderr").read_text().strip().splitlines() or ["no output"]
            return {
                "runtime": runtime,
                "sessions": sessions,
                "error": f"the replica never held: {said[-1][:300]}",
            }
        done = subprocess.run(
            [sys.executable, script, "survive", runtime, str(ids_file), *urls],
            capture_output=True,
            text=True,
            timeout=KILL_BOUND + 120,
            check=False,
        )
    outcome = last_json(done, runtime, sessions)
    if "error" in outcome:
        return outcome
    return {
        "runtime": runtime,
        "sessions": sessions,
        "sandboxes": count,
        "running_at_kill": held["running"],
        **outcome,
    }


KILL_COLUMNS = (
    ("runtime", "runtime", "{}"),
    ("sessions", "sessions", "{:,}"),
    ("sandboxes", "sandboxes", "{}"),
    ("running_at_kill", "running at kill", "{:,}"),
    ("cleaned_seconds", "all ended after s", "{}"),
    ("left", "left", "{:,}"),
)


COLUMNS = (
    ("runtime", "runtime", "{}"),
    ("sessions", "sessions", "{:,}"),
    ("sandboxes", "sandboxes", "{}"),
    ("open_seconds", "open s", "{}"),
    ("callers_returned_seconds", "returned s", "{}"),
    ("left_when_callers_returned", "left then", "{:,}"),
    ("settled_seconds", "settled s", "{}"),
    ("left", "left", "{:,}"),
    ("pending", "pending", "{:,}"),
    ("execs", "execs", "{:,}"),
    ("done", "done", "{:,}"),
    ("failed", "failed", "{}"),
    ("abandoned", "abandoned", "{}"),
)


def table(
    rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]] = COLUMNS
) -> list[str]:
    cells = [[title for _, title, _ in columns]]
    for row in rows:
        if "error" in row:
            cells.append([row["runtime"], f"{row['sessions']:,}", f"error: {row['error']}"])
            continue
        cells.append(
            ["-" if row.get(key) is None else shown.format(row[key]) for key, _, shown in columns]
        )
    widths = [max(len(line[i]) for line in cells if i < len(line)) for i in range(len(columns))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i else cell.ljust(widths[i]) for i, cell in enumerate(line)
        ).rstrip()
        for line in cells
    ]


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["measure"]:
        measure(arguments[1], arguments[3:], int(arguments[2]))
        return 0
    if arguments[:1] == ["hold"]:
        measure(arguments[1], arguments[4:], int(arguments[2]), Path(arguments[3]))
        return 0
    if arguments[:1] == ["survive"]:
        survivor(arguments[1], arguments[3:], Path(arguments[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", default=",".join(map(str, SIZES)))
    parser.add_argument("--runtime", default=",".join(RUNTIMES))
    parser.add_argument("--sessions-per-sandbox", type=int, default=None)
    parser.add_argument("--json", type=Path, help="where to write the results as JSON")
    parser.add_argument(
        "--kill",
        action="store_true",
        help="kill -9 the crowd's replica instead (cleanup_crowd_kill.json by default)",
    )
    args = parser.parse_args(arguments)
    limit = raise_fd_limit()
    # Five descriptors per session in a sandbox (six counted: a margin), and its own.
    per_sandbox = args.sessions_per_sandbox or max(100, (limit - 2000) // 6 // 100 * 100)
    sizes = [int(size) for size in args.sessions.split(",")]
    runtimes = args.runtime.split(",")
    started = datetime.datetime.now(datetime.UTC)
    before = machine()
    rows = []
    for sessions in sizes:
        for runtime in runtimes:
            run = kill_run if args.kill else one_run
            row = run(runtime, sessions, per_sandbox)
            print(json.dumps(row), flush=True)
            rows.append(row)
    elapsed = datetime.datetime.now(datetime.UTC) - started
    commit = git_commit()
    if args.kill:
        heading = [
            f"A crowd's replica killed, {started:%Y-%m-%d %H:%M} UTC, "
            f"{elapsed.total_seconds():.0f} s, commit {commit['describe']}",
            f"{before['cpu_model']} x {before['cpus']} CPUs, load average "
            f"{before['load_average']:.1f} at the start; at most {per_sandbox:,} sessions per "
            "sandbox",
            f"S non-TTY cat sessions recorded with ClusterSlots (duration {KILL_DURATION} s), "
            "then kill -9 of their replica;",
            "a surviving replica sweeps every duration: seconds from its start until none is "
            f"left (bound {KILL_BOUND:.0f} s).",
            "",
            *table(rows, KILL_COLUMNS),
        ]
        print("\n".join(heading), flush=True)
        kill_path: Path = args.json or RESULTS / "cleanup_crowd_kill.json"
        kill_path.write_text(
            json.dumps(
                {
                    "format": 1,
                    "source": "benchmarks/cleanup_crowd.py --kill",
                    "started": started.isoformat(timespec="seconds"),
                    "commit": commit,
                    "rows": rows,
                    "table": heading,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        return 1 if any("error" in row or row.get("left") for row in rows) else 0
    out = [
        f"A crowd leaving at once, {started:%Y-%m-%d %H:%M} UTC, {elapsed.total_seconds():.0f} s, "
        f"commit {commit['describe']}",
        f"{before['cpu_model']} x {before['cpus']} CPUs, load average "
        f"{before['load_average']:.1f} at the start; RLIMIT_NOFILE {limit:,}, at most "
        f"{per_sandbox:,} sessions per sandbox",
        "S non-TTY cat sessions left at once; cleanup_grace 2 s (callers held <= 6 s);",
        "left then: their processes running when the last call returned; left: once the",
        "cleanups settled (each within 60 s of its queueing); times in seconds from the leave.",
        "",
        *table(rows),
    ]
    print("\n".join(out), flush=True)
    results = {
        "format": 1,
        "source": "benchmarks/cleanup_crowd.py",
        "started": started.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed.total_seconds(), 1),
        "commit": commit,
        "machine": {**before, "load_average_end": machine()["load_average"]},
        "versions": versions(None),
        "plan": {"sessions": sizes, "runtimes": runtimes, "sessions_per_sandbox": per_sandbox},
        "rows": rows,
        "table": out,
    }
    json_path: Path = args.json or RESULTS / "cleanup_crowd.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 1 if any("error" in row or row.get("left") for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
