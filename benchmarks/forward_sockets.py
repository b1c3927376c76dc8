"""Both plain-socket ends of the port-forward benchmarks, used by ``port_forward.py`` (the
sandbox) and ``scripts/realcluster/bench_port_forward.py`` (a real cluster's host-network pods):
the pod's side (threaded loopback servers that echo, or write a fixed number of bytes and close:
a firehose) and the measurements through a client's local listener (throughput, connection
times)."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["connections", "echo", "firehose", "one_connection", "serve", "throughput"]

_BLOCK = b"\xa5" * (1 << 20)


def serve(handler: Callable[[socket.socket], None], *, backlog: int = 1024) -> int:
    """A threaded listener on 127.0.0.1 calling ``handler`` with each accepted connection in a
    thread of its own; returns its port (daemon threads, for this process's life)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=backlog)

    def accept() -> None:
        while True:
            client, _ = server.accept()
            threading.Thread(target=handler, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(server.getsockname()[1])


def echo(client: socket.socket) -> None:
    """Send back what arrives until the client half-closes (a reset ends it quietly)."""
    with client:
        try:
            while data := client.recv(65536):
                client.sendall(data)
        except OSError:
            pass


def firehose(size: int) -> Callable[[socket.socket], None]:
    """A handler that writes ``size`` bytes and closes (a reset ends it quietly)."""

    def handler(client: socket.socket) -> None:
        with client:
            left = size
            try:
                while left > 0:
                    chunk = _BLOCK[: min(left, len(_BLOCK))]
                    client.sendall(chunk)
                    left -= len(chunk)
            except OSError:
                pass

    return handler


def throughput(port: int, size: int, *, timeout: float | None = None) -> float:
    """MiB/s reading ``size`` bytes to the end from ``port``."""
    started = time.perf_counter()
    got = 0
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        while data := client.recv(1 << 20):
            got += len(data)
    elapsed = time.perf_counter() - started
    if got != size:
        raise RuntimeError(f"{got} of {size} bytes arrived")
    return size / elapsed / (1 << 20)


def one_connection(port: int, timeout: float = 30) -> float:
    """Seconds to connect to ``port`` and have one byte echoed."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        client.sendall(b"x")
        if client.recv(1) != b"x":
            raise OSError("no echo")
    return time.perf_counter() - started


def _quantiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {}
    cuts = statistics.quantiles(values, n=100)
    return {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}


def connections(
    port: int, sequential: int, concurrent: int, *, concurrent_timeout: float = 30
) -> dict[str, Any]:
    """``sequential`` echoed connections one after another, then ``concurrent`` at once (each
    given ``concurrent_timeout`` seconds): failures, and p50/p99 of the time to the echo."""
    times: list[float] = []
    failures = 0
    for _ in range(sequential):
        try:
            times.append(one_connection(port))
        except OSError:
            failures += 1
    crowd: list[float] = []
    crowd_failures = [0]

    def worker() -> None:
        try:
            crowd.append(one_connection(port, timeout=concurrent_timeout))
        except OSError:
            crowd_failures[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(concurrent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "sequential": {"count": sequential, "failures": failures, **_quantiles(times)},
        "concurrent": {"count": concurrent, "failures": crowd_failures[0], **_quantiles(crowd)},
    }
