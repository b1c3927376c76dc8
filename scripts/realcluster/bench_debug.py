"""Benchmark on the real 1.37 cluster: time to a prompt in a debug container, kuber-exec next to
``kubectl debug -it``.

Run inside the cluster's network namespace with the cluster up (``make realcluster`` first) and
the shell-less Deployment of ``tests/realcluster/test_debug.py`` applied (it applies it too):

    nsenter --net=/run/netns/kuber-rc .venv/bin/python scripts/realcluster/bench_debug.py

- **Prompt**: from the call to the first answer of a shell in a new debug container of the
  shell-less pod (``echo kx-$((6*7))`` typed at once, ``kx-42`` read back): kuber-exec
  ``open_debug`` (trio, in-process: the PATCH, the watch, the attach) against ``kubectl debug -it
  --image ... --target app`` in a pseudo-terminal (a process each time: its start-up counts).
  p50 over ``--rounds`` (10), interleaved. Each round adds a container to the pod (they cannot be
  removed).

(``logs -f`` throughput against ``kubectl logs -f`` is not measured yet: the kubelet rotates a
container's log at 10 MiB, so 100 MB needs a producer per round; see the issue.)

Prints a JSON object (also written to ``--out``); not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from realcluster import kube  # noqa: E402
from realcluster.test_debug import NAME, manifest  # noqa: E402

MB = 1_000_000
#: When each state was seen, per library round (seconds from the call).
PHASES: list[dict[str, float]] = []


def kubectl_prompt(cluster: kube.Cluster, pod: str) -> float:
    """Seconds from starting ``kubectl debug -it`` to ``kx-42`` on its terminal."""
    argv = [
        kube.KUBECTL, "--kubeconfig", cluster.kubeconfig("admin"), "-n", cluster.main_ns,
        "debug", "-it", pod, f"--image={cluster.image}", "--image-pull-policy=Never",
        "--target=app", "--", "sh",
    ]  # fmt: skip
    started = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(argv[0], argv)
    seen = b""
    try:
        os.write(fd, b"echo kx-$((6*7))\n")
        deadline = started + 120
        while b"kx-42" not in seen.replace(b"kx-$((6*7))", b""):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"kubectl debug: no answer: {seen[-300:]!r}")
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                seen += os.read(fd, 65536)
        elapsed = time.perf_counter() - started
        os.write(fd, b"exit\n")
    finally:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(fd)
    return elapsed


def library_prompt(cluster: kube.Cluster) -> float:
    import trio

    import kuber_exec_trio as kx

    async def main() -> float:
        backend = kx.KubernetesBackend.from_kubeconfig(cluster.kubeconfig("admin"))
        async with backend:
            service = kx.ExecService(backend)
            request = kx.ContainerRequest(
                workspace=kx.Workspace(project=cluster.main_ns, uid=kube.WS_MAIN), deployment=NAME
            )
            spec = kx.DebugContainer(image=cluster.image, image_pull_policy="Never", command=["sh"])
            started = time.perf_counter()
            phases: dict[str, float] = {}

            def seen_status(status: Any) -> None:
                phases.setdefault(status.describe(), time.perf_counter() - started)

            async with kx.open_debug(service, request, spec, on_status=seen_status) as debugging:
                phases["attached"] = time.perf_counter() - started
                assert debugging.session is not None
                await debugging.session.send(kx.Stdin(b"echo kx-$((6*7))\n"))
                seen = b""
                async for frame in debugging.session:
                    if isinstance(frame, kx.Stdout):
                        seen += frame.data
                        if b"kx-42" in seen.replace(b"kx-$((6*7))", b""):
                            break
                elapsed = time.perf_counter() - started
                await debugging.session.send(kx.Stdin(b"exit\n"))
            PHASES.append(phases)
            return elapsed

    return trio.run(main)


LOG_BYTES = 100 * MB
BURST = "logburst"


def burst_manifest(cluster: kube.Cluster) -> dict[str, Any]:
    """A Deployment whose container writes ``LOG_BYTES`` of 100-byte lines at once, then sleeps
    (the cluster's kubelet keeps up to 512 MiB of a log in one file: no rotation)."""
    produce = (
        f"head -c {LOG_BYTES} /dev/zero | tr '\\0' x | fold -w 99; echo; echo kx-end; "
        "exec sleep 2147483647"
    )
    workload = manifest(cluster)
    workload["metadata"]["name"] = BURST
    workload["metadata"]["labels"]["app"] = BURST
    workload["spec"]["selector"]["matchLabels"]["app"] = BURST
    workload["spec"]["template"]["metadata"]["labels"]["app"] = BURST
    workload["spec"]["template"]["spec"]["containers"] = [
        kube.container("app", ["sh", "-c", produce], cluster.image)
    ]
    return workload


def burst_written(cluster: kube.Cluster) -> str:
    """The burst pod, once its container has written everything (``kx-end`` is its last line)."""
    kube.kubectl(cluster, "apply", "-f", "-", input=json.dumps(burst_manifest(cluster)).encode())

    def pod() -> str | None:
        for item in kube.pods_of(cluster, cluster.main_ns, f"app={BURST}"):
            if kube.is_ready(item) and not item["metadata"].get("deletionTimestamp"):
                return str(item["metadata"]["name"])
        return None

    kube.poll(lambda: pod() is not None, timeout=120, what="the log burst pod")
    name = pod()
    assert name is not None

    def ended() -> bool:
        tail = kube.kubectl(cluster, "-n", cluster.main_ns, "logs", "--tail=1", name)
        return tail.stdout.strip() == b"kx-end"

    kube.poll(ended, timeout=300, what="the log burst", interval=1.0)
    return name


def kubectl_logs_follow(cluster: kube.Cluster, pod: str) -> float:
    """Seconds for ``kubectl logs -f`` to deliver ``LOG_BYTES`` of the written log."""
    argv = [
        kube.KUBECTL, "--kubeconfig", cluster.kubeconfig("admin"), "-n", cluster.main_ns,
        "logs", "-f", pod,
    ]  # fmt: skip
    started = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as process:
        assert process.stdout is not None
        received = 0
        while received < LOG_BYTES:
            chunk = os.read(process.stdout.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError(f"kubectl logs -f ended after {received} bytes")
            received += len(chunk)
        elapsed = time.perf_counter() - started
        process.kill()
    return elapsed


def library_logs_follow(cluster: kube.Cluster) -> float:
    """Seconds for ``stream_logs(follow=True)`` (trio) to deliver ``LOG_BYTES``."""
    import trio

    import kuber_exec_trio as kx

    async def main() -> float:
        backend = kx.KubernetesBackend.from_kubeconfig(cluster.kubeconfig("admin"))
        async with backend:
            service = kx.ExecService(backend)
            request = kx.ContainerRequest(
                workspace=kx.Workspace(project=cluster.main_ns, uid=kube.WS_MAIN),
                deployment=BURST,
            )
            started = time.perf_counter()
            received = 0
            async with kx.stream_logs(service, request, kx.LogOptions(follow=True)) as log:
                async for chunk in log:
                    received += len(chunk)
                    if received >= LOG_BYTES:
                        break
            return time.perf_counter() - started

    return trio.run(main)


def shellless_pod(cluster: kube.Cluster) -> str:
    kube.kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest(cluster)).encode())

    def ready() -> bool:
        return any(
            kube.is_ready(p) and not p["metadata"].get("deletionTimestamp")
            for p in kube.pods_of(cluster, cluster.main_ns, f"app={NAME}")
        )

    kube.poll(ready, timeout=120, what="the shell-less pod")
    pods = [
        p for p in kube.pods_of(cluster, cluster.main_ns, f"app={NAME}")
        if kube.is_ready(p) and not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
    return str(pods[0]["metadata"]["name"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--log-rounds", type=int, default=3)
    args = parser.parse_args()
    cluster = kube.load_cluster()
    pod = shellless_pod(cluster)
    ours: list[float] = []
    theirs: list[float] = []
    for round_ in range(args.rounds):
        # Alternating who goes first: the kubelet's work for one must not favour the other.
        if round_ % 2:
            theirs.append(kubectl_prompt(cluster, pod))
            ours.append(library_prompt(cluster))
        else:
            ours.append(library_prompt(cluster))
            theirs.append(kubectl_prompt(cluster, pod))
    result: dict[str, Any] = {
        "server": kube.server_version(cluster)[2],
        "prompt_seconds": {
            "kuber_exec_trio_p50": statistics.median(ours),
            "kubectl_debug_it_p50": statistics.median(theirs),
            "ratio_kubectl_over_kuber_exec": statistics.median(theirs) / statistics.median(ours),
            "rounds": args.rounds,
            "kuber_exec_trio": ours,
            "kubectl_debug_it": theirs,
            "kuber_exec_phases": PHASES,
        },
    }
    first = result["prompt_seconds"]
    # The kubelet starts a container about a second later when another one of the pod has
    # just ended: the round's first client has the edge, so the p50 of each when first counts.
    first["kuber_exec_trio_first_p50"] = statistics.median(ours[0::2])
    first["kubectl_debug_it_first_p50"] = statistics.median(theirs[1::2])
    burst = burst_written(cluster)
    rates: dict[str, list[float]] = {"kuber_exec_trio": [], "kubectl_logs_f": []}
    for round_ in range(args.log_rounds):
        order = ["kuber_exec_trio", "kubectl_logs_f"]
        for name in order if round_ % 2 == 0 else order[::-1]:
            seconds = (
                library_logs_follow(cluster)
                if name == "kuber_exec_trio"
                else kubectl_logs_follow(cluster, burst)
            )
            rates[name].append(LOG_BYTES / MB / seconds)
    result["logs_follow_mb_per_s"] = {
        "bytes": LOG_BYTES,
        "note": "a follow from the start of a log already written (one file, no rotation)",
        "kuber_exec_trio_p50": statistics.median(rates["kuber_exec_trio"]),
        "kubectl_logs_f_p50": statistics.median(rates["kubectl_logs_f"]),
        **rates,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
