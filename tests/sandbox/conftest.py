"""Fixtures for the sandbox API server's tests.

``sandbox`` is a running demo sandbox on the test's trio loop; ``kubectl`` the path of a kubectl
binary: when there is none the test is skipped locally and *fails* under ``CI=true``, so CI never
silently loses the real-client tests.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import AsyncIterator

import pytest
import trio

from kuber_exec_sandbox import Sandbox, demo_cluster, serve_sandbox


@pytest.fixture
async def sandbox(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Sandbox]:
    async with serve_sandbox(demo_cluster()) as running:
        yield running
        # Every session a test opened ends with its child reaped (never left to the shutdown).
        with trio.fail_after(10):
            await running.wait_processes_reaped()
    # The server's safety net logs a connection it failed to serve: that is always a bug.
    failures = [r for r in caplog.records if r.name.startswith("kuber_exec_sandbox")]
    assert not [r for r in failures if r.levelno >= logging.ERROR], caplog.text


@pytest.fixture
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is not on PATH, and CI=true requires the kubectl tests to run")
        pytest.skip("kubectl is not on PATH")
    return path
