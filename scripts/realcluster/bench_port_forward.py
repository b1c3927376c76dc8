"""Port-forward on the real cluster, side by side (issue 36): kuber-exec's ``PortForward`` (the
tunnel where the server has it, and the legacy channels), ``kubectl port-forward``, kr8s's
``PortForward`` and a kubernetes_asyncio forward (its ``connect_get_namespaced_pod_portforward``
WebSocket per connection, bridged to a local listener as its users must), on one Deployment.

Run inside the cluster's network namespace with the cluster up (``make realcluster`` first):

    nsenter --net=/run/netns/kuber-rc .venv/bin/python scripts/realcluster/bench_port_forward.py

Each client is a process of its own (the peers from their own venv, ``peers-venv.sh``) serving a
local listener; this driver measures through that listener with plain sockets:

- **throughput**: one stream of ``--mib`` MiB from the pod's side (a listener that writes that
  much and closes), read to its end through one connection;
- **connections**: ``--sequential`` short connections one after the other, then ``--concurrent``
  at once (connect, 1 byte each way, close): failures, and p50/p99 of the time to the echo;
- **memory per open connection**: the client process's RSS grown over ``--idle`` open idle
  connections (each echoed once, so it is really open end to end), divided by their number;
- **failover**: the time from deleting the pod a client forwards to until a connection succeeds
  through another pod (``--failovers`` deletions, p50/p95), for the clients that can tell which
  pod they use and follow a Deployment; the others say why not.

The pods run with ``hostNetwork: true``: their ports are this namespace's, so the pod's servers
(echo and firehose) are a process of this driver's. Ratios are kuber-exec's over the other's.
Writes ``benchmarks/results/port_forward_realcluster_1_<minor>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import forward_sockets  # noqa: E402  (benchmarks/: the sandbox bench's measurements too)
from forward_sockets import one_connection  # noqa: E402

DEPLOYMENT = "pf-bench"
PROJECT = "kx-target"
WS_MAIN = "ws-main-0001"  # tests/realcluster/kube.py: the tier's workspace


# -- the pod's side: echo and firehose, in a process of their own ---------------------------------


def pod_servers(size: int) -> int:
    from forward_sockets import echo, firehose, serve  # benchmarks/: the sandbox bench's too

    print(json.dumps({"echo": serve(echo), "firehose": serve(firehose(size))}), flush=True)
    sys.stdin.read()
    return 0


# -- the clients: each serves a local listener, prints {"port": N}, answers "target" lines ---------


def client_main(kind: str, remote: int, kubeconfig: str, namespace: str, pod: str) -> int:
    if kind.startswith("kuber-"):
        _, transport, runtime = kind.split("-")
        return _kuber_client(transport, runtime, remote, kubeconfig)
    if kind == "kr8s":
        import asyncio

        return asyncio.run(_kr8s_client(remote, kubeconfig, namespace, pod))
    if kind == "kubernetes-asyncio":
        import asyncio

        return asyncio.run(_kubernetes_asyncio_client(remote, kubeconfig, namespace, pod))
    raise SystemExit(f"unknown client {kind}")


def _kuber_client(transport: str, runtime: str, remote: int, kubeconfig: str) -> int:
    import anyio

    if runtime == "trio":
        import kuber_exec_trio as adapter
    else:
        import kuber_exec_asyncio as adapter  # type: ignore[no-redef]

    async def run() -> None:
        async with (
            adapter.KubernetesBackend.from_kubeconfig(kubeconfig, None) as backend,
            adapter.PortForward(
                adapter.ExecService(backend),
                adapter.Workspace(project=PROJECT, uid=WS_MAIN),
                DEPLOYMENT,
                transport=transport,
            ) as forward,
            forward.listen([(0, remote)]) as bound,
        ):
            print(json.dumps({"port": bound[0].local_port}), flush=True)
            while line := await anyio.to_thread.run_sync(sys.stdin.readline):
                if line.strip() == "target":
                    target = forward.target
                    print(json.dumps({"target": target.pod if target else None}), flush=True)

    anyio.run(run, backend=runtime)
    return 0


async def _kr8s_client(remote: int, kubeconfig: str, namespace: str, pod: str) -> int:
    import asyncio

    import kr8s.asyncio
    from kr8s.asyncio.objects import Deployment, Pod
    from kr8s.asyncio.portforward import PortForward

    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    deployment = await Deployment.get(DEPLOYMENT, namespace=namespace, api=api)
    note = None
    try:
        # A resource with ready_pods (a Service): kr8s picks one at random per connection
        # attempt and keeps it until a WebSocket to it fails.
        forward = PortForward(deployment, remote, local_port="auto")
    except ValueError as error:
        note = f"kr8s cannot forward to a Deployment ({error}): to its first ready pod"
        forward = PortForward(await Pod.get(pod, namespace=namespace, api=api), remote, "auto")
    async with forward as port:
        print(json.dumps({"port": port, "note": note}), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip() == "target":
                pod = forward.pod
                print(json.dumps({"target": pod.name if pod else None}), flush=True)
    return 0


async def _kubernetes_asyncio_client(remote: int, kubeconfig: str, namespace: str, pod: str) -> int:
    """kubernetes_asyncio has the legacy WebSocket (one per connection) and no listener: this is
    the bridge its users write, to one pod by name."""
    import asyncio

    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    await config.load_kube_config(config_file=kubeconfig)
    api_client = WsApiClient()
    api = client.CoreV1Api(api_client)

    async def bridge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # Without preloading, the call gives aiohttp's ws_connect context manager.
            connecting = await api.connect_get_namespaced_pod_portforward(
                pod, namespace, ports=str(remote), _preload_content=False
            )
            async with connecting as ws:
                seen = {0: False, 1: False}

                async def up() -> None:
                    while data := await reader.read(1 << 20):
                        await ws.send_bytes(b"\x00" + data)

                async def down() -> None:
                    async for message in ws:
                        payload = message.data
                        if not isinstance(payload, bytes) or not payload:
                            continue
                        channel, data = payload[0], payload[1:]
                        if channel in seen and not seen[channel]:
                            seen[channel] = True
                            data = data[2:]  # the port, first on each channel
                        if channel == 0 and data:
                            writer.write(data)
                            await writer.drain()
                        elif channel == 1 and data:
                            return

                tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    task.cancel()
        finally:
            writer.close()

    server = await asyncio.start_server(bridge, "127.0.0.1", 0)
    async with server:
        print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip() == "target":
                print(json.dumps({"target": pod}), flush=True)
    await api_client.close()
    return 0


class Client:
    """A client process serving a local listener to ``remote``."""

    def __init__(self, argv: list[str], *, kubectl: bool = False) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        self.note: str | None = None
        if kubectl:  # "Forwarding from 127.0.0.1:N -> P"
            if "127.0.0.1:" not in line:
                raise RuntimeError(f"kubectl said {line!r}: {self._stderr()}")
            self.port = int(line.split("127.0.0.1:")[1].split(" ")[0])
            # It says "Handling connection for N" per connection: a full pipe would stop it.
            threading.Thread(target=self.process.stdout.read, daemon=True).start()
        else:
            if not line:
                raise RuntimeError(self._stderr())
            said = json.loads(line)
            self.port = int(said["port"])
            self.note = said.get("note")
        self.kubectl = kubectl
        self.errors: list[str] = []
        # Warnings (a failed connection's log line) must not fill a pipe either.
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if len(self.errors) < 20:
                self.errors.append(line.rstrip()[-300:])

    def _stderr(self) -> str:
        self.process.kill()
        assert self.process.stderr is not None
        return str(self.process.stderr.read())[-1500:]

    def target(self) -> str | None:
        if self.kubectl:
            return None
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("target\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["target"]  # type: ignore[no-any-return]

    def rss(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- measurements --------------------------------------------------------------------------------


def throughput(port: int, size: int) -> float:
    return forward_sockets.throughput(port, size, timeout=120)


def connections(port: int, sequential: int, concurrent: int) -> dict[str, Any]:
    return forward_sockets.connections(port, sequential, concurrent, concurrent_timeout=60)


def memory_per_connection(client: Client, count: int) -> float:
    """RSS bytes the client grew by per open idle connection (each echoed once)."""
    one_connection(client.port)  # whatever is made once (a tunnel) is not per connection
    time.sleep(0.5)
    before = client.rss()
    sockets = []
    try:
        for _ in range(count):
            conn = socket.create_connection(("127.0.0.1", client.port), timeout=30)
            conn.sendall(b"x")
            if conn.recv(1) != b"x":
                raise OSError("no echo")
            sockets.append(conn)
        time.sleep(0.5)
        after = client.rss()
    finally:
        for conn in sockets:
            conn.close()
    return (after - before) / count


def failover(client: Client, cluster: Any, kube: Any, trials: int) -> dict[str, Any]:
    """Seconds from deleting the client's pod to a connection that succeeds through another."""
    seconds: list[float] = []
    for _ in range(trials):
        _wait_ready(cluster, kube)
        one_connection(client.port)
        doomed = client.target()
        if doomed is None:
            return {"supported": False}
        started = time.perf_counter()
        kube.kubectl(cluster, "delete", "pod", doomed, "-n", cluster.main_ns, "--wait=false")
        while time.perf_counter() - started < 120:
            try:
                one_connection(client.port, timeout=10)
            except OSError:
                continue
            if client.target() not in (doomed, None):
                seconds.append(time.perf_counter() - started)
                break
        else:
            return {"supported": True, "failed": f"still on {doomed} after 120 s"}
    cuts = statistics.quantiles(seconds, n=20) if len(seconds) > 1 else seconds * 19
    return {
        "supported": True,
        "trials": len(seconds),
        "p50_ms": statistics.median(seconds) * 1000,
        "p95_ms": cuts[18] * 1000,
    }


