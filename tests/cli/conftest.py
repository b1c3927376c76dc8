"""Fixtures for the command-line tests: a sandbox cluster that a CLI subprocess can reach.

The sandbox runs in a background thread of the test process (``run_sandbox_in_thread``);
the CLI under test is a separate process that finds it through the kubeconfig it wrote.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    """The demo cluster, served on loopback, offering v5 (a 1.30+ API server)."""
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running


@pytest.fixture
def old_sandbox() -> Iterator[Sandbox]:
    """The demo cluster behaving as a pre-1.30 API server: exec negotiates v4, not v5."""
    with run_sandbox_in_thread(demo_cluster(), offer_v5=False) as running:
        yield running
