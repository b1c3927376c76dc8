"""Benchmarks on the real cluster: kuber-exec next to kubectl and the official client, same pod.

Run inside the cluster's network namespace with the cluster up (``make realcluster`` first):

    nsenter --net=/run/netns/kuber-rc .venv/bin/python scripts/realcluster/bench.py

or ``make -f mk/realcluster.mk realcluster-bench``. Needs the tier's workloads (the ``shell``
Deployment of namespace kx-target): it applies them if the tests have not.

Measured, each a median of a few rounds, interleaved so a noisy neighbour slows all alike:
- throughput of ``head -c N /dev/zero`` (stdout bytes per second, 50 MB by default): kuber-exec
  ``execute`` and ``open_interactive`` (trio and asyncio), ``kubectl exec`` (1.32: WebSocket v5
  on a current server, SPDY on 1.20), and the official ``kubernetes`` client's ``stream()``;
- latency of ``true``: kuber-exec ``execute`` with the target cache warm (``backend.watch``) and
  with REST resolution (GET Deployment, LIST pods, GET ReplicaSet) before the WebSocket, each
  with the supervised start (``cleanup=True``, the default) and without; ``kubectl exec`` on the
  pod (a process each time); the official client's ``stream()`` on the pod.
The library rows are in-process, like the official client; kubectl is a whole process (its
start-up is in its latency). Ratios are kuber-exec over the other client (> 1: kuber-exec
faster). The figures go to ``benchmarks/results/realcluster_1_<minor>.json`` (``--out``), whose
``table`` docs/benchmarks.md shows. Not a
test: it prints figures and exits 0 unless a measurement could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from realcluster import kube  # noqa: E402  (the tier's helpers: cluster.json, workloads)

MB = 1_000_000


def request(adapter: Any, command: list[str]) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=kube.WS_MAIN),
        deployment="shell",
        command=command,
        container=None,
    )


def head(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


#: Latency variants: (target cache warm, supervised start).
LATENCY_KINDS = {
    "latency-cache": (True, True),
    "latency-cache-bare": (True, False),
    "latency-rest": (False, True),
    "latency-rest-bare": (False, False),
}


async def kuber(adapter: Any, kubeconfig: str, kind: str, size: int, iterations: int) -> float:
    cap = max(size, 1 << 20)
    limits = adapter.ExecLimits(max_output_cap_bytes=cap, default_output_cap_bytes=cap)
    async with adapter.KubernetesBackend.from_kubeconfig(kubeconfig, None) as backend:
        if kind in LATENCY_KINDS:
            cached, supervised = LATENCY_KINDS[kind]
            service = adapter.ExecService(backend, limits, cleanup=supervised)
            if not cached:
                return await _latency(adapter, service, iterations)
            async with backend.watch(["kx-target"]) as cache:
                await cache.wait_synced()
                return await _latency(adapter, service, iterations)
        service = adapter.ExecService(backend, limits)
        await service.execute(request(adapter, ["true"]))  # one-time costs (pool, TLS)
        start = time.perf_counter()
        if kind == "execute":
            result = await service.execute(request(adapter, head(size)))
            received = len(result.stdout)
        else:
            received = 0
            async with service.open_interactive(request(adapter, head(size)), tty=False) as s:
                async for frame in s:
                    if isinstance(frame, adapter.Stdout):
                        received += len(frame.data)
        seconds = time.perf_counter() - start
        assert received == size, received
        return size / seconds


async def _latency(adapter: Any, service: Any, iterations: int) -> float:
    await service.execute(request(adapter, ["true"]))  # one-time costs (pool, TLS)
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        result = await service.execute(request(adapter, ["true"]))
        samples.append(time.perf_counter() - start)
        assert result.exit_code == 0
    return statistics.median(samples)


def run_kuber(runtime: str, kubeconfig: str, kind: str, size: int, iterations: int) -> float:
    if runtime == "trio":
        import trio

        import kuber_exec_trio

        return trio.run(kuber, kuber_exec_trio, kubeconfig, kind, size, iterations)
    import kuber_exec_asyncio

    return asyncio.run(kuber(kuber_exec_asyncio, kubeconfig, kind, size, iterations))


def kubectl_argv(cluster: kube.Cluster, pod: str, command: list[str]) -> list[str]:
    return [
        kube.KUBECTL, "--kubeconfig", cluster.kubeconfig("admin"),
        "exec", "-n", cluster.main_ns, pod, "-c", "main", "--", *command,
    ]  # fmt: skip


def run_kubectl(cluster: kube.Cluster, pod: str, kind: str, size: int, iterations: int) -> float:
    if kind == "latency":
        samples = []
        for _ in range(iterations):
            start = time.perf_counter()
            subprocess.run(kubectl_argv(cluster, pod, ["true"]), capture_output=True, check=True)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)
    start = time.perf_counter()
    with subprocess.Popen(
        kubectl_argv(cluster, pod, head(size)), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as child:
        assert child.stdout is not None
        received = 0
        while chunk := child.stdout.read(1 << 20):
            received += len(chunk)
    seconds = time.perf_counter() - start
    assert received == size, received
    return size / seconds


def run_official(cluster: kube.Cluster, pod: str, kind: str, size: int, iterations: int) -> float:
    from kubernetes import client, config
    from kubernetes.stream import stream

    configuration = client.Configuration()
    config.load_kube_config(
        config_file=cluster.kubeconfig("admin"), client_configuration=configuration
    )
    api = client.CoreV1Api(client.ApiClient(configuration))

    def once(command: list[str]) -> str:
        out: str = stream(
            api.connect_get_namespaced_pod_exec, pod, cluster.main_ns, command=command,
            container="main", stderr=True, stdin=False, stdout=True, tty=False,
            _preload_content=True,
        )  # fmt: skip
        return out

    once(["true"])
    if kind == "latency":
        samples = []
        for _ in range(iterations):
            start = time.perf_counter()
            once(["true"])
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)
    start = time.perf_counter()
    out = once(head(size))
    seconds = time.perf_counter() - start
    if len(out) != size:
        # Seen at 50 MB on 1.37: the official client returned short. Its rate counts what it
        # delivered, and the table says how much was missing.
        NOTES.append(f"official stream() returned {len(out):,} of {size:,} bytes")
    return len(out) / seconds


#: What a measurement saw go wrong without failing (printed under the table, and saved).
NOTES: list[str] = []


def measure_in_child(args: list[str]) -> float:
    """One measurement in a fresh interpreter (its own memory, no shared event loop)."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"measurement {args} failed: {done.stderr[-2000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    NOTES.extend(answer.get("notes", []))
    return float(answer["value"])


def _commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bytes", type=int, default=50 * MB, help="throughput output size")
    parser.add_argument("--official-bytes", type=int, default=50 * MB)
    parser.add_argument("--out", type=Path, help="JSON results (default: benchmarks/results/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20, help="latency samples")
    parser.add_argument("--one", nargs=3, metavar=("CLIENT", "KIND", "SIZE"))
    args = parser.parse_args()
    reason = kube.cluster_unavailable_reason()
    if reason:
        print(f"real-cluster benchmark: cluster unavailable: {reason}", file=sys.stderr)
        return 2
    cluster = kube.load_cluster()
    if args.one:
        client_name, kind, size_text = args.one
        size = int(size_text)
        pod = os.environ["KX_BENCH_POD"]
        if client_name in ("trio", "asyncio"):
            value = run_kuber(client_name, cluster.kubeconfig("admin"), kind, size, args.iterations)
        elif client_name == "kubectl":
            value = run_kubectl(cluster, pod, kind, size, args.iterations)
        else:
            value = run_official(cluster, pod, kind, size, args.iterations)
        print(json.dumps({"value": value, "notes": NOTES}))
        return 0

    kube.make_workloads(cluster)
    pods = kube.pods_of(cluster, cluster.main_ns, "app=shell,tier=exec,!role")
    pod = next(p["metadata"]["name"] for p in pods if kube.is_ready(p))
    os.environ["KX_BENCH_POD"] = pod
    plan = [
        ("trio", "execute", args.bytes),
        ("asyncio", "execute", args.bytes),
        ("trio", "interactive", args.bytes),
        ("asyncio", "interactive", args.bytes),
        ("kubectl", "throughput", args.bytes),
        ("official", "throughput", args.official_bytes),
        *[(runtime, kind, 0) for runtime in ("trio", "asyncio") for kind in LATENCY_KINDS],
        ("kubectl", "latency", 0),
        ("official", "latency", 0),
    ]
    values: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for client_name, kind, size in plan:
            value = measure_in_child([client_name, kind, str(size)])
            values.setdefault((client_name, kind), []).append(value)
    med = {key: statistics.median(v) for key, v in values.items()}
    _, minor, git_version = kube.server_version(cluster)
    kubectl_rate, official_rate = med[("kubectl", "throughput")], med[("official", "throughput")]
    rows: list[dict[str, Any]] = []
    table: list[str] = []

    def say(line: str) -> None:
        print(line)
        table.append(line)

    load = os.getloadavg()[0]
    say(
        f"kuber-exec on a real cluster, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit {_commit()}; load average {load:.1f} at the end"
    )
    say(
        f"Kubernetes {git_version}, pod {pod}, medians of {args.rounds} rounds; throughput of "
        f"head -c N /dev/zero ({args.bytes // MB} MB), latency of `true`"
    )
    say("")
    say(f"{'client':52} {'MB/s':>8} {'vs kubectl':>11} {'vs official':>12}")
    for client_name, kind in [("trio", "execute"), ("asyncio", "execute"),
                              ("trio", "interactive"), ("asyncio", "interactive")]:  # fmt: skip
        rate = med[(client_name, kind)]
        label = f"kuber-exec {client_name} {kind}"
        say(
            f"{label:52} {rate / MB:8.1f} {rate / kubectl_rate:10.2f}x "
            f"{rate / official_rate:11.2f}x"
        )
        rows.append({"client": label, "mb_s": rate / MB, "vs_kubectl": rate / kubectl_rate,
                     "vs_official": rate / official_rate})  # fmt: skip
    say(f"{'kubectl exec (a process)':52} {kubectl_rate / MB:8.1f}")
    official_label = f"official stream() ({args.official_bytes // MB} MB)"
    say(f"{official_label:52} {official_rate / MB:8.1f}")
    rows.append({"client": "kubectl exec", "mb_s": kubectl_rate / MB})
    rows.append({"client": official_label, "mb_s": official_rate / MB})
    kubectl_ms, official_ms = med[("kubectl", "latency")], med[("official", "latency")]
    say("")
    say(f"{'latency of true':52} {'ms':>8} {'kubectl/ours':>13} {'official/ours':>14}")
    latency: list[dict[str, Any]] = []
    names = {
        "latency-cache": "cache warm, supervised",
        "latency-cache-bare": "cache warm, no supervision",
        "latency-rest": "REST resolution, supervised",
        "latency-rest-bare": "REST resolution, no supervision",
    }
    for client_name in ("trio", "asyncio"):
        for kind, name in names.items():
            ours = med[(client_name, kind)]
            label = f"kuber-exec {client_name} ({name})"
            say(
                f"{label:52} {ours * 1000:8.1f} {kubectl_ms / ours:12.2f}x "
                f"{official_ms / ours:13.2f}x"
            )
            latency.append(
                {
                    "client": label,
                    "ms": ours * 1000,
                    "kubectl_over_ours": kubectl_ms / ours,
                    "official_over_ours": official_ms / ours,
                }
            )
    say(f"{'kubectl exec (a process)':52} {kubectl_ms * 1000:8.1f}")
    say(f"{'official stream() (pod known)':52} {official_ms * 1000:8.1f}")
    latency.append({"client": "kubectl exec (a process)", "ms": kubectl_ms * 1000})
    latency.append({"client": "official stream() (pod known)", "ms": official_ms * 1000})
    for note in dict.fromkeys(NOTES):
        say(f"note: {note}")
    # (The name fits the docs' results-table marker: letters and underscores.)
    out = args.out or REPO / "benchmarks" / "results" / f"realcluster_1_{minor}.json"
    out.write_text(
        json.dumps(
            {
                "server": git_version,
                "rounds": args.rounds,
                "bytes": args.bytes,
                "official_bytes": args.official_bytes,
                "latency_iterations": args.iterations,
                "throughput": rows,
                "latency": latency,
                "notes": list(dict.fromkeys(NOTES)),
                "table": table,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
