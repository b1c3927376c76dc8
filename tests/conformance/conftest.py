"""The conformance suite: every end-to-end behaviour, once, against both adapters.

Tests are written with anyio, which runs each test under trio and under asyncio; the
``adapter`` fixture (tests/conftest.py) hands the test the adapter of the running event loop
(``kuber_exec_trio`` or ``kuber_exec_asyncio``), whose public names and shapes are the same. The
sandbox API server runs on trio in a background thread, independent of the test's event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import pytest

from kuber_exec_sandbox import (
    Cluster,
    PodSpec,
    Sandbox,
    demo_cluster,
    run_sandbox_in_thread,
)
from support import backend_for

from .cluster import conformance_cluster


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(conformance_cluster()) as running:
        yield running


@pytest.fixture(scope="session")
def v4_sandbox() -> Iterator[Sandbox]:
    """A pre-1.30 cluster: no v5.channel.k8s.io."""
    with run_sandbox_in_thread(demo_cluster(), offer_v5=False) as running:
        yield running


@pytest.fixture
async def service(adapter: ModuleType, sandbox: Sandbox) -> AsyncIterator[Any]:
    async with backend_for(adapter, sandbox) as backend:
        yield adapter.ExecService(backend)


__all__ = ["Cluster", "PodSpec"]
