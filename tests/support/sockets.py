"""Plain-socket servers for the port-forward tests: threads and blocking sockets, so that what
they hold is bounded by construction (anyio's accepted streams on asyncio read their socket into
an unbounded queue until a receive has to wait, which a test of our memory would count)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

__all__ = ["echo_server"]


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """A listener on 127.0.0.1 echoing every connection in a thread of its own (the client's
    end of stream is passed back as a half-close; a reset ends it quietly); yields its port.
    The listener closes with the block; open connections end with their clients."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener closed
            threading.Thread(target=_echo, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    with listener:
        yield int(listener.getsockname()[1])
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()


def _echo(client: socket.socket) -> None:
    with client, contextlib.suppress(OSError):
        while data := client.recv(65536):
            client.sendall(data)
        client.shutdown(socket.SHUT_WR)
