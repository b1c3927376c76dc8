"""The benchmark server (benchmarks/fast_server.py) in a process of its own, for its tests.

The benchmark scripts are not a package: their folder goes on ``sys.path``, as when they run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from .fast_server_support import BENCHMARKS, FastServer

sys.path.insert(0, str(BENCHMARKS))


@pytest.fixture(scope="module")
def fast_server() -> Iterator[FastServer]:
    """The server, stopped by closing its stdin (as the benchmarks stop it)."""
    process = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / "fast_server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        ready = json.loads(process.stdout.readline())
        yield FastServer(ready["url"], ready["pod"], ready["kubeconfig"])
    finally:
        process.stdin.close()
        assert process.wait(timeout=30) == 0
        process.stdout.close()
