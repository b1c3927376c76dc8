"""Port-forward on the sandbox, side by side: kuber-exec's tunnel and legacy channels (trio and
asyncio) and ``kubectl port-forward`` (1.32, the tunnel), on the same pod port.

- **throughput**: one stream of ``--mib`` MiB from the pod's side (a listener that writes that
  much and closes), read to its end through a local listener of each client;
- **connections**: ``--sequential`` short connections one after the other, then ``--concurrent``
  at once (connect, 1 byte each way, close): failures, and p50/p99 of the time to the echo;
- **failover**: the time from a pod's deletion to the first successful new connection
  (``--failovers`` deletions; kuber-exec only: kubectl ends its forward with the pod).

The sandbox runs in a thread of this process, with every pod's port mapped to listeners of the
benchmark's own; kubectl is a subprocess. Only loopback is used.

    python benchmarks/port_forward.py            # writes benchmarks/results/port_forward.json
    python benchmarks/port_forward.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from forward_sockets import connections, serve, throughput
from forward_sockets import echo as echo_handler
from forward_sockets import firehose as firehose_handler

import kuber_exec_asyncio
import kuber_exec_trio
from kuber_exec_core import Workspace
from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread

RESULTS = Path(__file__).with_name("results") / "port_forward.json"
WORKSPACE = Workspace(project="bench", uid="bench-uid")
FIREHOSE_PORT, ECHO_PORT = 9000, 8080


def _cluster(pods: int) -> Cluster:
    cluster = Cluster()
    cluster.add_deployment(
        "bench", "web", workspace_uid=WORKSPACE.uid, pods=[PodSpec() for _ in range(pods)]
    )
    return cluster


def _map_ports(sandbox: Sandbox, echo: int, firehose: int) -> None:
    web = sandbox.cluster.deployment("bench", "web")
    assert web is not None
    for pod in sandbox.cluster.pods_of(web):
        pod.ports[ECHO_PORT] = ("127.0.0.1", echo)
        pod.ports[FIREHOSE_PORT] = ("127.0.0.1", firehose)


# -- the clients' local listeners ----------------------------------------------------------------


@contextlib.contextmanager
def kubectl_listener(sandbox: Sandbox, remote: int) -> Iterator[int]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    web = sandbox.cluster.deployment("bench", "web")
    assert web is not None
    pod = sandbox.cluster.pods_of(web)[0]
    process = subprocess.Popen(
        [kubectl, "--kubeconfig", str(sandbox.kubeconfig_path), "-n", "bench", "port-forward",
         f"pod/{pod.name}", f":{remote}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        yield int(line.split("127.0.0.1:")[1].split(" ")[0])
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def kuber_listener(sandbox: Sandbox, remote: int, adapter: Any, transport: str) -> Iterator[int]:
    """A kuber-exec PortForward's listener, served by a loop in a thread of its own."""
    ready: list[int] = []
    stop = threading.Event()
    started = threading.Event()

    async def serve() -> None:
        config = adapter.ClusterConfig(sandbox.url)
        async with (
            adapter.KubernetesBackend(config) as backend,
            adapter.PortForward(
                adapter.ExecService(backend), WORKSPACE, "web", transport=transport
            ) as forward,
            forward.listen([(0, remote)]) as bound,
        ):
            ready.append(bound[0].local_port)
            started.set()
            await anyio.to_thread.run_sync(stop.wait)

    backend_name = "trio" if adapter is kuber_exec_trio else "asyncio"
    thread = threading.Thread(target=lambda: anyio.run(serve, backend=backend_name), daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield ready[0]
    finally:
        stop.set()
        thread.join(30)


# -- measurements --------------------------------------------------------------------------------


def failover(adapter: Any, echo: int, firehose: int, trials: int) -> dict[str, float]:
    """Seconds from deleting the forward's pod to the first successful new connection."""
    with run_sandbox_in_thread(_cluster(trials + 1)) as sandbox:
        _map_ports(sandbox, echo, firehose)
        seconds: list[float] = []

        async def run() -> None:
            config = adapter.ClusterConfig(sandbox.url)
            async with (
                adapter.KubernetesBackend(config) as backend,
                adapter.PortForward(adapter.ExecService(backend), WORKSPACE, "web") as forward,
            ):
                for _ in range(trials):
                    async with await forward.connect(ECHO_PORT):
                        pass
                    pod = forward.target.pod
                    started = time.perf_counter()
                    sandbox.cluster.delete_pod("bench", pod)
                    while True:
                        try:
                            async with await forward.connect(ECHO_PORT) as stream:
                                await stream.send(b"x")
                                await stream.receive()
                            break
                        except kuber_exec_trio.ExecError:
                            continue
                    seconds.append(time.perf_counter() - started)

        anyio.run(run, backend="trio" if adapter is kuber_exec_trio else "asyncio")
    cuts = statistics.quantiles(seconds, n=20) if len(seconds) > 1 else seconds * 19
    return {"p50_ms": statistics.median(seconds) * 1000, "p95_ms": cuts[18] * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--sequential", type=int, default=10_000)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--failovers", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=RESULTS)
    options = parser.parse_args()
    if options.quick:
        options.mib, options.sequential, options.concurrent, options.failovers = 32, 200, 50, 5
    size = options.mib << 20
    echo, firehose = serve(echo_handler), serve(firehose_handler(size))
    rows: dict[str, Any] = {}
    clients: list[tuple[str, Callable[[Sandbox, int], Any]]] = [
        ("kuber-exec tunnel (trio)", lambda s, r: kuber_listener(s, r, kuber_exec_trio, "tunnel")),
        ("kuber-exec tunnel (asyncio)",
         lambda s, r: kuber_listener(s, r, kuber_exec_asyncio, "tunnel")),
        ("kuber-exec legacy (trio)", lambda s, r: kuber_listener(s, r, kuber_exec_trio, "legacy")),
    ]  # fmt: skip
    if shutil.which("kubectl"):
        clients.append(("kubectl 1.32 port-forward", kubectl_listener))
    with run_sandbox_in_thread(_cluster(1)) as sandbox:
        _map_ports(sandbox, echo, firehose)
        for name, listener in clients:
            row: dict[str, Any] = {}
            with listener(sandbox, FIREHOSE_PORT) as port:
                row["throughput_mib_s"] = throughput(port, size)
            with listener(sandbox, ECHO_PORT) as port:
                row.update(connections(port, options.sequential, options.concurrent))
            rows[name] = row
            print(f"{name:32} {row['throughput_mib_s']:8.1f} MiB/s  {row}", flush=True)
    for name, adapter in (("trio", kuber_exec_trio), ("asyncio", kuber_exec_asyncio)):
        rows[f"kuber-exec tunnel ({name})"]["failover"] = failover(
            adapter, echo, firehose, options.failovers
        )
        print(f"failover ({name}): {rows[f'kuber-exec tunnel ({name})']['failover']}", flush=True)
    baseline = rows.get("kubectl 1.32 port-forward", {}).get("throughput_mib_s")
    if baseline:
        for row in rows.values():
            row["throughput_vs_kubectl"] = row["throughput_mib_s"] / baseline
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result = {
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "options": {k: v for k, v in vars(options).items() if k != "json"},
        "rows": rows,
    }
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
