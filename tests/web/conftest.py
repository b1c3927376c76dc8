"""tests/web: the service's audit events and limits (both runtimes) and the browser terminal.

The sandbox runs the demo cluster (namespace ``demo``: Deployment ``web`` of workspace
``demo-uid``, Deployment ``other`` of ``other-uid``) on trio in a background thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import pytest

from kuber_exec_anyio import ExecRequest, Workspace
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread

DEMO = Workspace(project="demo", uid="demo-uid")


def run(*command: str, deployment: str = "web") -> ExecRequest:
    """A request of the demo workspace."""
    return ExecRequest(workspace=DEMO, deployment=deployment, command=list(command))


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running


@asynccontextmanager
async def service_for(adapter: ModuleType, sandbox: Sandbox, **options: Any) -> AsyncIterator[Any]:
    """The adapter's ``ExecService`` on ``sandbox``, with ``options`` (audit, session_limits)."""
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        yield adapter.ExecService(backend, **options)
