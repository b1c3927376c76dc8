"""One connection over the legacy channels: one WebSocket (``?ports=N``, ``v4.channel.k8s.io``).

The server's first message on each of the two channels is the port (the core's
:class:`~kuber_exec_core.portforward.LegacyClient` checks it); then the pod's bytes arrive on the
data channel and a failure as text on the error channel. There is no half-close on this
transport: :meth:`LegacyStream.send_eof` can tell the pod nothing, so it only stops our sends;
the connection ends when the WebSocket does.
"""

from __future__ import annotations

import contextlib

import anyio
import anyio.abc

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.portforward import LegacyClient

from .._connection._keepalive import Activity, SharedKeepalive, Turn
from .._connection._transport import TransportClosed, WebSocketTransport

__all__ = ["LegacyStream"]


class LegacyStream(anyio.abc.ByteStream):
    """An anyio byte stream over one legacy port-forward WebSocket; ``exit_stack`` holds the
    WebSocket open and is closed by :meth:`aclose`."""

    #: This transport cannot tell the pod "no more bytes" (module docstring).
    half_close = False

    def __init__(
        self,
        transport: WebSocketTransport,
        exit_stack: contextlib.AsyncExitStack,
        port: int,
        *,
        pod: str,
        keepalive: SharedKeepalive | None = None,
    ) -> None:
        self.pod = pod
        self._transport = transport
        self._exit_stack = exit_stack
        self._codec = LegacyClient([port])
        self.port = port
        self._buffer = b""
        self._ended = False
        self._clean = True
        self._write_closed = False
        self._closed = False
        self.bytes_received = 0
        self.bytes_sent = 0
        self._receiving = False
        self._activity = Activity()  # the exec connection's keepalive rule (Activity says why)
        self._dead: str | None = None
        self._keepalive = keepalive
        if keepalive is not None:
            keepalive.add(self)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        while not self._buffer:
            if self._ended:
                self._raise_end()
            self._receiving = True
            try:
                message = await self._transport.receive()
            except TransportClosed as closed:
                self._ended = True
                self._clean = closed.clean
                continue
            finally:
                self._receiving = False
            self._activity.arrived()
            received = self._codec.receive_message(message)
            if received is not None:
                self._buffer = received.data
                self.bytes_received += len(received.data)
        data, self._buffer = self._buffer[:max_bytes], self._buffer[max_bytes:]
        return data

    def _raise_end(self) -> None:
        message = self._codec.errors()[0]
        if message:
            raise ExecError(ExecErrorCode.FAILED, message)
        if self._dead is not None:
            raise ExecError(
                ExecErrorCode.FAILED, f"the connection to port {self.port} broke: {self._dead}"
            )
        if not self._clean:
            # The server ends a forward with a Close frame; a connection that just stopped is
            # a broken one (the API server or the network went away), not the pod's end.
            raise ExecError(
                ExecErrorCode.FAILED,
                f"the connection to port {self.port} broke: its WebSocket ended without a Close",
            )
        raise anyio.EndOfStream

    async def send(self, item: bytes) -> None:
        if self._closed or self._write_closed:
            raise anyio.ClosedResourceError
        for message in self._codec.encode(0, item):
            try:
                await self._transport.send(message)
            except TransportClosed as closed:
                self._ended = True
                self._clean = closed.clean
                raise anyio.BrokenResourceError from None
        self.bytes_sent += len(item)

    async def send_eof(self) -> None:
        # The legacy channels cannot half-close (module docstring): our side just stops.
        self._write_closed = True

    # -- keepalive (a SharedKeepalive's Pingable) ------------------------------------------------

    async def ping_once(self, pong_timeout: float) -> bool:
        """One keepalive turn: a ping when the connection is idle; ``False`` once it is over
        (ended, or found dead now: no pong and no message while the reader waited)."""
        if self._closed or self._ended:
            return False
        turn = await self._activity.turn(self._transport, lambda: self._receiving, pong_timeout)
        if turn is Turn.DEAD:
            self._drop(f"no pong from the server within {pong_timeout:g} s")
        return turn is Turn.ALIVE

    def keepalive_failed(self, error: Exception) -> None:
        """Drop the connection: pinging it raised ``error`` (a bug, not a dead peer)."""
        self._drop(f"the keepalive failed: {type(error).__name__}")

    def _drop(self, reason: str) -> None:
        if self._dead is None:
            self._dead = reason
        # The pending receive wakes with TransportClosed and reports ``reason``.
        self._transport.abort()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.remove(self)
        with anyio.CancelScope(shield=True):
            await self._exit_stack.aclose()
