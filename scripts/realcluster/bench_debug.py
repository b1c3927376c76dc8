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
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from realcluster import kube  # noqa: E402
from realcluster.test_debug import NAME, manifest  # noqa: E402

MB = 1_000_000


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
            async with kx.open_debug(service, request, spec) as debugging:
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
            return elapsed

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
    args = parser.parse_args()
    cluster = kube.load_cluster()
    pod = shellless_pod(cluster)
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(args.rounds):
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
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
