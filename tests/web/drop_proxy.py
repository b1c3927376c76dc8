"""A loopback TCP proxy whose network can be cut: every connection through it dropped at once,
and new ones refused for a while, as when a laptop's Wi-Fi goes away and comes back.

Threads and blocking sockets, so that a sync (Playwright) test drives it; ``cut(seconds)``
returns at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class DropProxy:
    """Forwards 127.0.0.1:<port> to ``targets`` (``host:port``, round robin per connection)."""

    def __init__(self, *targets: str) -> None:
        self.targets = [(t.rpartition(":")[0], int(t.rpartition(":")[2])) for t in targets]
        self._next = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._down_until = 0.0
        self.cuts = 0
        self.refused = 0
        self.connections = 0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def cut(self, seconds: float) -> None:
        """Drop every connection now and refuse new ones for ``seconds``."""
        with self._lock:
            self._down_until = time.monotonic() + seconds
            self.cuts += 1
        self._drop_all()

    def _drop_all(self) -> None:
        with self._lock:
            doomed = list(self._sockets)
            self._sockets.clear()
        for sock in doomed:
            # The pumps see their sockets fail and close them.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def remove_target(self, target: str) -> None:
        """Stop sending new connections to ``target`` (a replica that was killed)."""
        host, _, port = target.rpartition(":")
        with self._lock:
            self.targets.remove((host, int(port)))

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = time.monotonic() < self._down_until
                target = self.targets[self._next % len(self.targets)] if self.targets else None
                self._next += 1
            if down or target is None:
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self.connections += 1
            with self._lock:
                self._sockets.update((client, upstream))
            done = [0]  # Directions finished: the sockets close after both.
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink, done), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, done: list[int]) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
            # A half-close, as TCP does: the other direction may still carry a Close frame.
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        finally:
            with self._lock:
                done[0] += 1
                last = done[0] == 2
                if last:
                    self._sockets.discard(source)
                    self._sockets.discard(sink)
            if last:
                source.close()
                sink.close()

    @contextmanager
    def running(self) -> Iterator[str]:
        self._thread.start()
        try:
            yield self.address
        finally:
            self._closed = True
            # Shut down first: a close alone does not wake a thread blocked in accept().
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._drop_all()
            self._thread.join(timeout=5)
