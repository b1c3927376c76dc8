"""A replica to kill: holds one Lease slot in an interactive session until it is killed.

``python lease_replica.py ADAPTER URL NAMESPACE DURATION`` prints ``held <lease>`` once its
session is open (its slot taken), then waits forever, renewing; ``kill -9`` stops the renewals
without a release, as a crashed replica would.
"""

from __future__ import annotations

import importlib
import sys

import anyio

from kuber_exec_core import ExecRequest, Workspace


async def main(adapter_name: str, url: str, namespace: str, duration: int) -> None:
    adapter = importlib.import_module(adapter_name)
    slots = adapter.ClusterSlots(namespace, duration=duration, replica="doomed")
    backend = adapter.KubernetesBackend(adapter.ClusterConfig(url), cluster_slots=slots)
    request = ExecRequest(
        workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=["cat"]
    )
    limits = adapter.SessionLimits(max_sessions_per_workspace=1)
    async with backend:
        service = adapter.ExecService(backend, session_limits=limits)
        async with service.open_interactive(request, tty=False):
            print("held", flush=True)
            await anyio.sleep_forever()


if __name__ == "__main__":
    name, url, namespace, duration = sys.argv[1:5]
    anyio.run(
        main, name, url, namespace, int(duration), backend="trio" if "trio" in name else "asyncio"
    )
