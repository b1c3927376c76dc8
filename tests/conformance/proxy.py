"""A loopback TCP proxy that can freeze: the peer stays connected but stops answering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import anyio.abc


class FreezingProxy:
    """Forwards bytes both ways until ``freeze()``; then forwards nothing, closes nothing."""

    def __init__(self, url: str) -> None:
        self.frozen = anyio.Event()
        self.url = ""
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80

    def freeze(self) -> None:
        self.frozen.set()

    async def _pump(self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        try:
            async for chunk in source:
                if self.frozen.is_set():
                    await anyio.sleep_forever()
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            await sink.aclose()

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        upstream = await anyio.connect_tcp(self._host, self._port)
        async with client, upstream, anyio.create_task_group() as tasks:
            tasks.start_soon(self._pump, client, upstream)
            tasks.start_soon(self._pump, upstream, client)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FreezingProxy]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self.url = f"http://127.0.0.1:{port}"
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, self._handle)
            try:
                yield self
            finally:
                tasks.cancel_scope.cancel()
