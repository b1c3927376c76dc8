"""Benchmarks on the real cluster, like with like: the command line against kubectl (both whole
processes), the library against the Python peers (all in process), on the same pod.

Run inside the cluster's network namespace with the cluster up (``make realcluster`` first):

    nsenter --net=/run/netns/kuber-rc .venv/bin/python scripts/realcluster/bench.py

or ``make realcluster-bench``. Needs the tier's workloads (the ``shell`` Deployment of namespace
kx-target): it applies them if the tests have not.

Three tables, each a median of a few rounds, interleaved so that a noisy neighbour slows all
alike, each measurement in a fresh process:

- **the command line against kubectl** (``bench_cli.py``): start-up (``exec DEPLOYMENT --
  true``, both resolving the Deployment), ``--help``, ``exec -- head -c N > file`` and ``cp`` of
  a file (N bytes) and of a tree of small files, both ways. Whole processes, start-up included.
- **the library against the Python peers**, in process, at N bytes (100 MB by default, where a
  client's start-up decides nothing): kuber-exec ``execute`` and ``open_interactive`` on both
  runtimes (resolving the Deployment each time) and each peer's exec of ``head -c N /dev/zero``
  on the pod (``peers.py``, run in the peers' own venv, ``peers-venv.sh``; a peer that is not
  installed is reported, not measured).
- **latency of ``true``** in process: kuber-exec with the target cache warm and with REST
  resolution, with the supervised start and without; each peer on the pod, already known.

Ratios are kuber-exec's over the other's (> 1: kuber-exec faster). The figures go to
``benchmarks/results/realcluster_1_<minor>.json`` (``--out``), whose ``table`` docs/benchmarks.md
shows. Not a test: it prints figures and exits 0 unless a measurement could not run.
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


THROUGHPUT_KINDS = ("execute", "interactive")

#: The Python peers (scripts/realcluster/peers.py), in the order of the table.
PEERS = (
    "official", "official-aio", "kubernetes-asyncio", "kr8s", "kubex", "kubex-httpx",
    "kubex-run", "lightkube", "lightkube-async",
)  # fmt: skip

#: Peers that cannot stream the full size in reasonable time, and the size they are given:
#: the official sync client's update() joins frames with bytes += (quadratic: 20 MB at
#: 0.7 MB/s on 1.37, 100 MB not done in minutes). Its row says the size.
PEER_BYTES = {"official": 10 * MB}

#: What a measurement saw go wrong without failing (printed under the tables, and saved).
NOTES: list[str] = []


def measure_in_child(args: list[str]) -> float:
    """One kuber-exec measurement in a fresh interpreter (its own memory, no shared loop)."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"measurement {args} failed: {done.stderr[-2000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    NOTES.extend(answer.get("notes", []))
    return float(answer["value"])


def peers_python() -> str | None:
    """The peers' venv's python (made or reused by peers-venv.sh), or None when it cannot be
    made (no peers.py yet, or no registry): the peer rows then say so."""
    script = REPO / "scripts" / "realcluster" / "peers-venv.sh"
    if not script.exists():
        return None
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        NOTES.append(f"the peers' venv could not be made: {done.stderr.strip()[-300:]}")
        return None
    return done.stdout.strip().splitlines()[-1]


def measure_peer(
    python: str, peer: str, kind: str, size: int, pod: str, cluster: kube.Cluster, iterations: int
) -> tuple[float | None, str]:
    """(value, the peer's version) from peers.py in the peers' venv; None: not measurable."""
    done = subprocess.run(
        [python, str(REPO / "scripts" / "realcluster" / "peers.py"), "--peer", peer,
         "--kind", kind, "--bytes", str(size), "--namespace", cluster.main_ns, "--pod", pod,
         "--kubeconfig", cluster.kubeconfig("admin"), "--iterations", str(iterations)],
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        NOTES.append(f"{peer} {kind}: failed: {done.stderr.strip()[-300:]}")
        return None, ""
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    NOTES.extend(f"{peer}: {note}" for note in answer.get("notes", []))
    value = answer.get("value")
    found = answer.get("versions") or {}
    version = " ".join(f"{name} {v}" for name, v in found.items() if v)
    return (float(value) if value is not None else None), version


def throughput_table(
    ours: dict[tuple[str, str], float],
    peers_measured: dict[tuple[str, str], float | None],
    peers: tuple[str, ...],
    size: int,
) -> tuple[list[str], list[dict[str, Any]]]:
    """The throughput table's lines and rows: kuber-exec's four (``ours``: bytes/s by
    (runtime, kind)), then each peer's own median (``peers_measured``: bytes/s by (peer,
    "throughput"), ``None`` when it could not run) with the best of ours over it."""
    best_ours = max(ours[(r, k)] for r in ("trio", "asyncio") for k in THROUGHPUT_KINDS)
    lines = [f"{'library, in process: head -c ' + str(size // MB) + ' MB':52} {'MB/s':>8} "
             f"{'best ours/this':>15}"]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for runtime in ("trio", "asyncio"):
        for kind in THROUGHPUT_KINDS:
            rate = ours[(runtime, kind)]
            label = f"kuber-exec {runtime} {kind} (Deployment resolved)"
            lines.append(f"{label:52} {rate / MB:8.1f}")
            rows.append({"client": label, "mb_s": rate / MB})
    for peer in peers:
        peer_rate = peers_measured.get((peer, "throughput"))
        smaller = PEER_BYTES.get(peer, size) < size
        label = f"{peer} (pod known{f', {PEER_BYTES[peer] // MB} MB' if smaller else ''})"
        if peer_rate is None:
            lines.append(f"{label:52} {'-':>8} {'-':>15}")
            rows.append({"client": label, "mb_s": None})
            continue
        lines.append(f"{label:52} {peer_rate / MB:8.1f} {best_ours / peer_rate:9.2f}x")
        rows.append(
            {"client": label, "mb_s": peer_rate / MB, "best_ours_over_this": best_ours / peer_rate}
        )
    return lines, rows


def _commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bytes", type=int, default=100 * MB, help="throughput output size")
    parser.add_argument("--out", type=Path, help="JSON results (default: benchmarks/results/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20, help="latency samples")
    parser.add_argument("--tree-files", type=int, default=10_000)
    parser.add_argument("--no-cli", action="store_true", help="skip the command-line table")
    parser.add_argument("--no-peers", action="store_true", help="skip the peers' rows")
    parser.add_argument("--one", nargs=3, metavar=("CLIENT", "KIND", "SIZE"))
    args = parser.parse_args()
    reason = kube.cluster_unavailable_reason()
    if reason:
        print(f"real-cluster benchmark: cluster unavailable: {reason}", file=sys.stderr)
        return 2
    cluster = kube.load_cluster()
    kube.make_workloads(cluster)
    if args.one:
        client_name, kind, size_text = args.one
        value = run_kuber(
            client_name, cluster.kubeconfig("admin"), kind, int(size_text), args.iterations
        )
        print(json.dumps({"value": value, "notes": NOTES}))
        return 0

    import bench_cli  # (this directory: the command-line table)

    pods = kube.pods_of(cluster, cluster.main_ns, "app=shell,tier=exec,!role")
    pod = next(p["metadata"]["name"] for p in pods if kube.is_ready(p))
    python = None if args.no_peers else peers_python()
    peers = PEERS if python else ()
    ours_plan = [
        *[
            (runtime, kind)
            for runtime in ("trio", "asyncio")
            for kind in ("execute", "interactive")
        ],
        *[(runtime, kind) for runtime in ("trio", "asyncio") for kind in LATENCY_KINDS],
    ]
    ours: dict[tuple[str, str], list[float]] = {}
    theirs: dict[tuple[str, str], list[float | None]] = {}
    versions: dict[str, str] = {}
    for _ in range(args.rounds):
        for client_name, kind in ours_plan:
            size = args.bytes if kind in ("execute", "interactive") else 0
            value = measure_in_child([client_name, kind, str(size)])
            ours.setdefault((client_name, kind), []).append(value)
        for peer in peers:
            peer_bytes = min(args.bytes, PEER_BYTES.get(peer, args.bytes))
            for kind, size in (("throughput", peer_bytes), ("latency", 0)):
                assert python is not None
                peer_value, version = measure_peer(
                    python, peer, kind, size, pod, cluster, args.iterations
                )
                theirs.setdefault((peer, kind), []).append(peer_value)
                versions[peer] = version or versions.get(peer, "")
    cli_rows: list[dict[str, Any]] = []
    if not args.no_cli:
        cli_rows = bench_cli.measure(
            cluster, rounds=args.rounds, size=args.bytes, tree_files=args.tree_files,
            cli_src=None, start_up_samples=5,
        )  # fmt: skip
    med = {key: statistics.median(v) for key, v in ours.items()}
    peer_med = {key: _median(v) for key, v in theirs.items()}
    _, minor, git_version = kube.server_version(cluster)
    table: list[str] = []

    def say(line: str) -> None:
        print(line)
        table.append(line)

    load = os.getloadavg()[0]
    say(
        f"kuber-exec on a real cluster, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit {_commit()}; load average {load:.1f} at the end"
    )
    say(f"Kubernetes {git_version}, pod {pod}, medians of {args.rounds} rounds")
    if cli_rows:
        say("")
        table.extend(bench_cli.render(cli_rows))
        for line in bench_cli.render(cli_rows):
            print(line)
        say("(ratio: kubectl's time over kuber-exec's; > 1: kuber-exec faster)")
    # The library against the peers: throughput.
    lines, throughput = throughput_table(med, peer_med, peers, args.bytes)
    say("")
    for line in lines:
        say(line)
    if not peers:
        say("(peers not measured: " + ("--no-peers" if args.no_peers else "no peers venv") + ")")
    # Latency.
    latency: list[dict[str, Any]] = []
    names = {
        "latency-cache": "cache warm, supervised",
        "latency-cache-bare": "cache warm, no supervision",
        "latency-rest": "REST resolution, supervised",
        "latency-rest-bare": "REST resolution, no supervision",
    }
    say("")
    say(f"{'latency of true, in process':52} {'ms':>8}")
    for client_name in ("trio", "asyncio"):
        for kind, name in names.items():
            ms = med[(client_name, kind)] * 1000
            label = f"kuber-exec {client_name} ({name})"
            say(f"{label:52} {ms:8.1f}")
            latency.append({"client": label, "ms": ms})
    for peer in peers:
        seconds = peer_med.get((peer, "latency"))
        label = f"{peer} (pod known)"
        say(f"{label:52} {seconds * 1000:8.1f}" if seconds is not None else f"{label:52} {'-':>8}")
        latency.append({"client": label, "ms": seconds * 1000 if seconds is not None else None})
    if versions:
        say("")
        say("peers: " + "; ".join(f"{peer}: {v}" for peer, v in versions.items() if v))
    NOTES.extend(bench_cli.failure_notes(cli_rows))
    for note in dict.fromkeys(NOTES):
        say(f"note: {note}")
    # (The name fits the docs' results-table marker: letters, digits and underscores.)
    out = args.out or REPO / "benchmarks" / "results" / f"realcluster_1_{minor}.json"
    out.write_text(
        json.dumps(
            {
                "server": git_version,
                "rounds": args.rounds,
                "bytes": args.bytes,
                "latency_iterations": args.iterations,
                "command_line": cli_rows,
                "throughput": throughput,
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