def _wait_ready(cluster: Any, kube: Any) -> None:
    kube.kubectl(cluster, "rollout", "status", f"deployment/{DEPLOYMENT}", "-n",
                 cluster.main_ns, "--timeout=120s", timeout=130)  # fmt: skip

    def two_ready() -> bool:
        pods = kube.pods_of(cluster, cluster.main_ns, f"app={DEPLOYMENT}")
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return sum(kube.is_ready(p) for p in live) >= 2 and len(live) == len(pods)

    kube.poll(two_ready, timeout=120, what="two ready pods and none terminating")


# -- the run -------------------------------------------------------------------------------------


def _peers_python() -> str | None:
    done = subprocess.run(
        ["sh", str(REPO / "scripts" / "realcluster" / "peers-venv.sh")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--sequential", type=int, default=10_000)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--clients", default="")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--client", nargs=5, metavar=("KIND", "PORT", "KUBECONFIG", "NS", "POD"))
    parser.add_argument("--pod-servers", type=int, metavar="SIZE")
    options = parser.parse_args()
    if options.pod_servers is not None:
        return pod_servers(options.pod_servers)
    if options.client:
        kind, port, kubeconfig, namespace, pod = options.client
        return client_main(kind, int(port), kubeconfig, namespace, pod)

    sys.path.insert(0, str(REPO / "tests"))
    from realcluster import kube

    cluster = kube.load_cluster()
    _, minor, version = kube.server_version(cluster)
    kube.make_workloads(cluster)
    manifest = kube.deployment(
        DEPLOYMENT, namespace=cluster.main_ns, image=cluster.image, workspace=WS_MAIN, replicas=2
    )
    kube.kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest).encode())
    _wait_ready(cluster, kube)
    size = options.mib << 20
    servers = subprocess.Popen(
        [sys.executable, __file__, "--pod-servers", str(size)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert servers.stdout is not None
    ports = json.loads(servers.stdout.readline())
    kubeconfig = cluster.kubeconfig("admin")
    ns = cluster.main_ns
    peers = _peers_python()
    tunnel = minor >= 31

    def pod_now() -> str:
        pods = kube.pods_of(cluster, ns, f"app={DEPLOYMENT}")
        return sorted(p["metadata"]["name"] for p in pods if kube.is_ready(p))[0]

    def ours(kind: str) -> Callable[[int], Client]:
        return lambda remote: Client(
            [sys.executable, __file__, "--client", kind, str(remote), kubeconfig, ns, "-"]
        )

    def peer(kind: str) -> Callable[[int], Client]:
        assert peers is not None
        return lambda remote: Client(
            [peers, __file__, "--client", kind, str(remote), kubeconfig, ns, pod_now()]
        )

    def kubectl(remote: int) -> Client:
        return Client(
            [kube.KUBECTL, "--kubeconfig", kubeconfig, "-n", ns, "port-forward",
             f"deployment/{DEPLOYMENT}", f":{remote}"],
            kubectl=True,
        )  # fmt: skip

    clients: dict[str, Callable[[int], Client]] = {}
    if tunnel:
        clients["kuber-exec tunnel (asyncio)"] = ours("kuber-tunnel-asyncio")
        clients["kuber-exec tunnel (trio)"] = ours("kuber-tunnel-trio")
    clients["kuber-exec legacy (asyncio)"] = ours("kuber-legacy-asyncio")
    clients["kuber-exec legacy (trio)"] = ours("kuber-legacy-trio")
    clients["kubectl port-forward"] = kubectl
    notes: list[str] = []
    if peers is not None:
        clients["kr8s"] = peer("kr8s")
        clients["kubernetes_asyncio"] = peer("kubernetes-asyncio")
    else:
        notes.append("the peers' venv could not be made: kr8s and kubernetes_asyncio not run")
    if options.clients:
        wanted = options.clients.split(",")
        clients = {k: v for k, v in clients.items() if any(w in k for w in wanted)}
    rows: dict[str, Any] = {}
    try:
        for name, make in clients.items():
            row: dict[str, Any] = {}
            rows[name] = row
            try:
                client = make(ports["firehose"])
                try:
                    row["throughput_mib_s"] = throughput(client.port, size)
                finally:
                    client.close()
                client = make(ports["echo"])
                if client.note:
                    notes.append(f"{name}: {client.note}")
                try:
                    row.update(connections(client.port, options.sequential, options.concurrent))
                    row["rss_per_connection_kib"] = (
                        memory_per_connection(client, options.idle) / 1024
                    )
                    if name.startswith("kuber-exec") or name == "kr8s":
                        row["failover"] = failover(client, cluster, kube, options.failovers)
                    elif name == "kubectl port-forward":
                        row["failover"] = {
                            "supported": False,
                            "why": "kubectl forwards to one "
                            "pod chosen at start and exits when it goes away",
                        }
                    else:
                        row["failover"] = {
                            "supported": False,
                            "why": "its WebSocket names one "
                            "pod: the bridge cannot follow a Deployment",
                        }
                finally:
                    client.close()
                    notes.extend(f"{name}: {line}" for line in client.errors[:5])
            except Exception as error:  # one client's failure is a row, not the end
                row["error"] = f"{type(error).__name__}: {str(error)[-500:]}"
            print(f"{name:30} {json.dumps(row)}", flush=True)
    finally:
        if servers.stdin is not None:
            servers.stdin.close()
        servers.terminate()
        servers.wait(timeout=10)
        kube.kubectl(cluster, "delete", "deployment", DEPLOYMENT, "-n", ns, "--wait=false")
    baseline = rows.get("kubectl port-forward", {})
    for row in rows.values():
        if baseline.get("throughput_mib_s") and row.get("throughput_mib_s"):
            row["throughput_vs_kubectl"] = row["throughput_mib_s"] / baseline["throughput_mib_s"]
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    result = {
        "kubernetes": version,
        "transport": "tunnel" if tunnel else "legacy",
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores",
        "options": {k: v for k, v in vars(options).items() if k in
                    ("mib", "sequential", "concurrent", "idle", "failovers")},
        "rows": rows,
        "notes": notes,
    }  # fmt: skip
    out = (
        options.out or REPO / "benchmarks" / "results" / f"port_forward_realcluster_1_{minor}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
