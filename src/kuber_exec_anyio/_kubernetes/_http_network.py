"""httpcore's network backend, made to close a connection whose TLS handshake is cancelled.

httpcore opens the TCP stream, then upgrades it with ``start_tls``; the connection object only
receives the stream once the handshake is done. When ``start_tls`` fails with an ``Exception``
httpcore closes the stream itself (encode/httpcore#443), but a cancellation
(``asyncio.CancelledError``, ``trio.Cancelled``: ``BaseException``) passes through both of its
backends' ``except Exception`` and nothing closes the socket: it stays open (on asyncio, with
its transport) until the garbage collector finds it, with a ``ResourceWarning``. This is still
so in httpcore 1.0.9, the latest release; encode/httpcore#642 reported its cancellation gaps in
general, and the fix that closed it (encode/httpcore#726) shielded the pool's closes, not this.
A watch cache leaving, or an exec call cancelled while the API server's handshake is slow, meets
it. The wrapper below closes the stream on any failure of ``start_tls``; everything else is
httpcore's own.

Importing this module imports httpcore, which imports trio when it is installed: it is imported
where an HTTP client is built, not with the package.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore
import httpx

__all__ = ["install_cancel_safe_tls"]


class _ClosingOnFailedTLS(httpcore.AsyncNetworkStream):
    """A connected stream whose ``start_tls`` closes it if the handshake does not complete.

    The TLS stream ``start_tls`` returns is httpcore's own: after the handshake nothing here
    stands between httpcore and the socket. (The ``timeout`` parameters are httpcore's
    interface, hence the ``noqa``.)
    """

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # After an Exception httpcore has closed it already (closing is idempotent). Shielded:
            # on trio the cancellation that got here would stop the close at its first
            # checkpoint. It cannot hang: the plain TCP stream closes without a round trip.
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CancelSafeTLSBackend(httpcore.AsyncNetworkBackend):
    """Delegates to httpcore's backend; its streams close on a failed or cancelled handshake."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _ClosingOnFailedTLS(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _ClosingOnFailedTLS(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def install_cancel_safe_tls(transport: httpx.AsyncHTTPTransport) -> None:
    """Make ``transport``'s connections close when their TLS handshake is cancelled.

    httpx offers no way to pass httpcore a network backend, so this replaces the one of the
    transport's connection pool (private attributes of httpx and httpcore, present from httpx
    0.18 and httpcore 1.0 to today). Should a release rename them, the transport is left as it
    is: connections work, and ``tests/conformance/test_tls.py`` (a handshake cancelled on
    purpose) fails until this follows.
    """
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool):
        return
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.AsyncNetworkBackend) and not isinstance(
        backend, _CancelSafeTLSBackend
    ):
        pool._network_backend = _CancelSafeTLSBackend(backend)
