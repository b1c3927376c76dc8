"""A small HTTP/1.1 client for the API server: requests, streamed responses, a keep-alive pool.

The REST reads and writes and the watch cache's streams need little of HTTP: one server, JSON
bodies sent whole, responses read whole or streamed (a watch), keep-alive, a TLS context of
their own, timeouts, and nothing from the environment (no proxies, no ``.netrc``: the kubeconfig
alone says how to reach the server). h11 does the parsing (sans-IO); anyio the sockets and TLS.
httpx did this before; importing it (with httpcore, h2, and its command line's click and
pygments when they are installed) cost about a quarter of ``kuber-exec exec``'s start-up.

Contract:

- :meth:`HttpClient.request` sends one request and returns the status and the whole body;
  :meth:`HttpClient.stream` yields a :class:`StreamedResponse` whose body is read as it comes.
- Every failure to connect, send or receive (refused, TLS, a protocol error, a timeout, the
  server closing the connection) is an :class:`HttpError` (``ConnectError`` before the request
  left, ``RequestError`` after), whose cause is the underlying error.
- A connection is closed, never pooled, when anything went wrong with it or its response was not
  read to the end, cancellation included (a cancelled TLS handshake closes its socket at once).
- A kept connection that the server has closed meanwhile is noticed before use (its socket is
  readable while idle); a ``GET`` that fails on a reused connection before any answer is sent
  once more on a new one (the server may close an idle connection just as it is reused).
- ``timeout`` bounds connecting (TCP and TLS together) and each send; ``read_timeout`` (default
  ``timeout``) each wait for bytes of the answer.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11
from anyio.streams.tls import TLSStream

__all__ = ["ConnectError", "HttpClient", "HttpError", "RequestError", "StreamedResponse"]

#: Bytes asked of the socket per read.
_RECEIVE_BYTES = 64 * 1024
#: The largest response head h11 accepts (its default is 16 KiB; the API server's are small).
_MAX_HEAD_BYTES = 64 * 1024

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    h11.ProtocolError,
    TimeoutError,
)


class HttpError(Exception):
    """The exchange with the server failed; ``__cause__`` is why."""


class ConnectError(HttpError):
    """Connecting (TCP or TLS) failed: nothing was sent."""


class RequestError(HttpError):
    """Sending the request or receiving the answer failed, or the server closed the connection
    before answering."""


class _Connection:
    """One HTTP/1.1 connection: an anyio byte stream and its h11 state."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.protocol = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_BYTES)
        #: Bytes of the current answer received so far.
        self.received = 0

    def closed_while_idle(self) -> bool:
        """Whether the server closed (or wrote to) this idle connection: it is unusable."""
        sock = self.stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    async def send(self, event: h11.Event, seconds: float) -> None:
        data = self.protocol.send(event)
        if data:
            with anyio.fail_after(seconds):
                await self.stream.send(data)

    async def next_event(self, seconds: float) -> h11.Event:
        while True:
            event = self.protocol.next_event()
            if event is not h11.NEED_DATA:
                assert isinstance(event, h11.Event)
                return event
            with anyio.fail_after(seconds):
                try:
                    data = await self.stream.receive(_RECEIVE_BYTES)
                except anyio.EndOfStream:
                    data = b""
            self.received += len(data)
            self.protocol.receive_data(data)

    def reusable(self) -> bool:
        """After a whole exchange: whether the connection can carry the next one."""
        if self.protocol.our_state is h11.DONE and self.protocol.their_state is h11.DONE:
            self.protocol.start_next_cycle()
            self.received = 0
            return True
        return False

    async def aclose(self) -> None:
        # Forcefully: no TLS close_notify exchange with a server that may not answer.
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(self.stream)


class StreamedResponse:
    """A response whose body is read as it arrives (:meth:`chunks`) or whole (:meth:`aread`)."""

    def __init__(
        self, status: int, connection: _Connection, client: HttpClient, read_timeout: float
    ) -> None:
        self.status = status
        self._connection = connection
        self._client = client
        self._read_timeout = read_timeout
        self.complete = False

    def chunks(self) -> _Chunks:
        """The body's bytes as they arrive (an async iterator; not a generator, so leaving it
        early leaves nothing for the garbage collector to finalize)."""
        return _Chunks(self)

    async def aread(self) -> bytes:
        """The rest of the body, whole."""
        parts = [chunk async for chunk in self.chunks()]
        return b"".join(parts)

    async def _next_chunk(self) -> bytes | None:
        if self.complete:
            return None
        while True:
            try:
                event = await self._connection.next_event(self._read_timeout)
            except _TRANSPORT_ERRORS as error:
                raise RequestError(_describe(error, "reading the answer")) from error
            if isinstance(event, h11.Data):
                data = self._with_parsed(bytes(event.data))
                if data:
                    return data
                if self.complete:
                    return None
                continue
            if isinstance(event, h11.EndOfMessage):
                self.complete = True
                return None
            raise RequestError("the server closed the connection in the middle of its answer")

    def _with_parsed(self, data: bytes) -> bytes:
        """``data`` and the body's bytes h11 already parsed after it, joined: an API server
        sends a followed log an HTTP chunk per line, and one event per hundred bytes made a
        100 MB log cost minutes of CPU. Stops at what needs a read, or at the body's end."""
        parts = [data]
        protocol = self._connection.protocol
        while True:
            try:
                event = protocol.next_event()
            except h11.ProtocolError:
                break  # Raised again by the next read, once these bytes are handed over.
            if isinstance(event, h11.Data):
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self.complete = True
                break
            else:
                # NEED_DATA, or the connection's end: the next read meets it.
                break
        return b"".join(parts)


