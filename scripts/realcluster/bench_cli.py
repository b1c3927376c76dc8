"""The command line against kubectl on the real cluster: both whole processes, same pod.

Run inside the cluster's network namespace with the cluster up (``make realcluster``); called by
``bench.py`` (``make realcluster-bench``), or alone:

    nsenter --net=/run/netns/kuber-rc .venv/bin/python scripts/realcluster/bench_cli.py

Every row is a whole process as an operator types it, start-up included, interleaved round by
round with its kubectl counterpart so that a noisy neighbour slows both alike:

- ``start-up``: ``exec DEPLOYMENT -- true`` against ``kubectl exec deploy/NAME -- true`` (both
  resolve the Deployment to a pod); ``--help`` as its own row;
- ``exec stream``: ``exec -- head -c N /dev/zero > file`` (100 MB by default);
- ``exec -i stdin``: ``exec -i -- sh -c 'cat > FILE; stat ...' < file`` (the same N bytes;
  only where the server speaks v5, which closes the command's stdin);
- ``cp up`` / ``cp down``: one file of N bytes (kuber-exec verifies its checksum in the
  container; kubectl cp does not);
- ``cp tree up`` / ``cp tree down``: a tree of small files (10,000 of 1 KiB by default).

The local files (the sources and what comes down) are on a tmpfs where there is one
(:func:`scratch_root`): the rows compare the clients, not the state of this machine's disk.

``--cli-src DIR`` runs the command line of another checkout (``DIR/src`` first on the path,
with this venv's packages): the before/after of a change. The medians go to ``--out`` as JSON
(``rows``: what, ours, kubectl, ratio = kubectl time / ours, > 1: kuber-exec faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from realcluster import kube  # noqa: E402  (the tier's helpers: cluster.json, workloads)

MB = 1_000_000
DEPLOYMENT = "shell"


class Clients:
    """The two command lines, as argv prefixes, against the ``shell`` Deployment."""

    def __init__(self, cluster: kube.Cluster, pod: str, cli_src: Path | None) -> None:
        self.cluster, self.pod = cluster, pod
        self.env = dict(os.environ)
        # Measured as installed, bytecode cached: with PYTHONDONTWRITEBYTECODE (set in some
        # shells and CI images) a checkout compiles its modules on every start, which a user's
        # `pip install` (it compiles them once) never does. So: compile first, then measure.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        src = Path(__file__).resolve().parents[2] / "src" if cli_src is None else cli_src / "src"
        if cli_src is not None:
            self.env["PYTHONPATH"] = str(src)
        compiled = subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)],
                                  env=self.env, check=False, stdout=subprocess.DEVNULL)  # fmt: skip
        if compiled.returncode != 0:
            raise SystemExit(f"bench_cli: could not compile {src}")
        config = cluster.kubeconfig("admin")
        self.workspace = ["--kubeconfig", config, "--project", "kx-target",
                          "--workspace-uid", kube.WS_MAIN]  # fmt: skip
        self.ours = [sys.executable, "-m", "kuber_exec_cli"]
        self.kubectl = [kube.KUBECTL, "--kubeconfig", config, "-n", cluster.main_ns]

    def exec_ours(self, command: list[str]) -> list[str]:
        return [*self.ours, "exec", *self.workspace, DEPLOYMENT, "--", *command]

    def exec_kubectl(self, command: list[str]) -> list[str]:
        return [*self.kubectl, "exec", f"deploy/{DEPLOYMENT}", "-c", "main", "--", *command]

    def exec_kubectl_in_pod(self, command: list[str]) -> list[str]:
        # By name: the tier's `impostor` pod also matches the shell Deployment's selector, and
        # `kubectl exec deploy/shell` may pick it (it resolves by selector, not by owner).
        return [*self.kubectl, "exec", self.pod, "-c", "main", "--", *command]

    def cp_ours(self, source: str, destination: str) -> list[str]:
        return [*self.ours, "cp", *self.workspace, "--no-progress", source, destination]

    def cp_kubectl(self, source: str, destination: str) -> list[str]:
        return [*self.kubectl, "cp", "-c", "main", source, destination]


def timed(
    argv: list[str], env: dict[str, str], stdout: Any = subprocess.DEVNULL, stdin: Any = None
) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                          check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:6]}... exited {done.returncode}: {done.stderr[-1500:]!r}")
    return seconds


def make_tree(root: Path, files: int, size: int) -> None:
    payload = os.urandom(size)
    for index in range(files):
        directory = root / f"d{index // 100:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index:05d}.bin").write_bytes(payload[index % 7 :] + payload[: index % 7])


def plan(clients: Clients, work: Path, size: int, tree_files: int) -> dict[str, Any]:
    """Each row: (ours, kubectl) callables returning seconds, or None for kubectl."""
    big = work / "big.bin"
    with big.open("wb") as handle:
        handle.write(os.urandom(MB) * (size // MB))
    tree = work / "tree"
    make_tree(tree, tree_files, 1024)
    pod = f"{clients.cluster.main_ns}/{clients.pod}"
    remote = "/tmp/kx-bench"
    env = clients.env
    sink = work / "sink.bin"

    def to_file(argv: list[str]) -> Callable[[], float]:
        def run() -> float:
            with sink.open("wb") as out:
                seconds = timed(argv, env, stdout=out)
            if sink.stat().st_size != size:
                raise RuntimeError(f"{argv[:4]}...: {sink.stat().st_size} bytes, not {size}")
            return seconds

        return run

    def down_into(argv_of: Callable[[str], list[str]], name: str) -> Callable[[], float]:
        def run() -> float:
            target = work / name
            shutil.rmtree(target, ignore_errors=True)
            target.unlink(missing_ok=True) if target.is_file() else None
            return timed(argv_of(str(target)), env)

        return run

    def cleared(argv: list[str], path: str) -> Callable[[], float]:
        def run() -> float:
            subprocess.run(clients.exec_kubectl_in_pod(["rm", "-rf", path]), check=True, env=env,
                           capture_output=True)  # fmt: skip
            return timed(argv, env)

        return run

    def from_file(argv: list[str]) -> Callable[[], float]:
        # The file goes to the command's stdin; the command says how many bytes it wrote.
        def run() -> float:
            with big.open("rb") as stdin, sink.open("wb") as out:
                seconds = timed(argv, env, stdout=out, stdin=stdin)
            if sink.read_bytes().strip() != str(size).encode():
                raise RuntimeError(f"{argv[:4]}...: wrote {sink.read_bytes()[:40]!r}, not {size}")
            return seconds

        return run

    # Closing the command's stdin at the end of ours needs v5 (1.30+); kuber-exec's -i refuses
    # a v4 server up front, where kubectl (SPDY) can close it: no row to compare there.
    closes_stdin = kube.server_version(clients.cluster)[1] >= 30
    head = ["head", "-c", str(size), "/dev/zero"]
    # `; stat`: the shell keeps stdout open while cat reads (containerd cuts the stdin of a
    # command that closed its stdout, docs/protocol.md).
    into = ["sh", "-c", f"cat > {remote}-stdin.bin; stat -c %s {remote}-stdin.bin"]
    stdin_row = {
        f"exec -i stdin {size // MB} MB from a file": (
            from_file([*clients.ours, "exec", "-i", *clients.workspace, DEPLOYMENT, "--", *into]),
            from_file([*clients.kubectl, "exec", "-i", clients.pod, "-c", "main", "--", *into]),
        )
    }
    return {
        "start-up: exec -- true": (
            lambda: timed(clients.exec_ours(["true"]), env),
            lambda: timed(clients.exec_kubectl(["true"]), env),
        ),
        "--help": (lambda: timed([*clients.ours, "--help"], env), None),
        f"exec stream {size // MB} MB to a file": (
            to_file(clients.exec_ours(head)),
            to_file(clients.exec_kubectl(head)),
        ),
        **(stdin_row if closes_stdin else {}),
        f"cp {size // MB} MB up": (
            cleared(
                clients.cp_ours(str(big), f"{DEPLOYMENT}:{remote}-ours.bin"), f"{remote}-ours.bin"
            ),
            cleared(
                clients.cp_kubectl(str(big), f"{pod}:{remote}-kubectl.bin"), f"{remote}-kubectl.bin"
            ),
        ),
        f"cp {size // MB} MB down": (
            down_into(lambda t: clients.cp_ours(f"{DEPLOYMENT}:{remote}-ours.bin", t), "o.bin"),
            down_into(lambda t: clients.cp_kubectl(f"{pod}:{remote}-kubectl.bin", t), "k.bin"),
        ),
        f"cp tree of {tree_files:,} files up": (
            cleared(
                clients.cp_ours(str(tree), f"{DEPLOYMENT}:{remote}-tree-ours"),
                f"{remote}-tree-ours",
            ),
            cleared(
                clients.cp_kubectl(str(tree), f"{pod}:{remote}-tree-kubectl"),
                f"{remote}-tree-kubectl",
            ),
        ),
        f"cp tree of {tree_files:,} files down": (
            down_into(lambda t: clients.cp_ours(f"{DEPLOYMENT}:{remote}-tree-ours", t), "ot"),
            down_into(lambda t: clients.cp_kubectl(f"{pod}:{remote}-tree-kubectl", t), "kt"),
        ),
    }


def measure(
    cluster: kube.Cluster, *, rounds: int, size: int, tree_files: int, cli_src: Path | None,
    start_up_samples: int, only: str | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Interleaved rounds of every row; the medians, with kubectl's time over ours."""
    pods = kube.pods_of(cluster, cluster.main_ns, "app=shell,tier=exec,!role")
    pod = next(p["metadata"]["name"] for p in pods if kube.is_ready(p))
    clients = Clients(cluster, pod, cli_src)
    samples: dict[str, tuple[list[float], list[float]]] = {}
    failures: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="kx-bench-cli-", dir=scratch_root()) as scratch:
        rows = plan(clients, Path(scratch), size, tree_files)
        if only:
            rows = {k: v for k, v in rows.items() if only in k}
        for _ in range(rounds):
            for what, (ours, theirs) in rows.items():
                # The short rows take several samples a round: one process is a few 100 ms.
                repeat = start_up_samples if what.startswith(("start-up", "--help")) else 1
                for _ in range(repeat):
                    mine, other = samples.setdefault(what, ([], []))
                    mine.append(_sample(ours, what, "kuber-exec", failures))
                    if theirs is not None:
                        other.append(_sample(theirs, what, "kubectl", failures))
    table = []
    for what, (mine, other) in samples.items():
        ours_s = statistics.median(mine)
        kubectl_s = statistics.median(other) if other else None
        table.append({
            "what": what,
            "kuber_exec_s": ours_s,
            "kubectl_s": kubectl_s,
            "kubectl_over_ours": kubectl_s / ours_s if kubectl_s else None,
            "samples": len(mine),
            "failed_runs": {
                client: failed for (row, client), failed in failures.items() if row == what
            },
        })  # fmt: skip
    return table


