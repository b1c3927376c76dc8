"""One exec-service replica with Lease slots, as its own process (the platform tests run three).

``python slot_replica.py ADAPTER KUBECONFIG burst COUNT MARKER`` runs ``COUNT`` sessions at once
in ``kx-target/shell`` (limit 2 per workspace, slots in ``kx-slots``), each retrying while the
workspace's slots are all held; each session appends ``+`` then ``-`` to ``MARKER`` in the pod,
so the pod's file shows how many ran at once. Prints ``{"ran": N, "refused": M}``.

``python slot_replica.py ADAPTER KUBECONFIG hold COUNT DURATION`` opens ``COUNT`` interactive
sessions with a ``DURATION``-second lease, prints ``held`` and waits to be killed.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sys

import anyio

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Workspace

WORKSPACE = Workspace(project="kx-target", uid="ws-main-0001")


async def burst(adapter, backend, count: int, marker: str) -> None:  # type: ignore[no-untyped-def]
    limits = adapter.SessionLimits(max_sessions_per_workspace=2)
    service = adapter.ExecService(backend, session_limits=limits)
    script = f"echo + >> {marker}; sleep 0.2; echo - >> {marker}"
    request = ExecRequest(workspace=WORKSPACE, deployment="shell", command=["sh", "-c", script])
    ran = refused = 0

    async def one() -> None:
        nonlocal ran, refused
        with anyio.fail_after(240):
            while True:
                try:
                    await service.execute(request)
                except ExecError as error:
                    if error.code is not ExecErrorCode.ABORTED:
                        raise
                    refused += 1
                    # The platform's own retry (a client backing off), not a test's wait.
                    await anyio.sleep(random.uniform(0.05, 0.3))
                    continue
                ran += 1
                return

    async with anyio.create_task_group() as tasks:
        for _ in range(count):
            tasks.start_soon(one)
    print(json.dumps({"ran": ran, "refused": refused}), flush=True)


async def hold(adapter, backend, count: int) -> None:  # type: ignore[no-untyped-def]
    limits = adapter.SessionLimits(max_sessions_per_workspace=2)
    service = adapter.ExecService(backend, session_limits=limits)
    request = ExecRequest(workspace=WORKSPACE, deployment="shell", command=["cat"])
    async with anyio.create_task_group() as tasks:
        opened = anyio.Event()
        held = 0

        async def session() -> None:
            nonlocal held
            async with service.open_interactive(request, tty=False):
                held += 1
                if held == count:
                    opened.set()
                await anyio.sleep_forever()

        for _ in range(count):
            tasks.start_soon(session)
        await opened.wait()
        print("held", flush=True)


async def main(adapter_name: str, kubeconfig: str, mode: str, count: int, extra: str) -> None:
    adapter = importlib.import_module(adapter_name)
    duration = int(extra) if mode == "hold" else 15
    slots = adapter.ClusterSlots("kx-slots", duration=duration, replica=f"{mode}-{os.getpid()}")
    backend = adapter.KubernetesBackend.from_kubeconfig(kubeconfig, cluster_slots=slots)
    async with backend:
        if mode == "burst":
            await burst(adapter, backend, count, extra)
        else:
            await hold(adapter, backend, count)


if __name__ == "__main__":
    name, config, mode, count, extra = sys.argv[1:6]
    runtime = "trio" if "trio" in name else "asyncio"
    anyio.run(main, name, config, mode, int(count), extra, backend=runtime)