class _Chunks:
    __slots__ = ("_response",)

    def __init__(self, response: StreamedResponse) -> None:
        self._response = response

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._response._next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk


class HttpClient:
    """Requests to one server (``http(s)://host[:port]``), with up to ``keepalive_connections``
    idle connections kept for reuse (``None``: all). Close it with :meth:`aclose`."""

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | None,
        *,
        timeout: float,
        read_timeout: float | None = None,
        keepalive_connections: int | None = None,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        parts = urlsplit(server)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._tls else 80)
        self._authority = parts.netloc.rsplit("@", 1)[-1]
        self._prefix = parts.path.rstrip("/")
        self._ssl_context = ssl_context or (ssl.create_default_context() if self._tls else None)
        self._timeout = timeout
        self._read_timeout = read_timeout if read_timeout is not None else timeout
        self._keepalive = keepalive_connections
        self._headers = [("Host", self._authority), *headers]
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
    ) -> tuple[int, bytes]:
        """Send one request; return the status and the whole body."""
        async with self.stream(method, target, headers=headers, body=body) as response:
            return response.status, await response.aread()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Send one request; yield its response with the body still to read. The connection
        goes back to the pool only if the body was read to its end. ``read_timeout`` bounds
        each wait for the answer's bytes (default: the client's; ``math.inf``: no bound, for a
        followed log that may be quiet for long)."""
        limit = self._read_timeout if read_timeout is None else read_timeout
        connection, status = await self._exchange(method, target, headers, body, limit)
        response = StreamedResponse(status, connection, self, limit)
        try:
            yield response
        except BaseException:
            await connection.aclose()
            raise
        if response.complete and not self._closed and connection.reusable() and self._room():
            self._idle.append(connection)
        else:
            await connection.aclose()

    async def aclose(self) -> None:
        """Close every idle connection; the client takes no more requests."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()

    # -- one exchange --------------------------------------------------------------------------

    async def _exchange(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        read_timeout: float,
    ) -> tuple[_Connection, int]:
        if self._closed:
            raise RequestError("the HTTP client is closed")
        request_headers = [*self._headers, *headers]
        if body is not None:
            request_headers.append(("Content-Length", str(len(body))))
        request = h11.Request(method=method, target=self._prefix + target, headers=request_headers)
        for attempt in (1, 2):
            connection, reused = await self._checkout()
            try:
                await connection.send(request, self._timeout)
                if body:
                    await connection.send(h11.Data(data=body), self._timeout)
                await connection.send(h11.EndOfMessage(), self._timeout)
                event = await connection.next_event(read_timeout)
                while isinstance(event, h11.InformationalResponse):
                    event = await connection.next_event(read_timeout)
                if isinstance(event, h11.Response):
                    return connection, event.status_code
                failure: BaseException = RequestError(
                    "the server closed the connection without answering"
                )
            except _TRANSPORT_ERRORS as error:
                failure = error
            except BaseException:
                await connection.aclose()
                raise
            await connection.aclose()
            unanswered = connection.received == 0
            # A kept connection the server closed as it was reused: once more, on a new one.
            if attempt == 1 and reused and unanswered and method == "GET":
                continue
            if isinstance(failure, HttpError):
                raise failure
            if unanswered and isinstance(failure, (h11.RemoteProtocolError, anyio.EndOfStream)):
                raise RequestError(
                    f"{method} {target}: the server closed the connection without answering"
                ) from failure
            raise RequestError(_describe(failure, f"{method} {target}")) from failure
        raise AssertionError("unreachable")  # pragma: no cover

    async def _checkout(self) -> tuple[_Connection, bool]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed_while_idle():
                return connection, True
            await connection.aclose()
        return await self._connect(), False

    def _room(self) -> bool:
        return self._keepalive is None or len(self._idle) < self._keepalive

    async def _connect(self) -> _Connection:
        try:
            with anyio.fail_after(self._timeout):
                tcp = await anyio.connect_tcp(self._host, self._port)
                if not self._tls:
                    return _Connection(tcp)
                try:
                    tls = await TLSStream.wrap(
                        tcp,
                        server_side=False,
                        hostname=self._host,
                        ssl_context=self._ssl_context,
                        standard_compatible=False,
                    )
                except BaseException:
                    # Cancelled or failed in the handshake: the socket is closed now, not by
                    # the garbage collector.
                    await anyio.aclose_forcefully(tcp)
                    raise
                return _Connection(tls)
        except _TRANSPORT_ERRORS as error:
            raise ConnectError(_describe(error, f"connecting to {self._authority}")) from error


def _describe(error: BaseException, doing: str) -> str:
    # The cause's own text is added by describe_error (which follows __cause__).
    if isinstance(error, TimeoutError):
        return f"timed out {doing}"
    return f"{doing} failed"
