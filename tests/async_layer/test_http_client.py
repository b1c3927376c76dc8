"""The async layer's HTTP/1.1 client (``_kubernetes/_http.py``) against a real loopback server
that answers as scripted, on both runtimes: keep-alive reuse within the pool's bound, a kept
connection the server closed retried once for a GET, an answer cut short or never given is an
HttpError, a streamed body left early closes its connection, timeouts, and no socket is left
for the garbage collector (ResourceWarning is an error in this suite)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from kuber_exec_anyio._kubernetes._http import ConnectError, HttpClient, RequestError

pytestmark = pytest.mark.anyio

Answer = Callable[[bytes], bytes | None]


def ok(body: bytes = b"{}", *, close: bool = False) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def chunked(*parts: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for part in parts:
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


class Server:
    """Counts connections and requests; answers each request head with ``answer(head)``
    (``None``: close the connection without answering)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self.close_after_each = False

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        buffer = b""
        async with stream:
            try:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        buffer += await stream.receive()
                    head, buffer = buffer.split(b"\r\n\r\n", 1)
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":", 1)[1])
                    while len(buffer) < length:
                        buffer += await stream.receive()
                    buffer = buffer[length:]
                    self.requests.append(head)
                    reply = self.answer(head)
                    if reply is None:
                        return
                    await stream.send(reply)
                    if b"Connection: close" in reply or self.close_after_each:
                        return
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Server]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, self._handle)
            try:
                yield self
            finally:
                tasks.cancel_scope.cancel()

    def client(self, **options: object) -> HttpClient:
        return HttpClient(f"http://127.0.0.1:{self.port}", None, timeout=5, **options)  # type: ignore[arg-type]


async def test_kept_connections_are_reused_up_to_the_bound() -> None:
    async with Server(lambda _: ok(b'{"a":1}')).running() as server:
        client = server.client(keepalive_connections=1)
        try:
            for _ in range(5):
                assert await client.request("GET", "/x") == (200, b'{"a":1}')
            assert server.connections == 1
            # Two at once: the second opens a connection, which the bound of one then closes.
            async with anyio.create_task_group() as tasks:
                for _ in range(2):
                    tasks.start_soon(client.request, "GET", "/y")
            assert await client.request("GET", "/z") == (200, b'{"a":1}')
            assert server.connections == 2
        finally:
            await client.aclose()
        assert server.requests[0].startswith(b"GET /x HTTP/1.1\r\n")
        assert b"\r\nhost: 127.0.0.1:" in server.requests[0].lower()


async def test_a_body_goes_with_its_length_and_chunked_answers_are_joined() -> None:
    async with Server(lambda _: chunked(b"ab", b"cd")).running() as server:
        client = server.client()
        try:
            status, body = await client.request(
                "PUT", "/l", headers=[("Content-Type", "application/json")], body=b'{"k":2}'
            )
        finally:
            await client.aclose()
    assert (status, body) == (200, b"abcd")
    assert b"content-length: 7" in server.requests[0].lower()


async def test_a_kept_connection_the_server_closed_is_not_used() -> None:
    # The server closes after every answer without saying so. The client either sees the idle
    # connection readable (its end-of-file) and opens a new one, or finds it dead as it sends
    # and sends the GET once more on a new one: either way every request succeeds.
    async with Server(lambda _: ok()).running() as server:
        server.close_after_each = True
        client = server.client()
        try:
            for _ in range(4):
                assert (await client.request("GET", "/again"))[0] == 200
        finally:
            await client.aclose()
        assert server.connections >= 4


async def test_no_answer_is_a_request_error_naming_it() -> None:
    async with Server(lambda _: None).running() as server:
        client = server.client()
        try:
            with pytest.raises(RequestError) as caught:
                await client.request("POST", "/p", body=b"{}")
        finally:
            await client.aclose()
    assert "without answering" in str(caught.value)


async def test_an_answer_cut_short_is_a_request_error() -> None:
    short = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nabc"
    async with Server(lambda _: short).running() as server:
        client = server.client()
        try:
            with pytest.raises(RequestError):
                await client.request("GET", "/short")
        finally:
            await client.aclose()


async def test_a_refused_connection_is_a_connect_error() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    client = HttpClient(f"http://127.0.0.1:{port}", None, timeout=5)
    with pytest.raises(ConnectError) as caught:
        await client.request("GET", "/")
    assert isinstance(caught.value.__cause__, OSError)


async def test_a_silent_server_times_out() -> None:
    # b"": nothing is sent, the connection stays open; the client waits for its read timeout.
    async with Server(lambda _: b"").running() as server:
        client = server.client(read_timeout=0.2)
        try:
            with pytest.raises(RequestError) as caught:
                await client.request("GET", "/slow")
        finally:
            await client.aclose()
    assert "timed out" in str(caught.value)


async def test_a_stream_left_early_closes_its_connection() -> None:
    # The first chunk of an answer that goes on (no last chunk yet): a watch.
    unfinished = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n"
    async with Server(lambda head: unfinished if b"/watch" in head else ok()).running() as server:
        client = server.client()
        try:
            async with client.stream("GET", "/watch") as response:
                async for chunk in response.chunks():
                    assert chunk == b"first"
                    break
            assert not response.complete
            # The connection was closed, not pooled: the next request opens another.
            assert (await client.request("GET", "/next"))[0] == 200
            assert server.connections == 2
        finally:
            await client.aclose()


async def test_a_stream_may_wait_longer_than_the_clients_read_timeout() -> None:
    # A followed log is quiet for long: its stream lifts the client's read timeout.
    import math

    async with Server(lambda _: b"").running() as server:
        client = server.client(read_timeout=0.05)
        try:
            with anyio.move_on_after(0.5) as waited:
                async with client.stream("GET", "/follow", read_timeout=math.inf):
                    pass  # pragma: no cover - the answer never comes.
            assert waited.cancelled_caught
        finally:
            await client.aclose()


async def test_many_small_chunks_come_joined() -> None:
    # A followed log: a chunk per line. What h11 already parsed is handed over at once.
    lines = [f"line {n}\n".encode() for n in range(2000)]
    async with Server(lambda _: chunked(*lines)).running() as server:
        client = server.client()
        try:
            async with client.stream("GET", "/log") as response:
                received = [chunk async for chunk in response.chunks()]
        finally:
            await client.aclose()
    assert b"".join(received) == b"".join(lines)
    assert len(received) < len(lines) // 10