def scratch_root() -> str | None:
    """Where the local files of the rows go: a tmpfs (``/dev/shm``) where there is one.

    Both clients write the same files there, so the rows measure the clients and the server,
    not this machine's disk: its ext4 (mounted with ``discard``) took 0.08 s to create 10,000
    small files on a quiet moment and 0.8-3.4 s of system time after as many were deleted,
    which each row does first; at the slow end ``kubectl cp`` of a tree failed outright (the
    stream reset while it wrote), three times in a row, which stopped the bench.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


#: Runs of one sample, at most: a run that fails is noted and run again (a real cluster under
#: load cuts streams: docs/protocol.md), and a sample that never succeeds stops the bench.
ATTEMPTS = 3


def _sample(
    run: Callable[[], float], what: str, client: str, failures: dict[tuple[str, str], list[str]]
) -> float:
    for attempt in range(ATTEMPTS):
        try:
            return run()
        except RuntimeError as error:
            failures.setdefault((what, client), []).append(str(error)[-300:])
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def failure_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per client and row whose runs failed (then were run again)."""
    return [
        f"{client} {row['what']}: {len(failed)} failed run(s), run again; last: {failed[-1]}"
        for row in rows
        for client, failed in row.get("failed_runs", {}).items()
    ]


def render(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"{'command line (whole processes)':40} {'kuber-exec':>11} {'kubectl':>9} {'ratio':>7}"
    ]
    for row in rows:
        kubectl_s = row["kubectl_s"]
        theirs = f"{kubectl_s:8.3f}s" if kubectl_s is not None else f"{'-':>9}"
        ratio = f"{row['kubectl_over_ours']:6.2f}x" if kubectl_s is not None else f"{'-':>7}"
        lines.append(f"{row['what']:40} {row['kuber_exec_s']:10.3f}s {theirs} {ratio}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bytes", type=int, default=100 * MB)
    parser.add_argument("--tree-files", type=int, default=10_000)
    parser.add_argument("--start-up-samples", type=int, default=5)
    parser.add_argument("--cli-src", type=Path, help="another checkout's command line")
    parser.add_argument("--only", help="only the rows whose name contains this")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    reason = kube.cluster_unavailable_reason()
    if reason:
        print(f"cluster unavailable: {reason}", file=sys.stderr)
        return 2
    cluster = kube.load_cluster()
    kube.make_workloads(cluster)
    rows = measure(
        cluster, rounds=args.rounds, size=args.bytes, tree_files=args.tree_files,
        cli_src=args.cli_src, start_up_samples=args.start_up_samples, only=args.only,
    )  # fmt: skip
    for line in render(rows):
        print(line)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
