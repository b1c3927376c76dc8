"""The pod's side of the port-forward benchmarks: threaded loopback servers that echo, or write
a fixed number of bytes and close (a firehose). Used by ``port_forward.py`` (the sandbox) and
``scripts/realcluster/bench_port_forward.py`` (a real cluster's host-network pods)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

__all__ = ["echo", "firehose", "serve"]

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
