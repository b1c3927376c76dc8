"""A crowd of sessions on the real cluster: what is left running when they all end at once, and
when their replica is killed (issue 39).

With the tier's cluster up (``make realcluster``), inside its network namespace
(``make realcluster-crowd``). For each runtime and crowd size S (default 50, 200, 500):

- **leave**: one process opens S non-TTY sessions of ``sleep <marker>`` in ``kx-target/shell``
  (at most 50 opening at a time), waits until the S processes run in the pod, then leaves every
  session at once; it waits until the service's ``cleanup_status`` has nothing in progress and
  counts the processes still running (this machine's ``/proc``: the pod's processes are ours).
- **kill**: a child process (``crowd.py hold ...``) opens the S sessions with ``ClusterSlots``
  (their pods recorded in the session records) and is ``kill -9``'d once they all run and are
  recorded; a surviving replica (this process, its own ``ClusterSlots``) cleans up after it.
  Counted: the seconds until no process is left, and what is left after the stated bound
  (``2 × duration`` after the kill, plus the cleanups' own time).

Writes ``benchmarks/results/realcluster_crowd_1_<minor>.json`` with a ``table`` that
docs/cleanup.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from realcluster import kube  # noqa: E402  (the tier's helpers: cluster.json, workloads)

SLOTS_NS = "kx-slots"
OPENING_AT_ONCE = 50
DURATION = 10
SETTLE_SECONDS = 70.0


def request(adapter: Any, marker: str) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=kube.WS_MAIN),
        deployment="shell",
        command=["sleep", marker],
    )


def rbac(cluster: kube.Cluster) -> None:
    """The executor may hold Leases in kx-slots (as the platform tests give it)."""
    executor = {"kind": "ServiceAccount", "name": "executor", "namespace": "kx-target"}
    items = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SLOTS_NS}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "slots", "namespace": SLOTS_NS},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["create", "get", "update", "delete", "list"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "slots-executor", "namespace": SLOTS_NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "slots"},
            "subjects": [executor],
        },
    ]
    manifest = {"apiVersion": "v1", "kind": "List", "items": items}
    kube.kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest).encode())


def adapter_of(runtime: str) -> Any:
    if runtime == "trio":
        import kuber_exec_trio

        return kuber_exec_trio
    import kuber_exec_asyncio

    return kuber_exec_asyncio


async def wait_until(condition: Any, seconds: float) -> bool:
    """Poll ``condition`` (another process's state: /proc, the API) until it holds."""
    with anyio.move_on_after(seconds):
        while not condition():  # noqa: ASYNC110 - the state lives in other processes
            await anyio.sleep(0.25)
        return True
    return bool(condition())


async def open_crowd(
    adapter: Any, service: Any, count: int, marker: str, leave: anyio.Event
) -> None:
    """Open ``count`` sessions (at most OPENING_AT_ONCE opening at a time) and hold them until
    ``leave``; returns once every session has left (each within its cleanup bound)."""
    limiter = anyio.Semaphore(OPENING_AT_ONCE)

    async def one() -> None:
        async with limiter:
            session = service.open_interactive(request(adapter, marker), tty=False, stdin=False)
            await session.__aenter__()
        try:
            await leave.wait()
        finally:
            await session.__aexit__(None, None, None)

    async with anyio.create_task_group() as tasks:
        for _ in range(count):
            tasks.start_soon(one)


async def leave_run(runtime: str, cluster: kube.Cluster, count: int) -> dict[str, Any]:
    adapter = adapter_of(runtime)
    marker = f"100000.{uuid.uuid4().int % 10**9:09d}"
    backend = adapter.KubernetesBackend.from_kubeconfig(cluster.kubeconfig("executor"))
    # REST reads (the executor may not watch): one resolution per session opened.
    async with backend:
        service = adapter.ExecService(backend)
        leave = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(open_crowd, adapter, service, count, marker, leave)
            assert await wait_until(lambda: len(kube.processes_with(marker)) == count, 300)
            leave.set()
            left_at = time.monotonic()
        returned = time.monotonic() - left_at
        at_return = len(kube.processes_with(marker))
        await wait_until(lambda: service.cleanup_status.in_progress == 0, SETTLE_SECONDS)
        settled = time.monotonic() - left_at
        status = service.cleanup_status
    left = len(kube.processes_with(marker))
    return {
        "mode": "leave",
        "runtime": runtime,
        "sessions": count,
        "left_at_return": at_return,
        "left": left,
        "returned_s": round(returned, 1),
        "settled_s": round(settled, 1),
        "cleanup_execs": status.execs,
        "abandoned": status.abandoned,
    }


def recorded(cluster: kube.Cluster, replica: str) -> int:
    """Sessions of ``replica`` whose pod and supervision are in the session records."""
    leases = kube.get_json(cluster, "leases", "-n", SLOTS_NS)["items"]
    count = 0
    for lease in leases:
        annotations = lease["metadata"].get("annotations") or {}
        for entry in json.loads(annotations.get("kuber-exec.io/sessions", "{}")).values():
            count += entry[0] == replica and entry[2] is not None
    return count


async def hold(runtime: str, cluster: kube.Cluster, count: int, marker: str) -> None:
    """The replica to kill: S sessions with cluster slots, then wait forever."""
    adapter = adapter_of(runtime)
    slots = adapter.ClusterSlots(SLOTS_NS, duration=DURATION, replica=f"doomed-{os.getpid()}")
    backend = adapter.KubernetesBackend.from_kubeconfig(
        cluster.kubeconfig("executor"), cluster_slots=slots
    )
    async with backend:
        service = adapter.ExecService(backend)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(open_crowd, adapter, service, count, marker, anyio.Event())
            assert await wait_until(lambda: len(kube.processes_with(marker)) == count, 300)
            assert await wait_until(lambda: recorded(cluster, slots.replica) == count, 120)
            print("held", flush=True)


async def kill_run(runtime: str, cluster: kube.Cluster, count: int) -> dict[str, Any]:
    adapter = adapter_of(runtime)
    marker = f"100000.{uuid.uuid4().int % 10**9:09d}"
    child = subprocess.Popen(  # noqa: ASYNC220 - started, then only read and killed
        [sys.executable, __file__, "hold", runtime, str(count), marker],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    line = await anyio.to_thread.run_sync(child.stdout.readline)
    assert line == b"held\n", line
    child.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    await anyio.to_thread.run_sync(child.wait)
    child.stdout.close()
    slots = adapter.ClusterSlots(SLOTS_NS, duration=DURATION, replica=f"survivor-{os.getpid()}")
    backend = adapter.KubernetesBackend.from_kubeconfig(
        cluster.kubeconfig("executor"), cluster_slots=slots
    )
    bound = 2 * DURATION + 30.0
    async with backend:
        gone = await wait_until(lambda: not kube.processes_with(marker), bound)
        cleaned = time.monotonic() - killed_at
    return {
        "mode": "kill -9",
        "runtime": runtime,
        "sessions": count,
        "left": len(kube.processes_with(marker)),
        "cleaned_s": round(cleaned, 1) if gone else None,
        "bound_s": bound,
    }


def table(rows: list[dict[str, Any]], version: str) -> list[str]:
    lines = [
        f"Kubernetes {version}, sessions in one pod, lease duration {DURATION} s",
        "",
        "mode     runtime  sessions  left  seconds (all ended)  cleanup execs",
        "-" * 70,
    ]
    for row in rows:
        seconds = row.get("settled_s") if row["mode"] == "leave" else row.get("cleaned_s")
        lines.append(
            f"{row['mode']:<8} {row['runtime']:<8} {row['sessions']:>8} {row['left']:>5} "
            f"{seconds if seconds is not None else '-':>20} {row.get('cleanup_execs', '-'):>14}"
        )
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "hold":
        _, _, runtime, count, marker = sys.argv
        cluster = kube.load_cluster()
        anyio.run(hold, runtime, cluster, int(count), marker, backend=runtime)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="50,200,500")
    parser.add_argument("--runtime", default="trio,asyncio")
    arguments = parser.parse_args()
    cluster = kube.load_cluster()
    kube.make_workloads(cluster)
    rbac(cluster)
    major, minor, version = kube.server_version(cluster)
    rows = []
    for runtime in arguments.runtime.split(","):
        for count in (int(s) for s in arguments.sessions.split(",")):
            for run in (leave_run, kill_run):
                row = anyio.run(run, runtime, cluster, count, backend=runtime)
                print(json.dumps(row), flush=True)
                rows.append(row)
    result = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "version": version,
        "rows": rows,
        "table": table(rows, version),
    }
    out = REPO / "benchmarks" / "results" / f"realcluster_crowd_{major}_{minor}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(result["table"]))


if __name__ == "__main__":
    main()
