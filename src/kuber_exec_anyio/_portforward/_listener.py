"""The local side of a forward's listeners: accepting connections, and reading each one only
when the forward asks for bytes.

Why not anyio's accepted streams: on asyncio, the stream anyio makes of an accepted socket
reads it from the moment it is accepted into a queue without bound, and pauses reading only
after a ``receive`` has had to wait (``anyio.connect_tcp`` pauses at once; ``accept`` and
``SocketStream.from_socket`` do not, anyio 4.16). A local client writing faster than the pod
reads (an upload through the forward) kept a ``receive`` from ever waiting, and everything it
sent piled up in this process. :class:`LocalConnection` reads its socket only inside
``receive``, at most ``max_bytes`` at a time, so the socket's buffers fill and TCP holds the
client back, on both runtimes alike.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

__all__ = ["LocalConnection", "accept_connections"]

_log = logging.getLogger("kuber_exec.portforward")

#: accept() failures that concern one connection only: go on with the next.
_ONE_CONNECTION = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})
#: accept() failures for want of descriptors or memory: the connection waits in the backlog.
_NO_CAPACITY = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: How long the listener waits after a failure for want of capacity before it accepts again.
_CAPACITY_PAUSE = 0.1


class LocalConnection(anyio.abc.ByteStream):
    """An accepted TCP connection as an anyio byte stream over its non-blocking socket, which
    it owns. One task may receive while another sends; ``send_eof`` half-closes.

    ``receive`` raises ``anyio.EndOfStream`` at the client's end of stream, and
    ``anyio.BrokenResourceError`` when the connection broke; both methods raise
    ``anyio.ClosedResourceError`` once the stream is closed.
    """

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket = sock
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if max_bytes < 1:
            raise ValueError("max_bytes must be a positive integer")  # as anyio's streams
        await anyio.lowlevel.checkpoint_if_cancelled()
        waited = False
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self._socket.recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._socket)
                waited = True
                continue
            except OSError as error:
                raise anyio.BrokenResourceError from error
            break
        if not waited:
            # What was read is not lost to a cancellation: the yield cannot be cancelled.
            await anyio.lowlevel.cancel_shielded_checkpoint()
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(item)
        waited = False
        while view:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                sent = self._socket.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._socket)
                waited = True
                continue
            except OSError as error:
                raise anyio.BrokenResourceError from error
            view = view[sent:]
        if not waited:
            await anyio.lowlevel.cancel_shielded_checkpoint()

    async def send_eof(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            self._socket.shutdown(socket.SHUT_WR)
        except OSError as error:
            raise anyio.BrokenResourceError from error
        await anyio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # A task waiting on the socket wakes with ClosedResourceError, not a stale fd.
            anyio.notify_closing(self._socket)
            self._socket.close()
        await anyio.lowlevel.checkpoint()


async def accept_connections(
    listener: socket.socket,
    handler: Callable[[LocalConnection], Coroutine[Any, Any, None]],
    tasks: anyio.abc.TaskGroup,
) -> None:
    """Accept connections on the listening ``listener`` (left open: its owner closes it, after
    cancelling this) and run ``handler`` for each in ``tasks``, until cancelled.

    A failure that concerns one connection (it was aborted before it was accepted) is passed
    over; one for want of descriptors or memory is logged, and accepting resumes a moment later
    (the connection waits in the backlog); any other ``OSError`` propagates.
    """
    listener.setblocking(False)
    while True:
        try:
            sock, _address = listener.accept()
        except BlockingIOError:
            await anyio.wait_readable(listener)
            continue
        except OSError as error:
            if error.errno in _ONE_CONNECTION:
                continue
            if error.errno in _NO_CAPACITY:
                _log.warning("port-forward cannot accept a connection now: %s", error.strerror)
                await anyio.sleep(_CAPACITY_PAUSE)
                continue
            raise
        tasks.start_soon(handler, LocalConnection(sock))
        # A burst of connections must not keep the loop from running anything else.
        await anyio.lowlevel.checkpoint()
