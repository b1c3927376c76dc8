"""A loopback TCP proxy in front of the sandbox: it can freeze (the peer stays connected but
stops answering) and it can terminate TLS (so the clients' TLS paths meet a real TLS server)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.streams.tls import TLSListener


class FreezingProxy:
    """Forwards bytes both ways until ``freeze()``; then forwards nothing, closes nothing.
    ``cut()`` instead breaks every open connection at once (both sides closed, no WebSocket
    Close): a network cut between the client and the API server.

    With ``tls`` (a server-side context) it accepts TLS and forwards the plain bytes.
    """

    def __init__(self, url: str, tls: ssl.SSLContext | None = None) -> None:
        self.frozen = anyio.Event()
        #: Set by :meth:`mute_client`: the client's bytes stop there, the server's still flow.
        self.client_muted = anyio.Event()
        self.partitioned = False
        self._connections: set[anyio.CancelScope] = set()
        self._tls = tls
        self.url = ""
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80

    def freeze(self) -> None:
        self.frozen.set()

    def mute_client(self) -> None:
        """Stop forwarding what the clients send (their pings, their Close), while the
        servers' output still flows: a server that answers no ping yet is alive."""
        self.client_muted.set()

    def cut(self) -> None:
        for scope in list(self._connections):
            scope.cancel()

    def partition(self) -> None:
        """Cut every connection and refuse new ones (closed at once) until :meth:`heal`: the
        client's every API call fails, as behind a network partition."""
        self.partitioned = True
        self.cut()

    def heal(self) -> None:
        self.partitioned = False

    async def _pump(
        self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, from_client: bool
    ) -> None:
        try:
            async for chunk in source:
                if self.frozen.is_set() or (from_client and self.client_muted.is_set()):
                    await anyio.sleep_forever()
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            # Forcefully: a TLS close_notify cannot be sent on a stream the peer already shut.
            await anyio.aclose_forcefully(sink)

    async def _handle(self, client: anyio.abc.ByteStream) -> None:
        # The listener hands the accepted stream over: closing it is ours, also when the
        # connect upstream fails or the proxy stops during it.
        if self.partitioned:
            await anyio.aclose_forcefully(client)
            return
        try:
            upstream = await anyio.connect_tcp(self._host, self._port)
        except BaseException:
            await anyio.aclose_forcefully(client)
            raise
        try:
            with anyio.CancelScope() as scope:
                self._connections.add(scope)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._pump, client, upstream, True)
                    tasks.start_soon(self._pump, upstream, client, False)
        finally:
            self._connections.discard(scope)
            await anyio.aclose_forcefully(client)
            await anyio.aclose_forcefully(upstream)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FreezingProxy]:
        tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = tcp.extra(anyio.abc.SocketAttribute.local_port)
        listener: anyio.abc.Listener[Any] = tcp
        if self._tls is not None:
            listener = _QuietTLSListener(tcp, self._tls)
        self.url = f"{'https' if self._tls else 'http'}://127.0.0.1:{port}"
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, self._handle)
            try:
                yield self
            finally:
                tasks.cancel_scope.cancel()


class _QuietTLSListener(TLSListener):
    """A refused handshake is what the TLS tests provoke on purpose: not worth a traceback."""

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: anyio.abc.AnyByteStream) -> None:
        await anyio.aclose_forcefully(stream)
        if not isinstance(exc, Exception):
            raise exc


class CuttingProxy(FreezingProxy):
    """Forwards bytes both ways; the first connection to carry more than ``cut_after`` bytes
    from the server is cut there (both sides closed at once, mid-message). Once: ``cuts``
    counts it, and later connections pass untouched (a resumed download must get through)."""

    def __init__(self, url: str, cut_after: int) -> None:
        super().__init__(url)
        self._cut_after = cut_after
        self.cuts = 0

    async def _downstream(
        self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, cut: anyio.Event
    ) -> None:
        moved = 0
        try:
            async for chunk in source:
                if self.cuts == 0 and moved + len(chunk) > self._cut_after:
                    self.cuts += 1
                    await sink.send(chunk[: self._cut_after - moved])
                    cut.set()
                    return
                moved += len(chunk)
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            cut.set()

    async def _handle(self, client: anyio.abc.ByteStream) -> None:
        try:
            upstream = await anyio.connect_tcp(self._host, self._port)
        except BaseException:
            await anyio.aclose_forcefully(client)
            raise
        cut = anyio.Event()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._pump, client, upstream, True)
                tasks.start_soon(self._downstream, upstream, client, cut)
                await cut.wait()
                tasks.cancel_scope.cancel()
        finally:
            await anyio.aclose_forcefully(client)
            await anyio.aclose_forcefully(upstream)
