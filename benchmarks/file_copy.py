"""Copy throughput and memory: ``copy_to_pod`` / ``copy_from_pod`` beside ``kubectl cp``.

Not ``copy.py``: a script in this directory has it first on ``sys.path``, and a ``copy`` module
here would shadow the standard library's for every other benchmark script.

Against the sandbox (``sandbox_server.py``, its own process; its pods are local processes, so
both sides are this machine's disk and page cache). Each measurement runs in a fresh process:
ours reports its RSS after the imports and connection setup (the baseline) and its peak
(``VmHWM``); kubectl's peak is its ``ru_maxrss``. One run each, the ratios printed:

    python benchmarks/file_copy.py               # short: a 64 MB file, a tree of 2,000 files
    python benchmarks/file_copy.py --full        # the issue's: 200 MB, a tree of 10,000 files

kubectl is found on PATH (as ``run.py`` finds it); without it only our rows are printed.
Benchmarks are not tests: a missed target is reported, never a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MB = 1000 * 1000
MIB = 1024 * 1024


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def child(url: str, direction: str, source: str, destination: str) -> None:
    """One copy in this fresh process; prints seconds, baseline and peak RSS as JSON."""
    import trio

    import kuber_exec_trio as kuber

    async def main() -> dict[str, float]:
        config = kuber.ClusterConfig(url)
        async with kuber.KubernetesBackend(config) as backend:
            service = kuber.ExecService(backend)
            target = kuber.CopyTarget(kuber.Workspace(project="demo", uid="demo-uid"), "web")
            # Warm up the connection path (imports, TLS-free HTTP client) before the baseline.
            await service.execute(
                kuber.ExecRequest(workspace=target.workspace, deployment="web", command=["true"])
            )
            baseline = _rss_kib("VmRSS")
            started = time.perf_counter()
            if direction == "up":
                await kuber.copy_to_pod(service, target, source, destination)
            else:
                await kuber.copy_from_pod(service, target, source, destination)
            seconds = time.perf_counter() - started
        return {"seconds": seconds, "baseline_kib": baseline, "peak_kib": _rss_kib("VmHWM")}

    print(json.dumps(trio.run(main)))


def ours(url: str, direction: str, source: str, destination: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", url, direction, source, destination],
        capture_output=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def kubectl(kubeconfig: str, arguments: list[str]) -> dict[str, float]:
    started = time.perf_counter()
    process = subprocess.Popen(
        ["kubectl", "--kubeconfig", kubeconfig, "-n", "demo", "cp", *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if status != 0:
        said = process.stderr.read().decode() if process.stderr else ""
        raise RuntimeError(f"kubectl cp failed: {said}")
    if process.stderr is not None:
        process.stderr.close()
    return {"seconds": seconds, "peak_kib": usage.ru_maxrss}


def make_tree(root: Path, files: int) -> int:
    total = 0
    for index in range(files):
        directory = root / f"d{index // 100:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        data = os.urandom(200 + index % 1800)
        (directory / f"f{index:05d}.txt").write_bytes(data)
        total += len(data)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="200 MB and 10,000 files")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    size = (200 if args.full else 64) * MB
    files = 10_000 if args.full else 2_000
    have_kubectl = shutil.which("kubectl") is not None
    server = subprocess.Popen(
        [sys.executable, str(HERE / "sandbox_server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        url, kubeconfig, pod = ready["url"], ready["kubeconfig"], ready["pod"]
        with tempfile.TemporaryDirectory(prefix="copy-bench-") as scratch:
            work = Path(scratch)
            big = work / "big.bin"
            with open(big, "wb") as out:
                for _ in range(size // MB):
                    out.write(os.urandom(MB))
            tree = work / "tree"
            tree_bytes = make_tree(tree, files)
            rows: list[tuple[str, dict[str, float], dict[str, float] | None]] = []

            def fresh(name: str) -> Path:
                path = work / name
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir()
                return path

            remote = fresh("remote")
            rows.append(
                (
                    f"{size // MB} MB up",
                    ours(url, "up", str(big), str(remote / "big.bin")),
                    kubectl(kubeconfig, [str(big), f"{pod}:{work}/remote/k.bin"])
                    if have_kubectl
                    else None,
                )
            )
            down = fresh("down")
            rows.append(
                (
                    f"{size // MB} MB down",
                    ours(url, "down", str(remote / "big.bin"), str(down / "big.bin")),
                    kubectl(kubeconfig, [f"{pod}:{remote}/big.bin", str(down / "k.bin")])
                    if have_kubectl
                    else None,
                )
            )
            rows.append(
                (
                    f"{files} files up",
                    ours(url, "up", str(tree), str(remote / "tree")),
                    kubectl(kubeconfig, [str(tree), f"{pod}:{remote}/ktree"])
                    if have_kubectl
                    else None,
                )
            )
            rows.append(
                (
                    f"{files} files down",
                    ours(url, "down", str(remote / "tree"), str(down / "tree")),
                    kubectl(kubeconfig, [f"{pod}:{remote}/tree", str(down / "ktree")])
                    if have_kubectl
                    else None,
                )
            )
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)
    print(f"kubectl: {'found' if have_kubectl else 'not on PATH: our rows only'}")
    header = f"{'copy':<18}{'ours MB/s':>10}{'kubectl MB/s':>14}{'ratio':>8}"
    print(header + f"{'ours +MiB':>11}{'ours peak MiB':>15}{'kubectl peak MiB':>18}")
    for label, mine, theirs in rows:
        moved = size if "MB" in label else tree_bytes
        rate = moved / MB / mine["seconds"]
        growth = (mine["peak_kib"] - mine["baseline_kib"]) / 1024
        their_rate = None if theirs is None else moved / MB / theirs["seconds"]
        their_peak = "-" if theirs is None else f"{theirs['peak_kib'] / 1024:.1f}"
        print(
            f"{label:<18}{rate:>10.1f}"
            f"{'-' if their_rate is None else f'{their_rate:.1f}':>14}"
            f"{'-' if their_rate is None else f'{rate / their_rate:.2f}':>8}"
            f"{growth:>11.1f}{mine['peak_kib'] / 1024:>15.1f}"
            f"{their_peak:>18}"
        )
    print("target: ratio >= 1, ours +MiB <= 64 (peak RSS above the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
