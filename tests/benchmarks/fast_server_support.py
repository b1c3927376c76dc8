"""Where the benchmark scripts are, and the address of a running benchmark server
(``benchmarks/fast_server.py``) as its fixture hands it to the tests."""

from __future__ import annotations

from pathlib import Path

import attrs

__all__ = ["BENCHMARKS", "FastServer"]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@attrs.frozen
class FastServer:
    """The server's URL, its one pod and a kubeconfig that reaches it."""

    url: str
    pod: str
    kubeconfig: str
