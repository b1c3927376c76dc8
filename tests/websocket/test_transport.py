"""Both bindings' own WebSocket transports against a real loopback server, frame by frame.

Every test runs on trio (``open_trio_transport``) and on asyncio (``open_asyncio_transport``)
against the same server, on an anyio TCP listener on 127.0.0.1 so that it runs on either loop.
The server is ``websockets``' sans-IO ``ServerProtocol``, which writes nothing on its own, so
each test chooses exactly what goes on the wire: fragmented messages, text, pings, pongs, how the
bytes are split across TCP writes, and when the server closes. The conformance suite runs the
transports through whole exec sessions; these are the frame-level rules under them.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

import anyio
import attrs
import pytest
from anyio.abc import SocketAttribute, SocketListener, SocketStream
from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from kuber_exec_anyio.transport import TransportClosed, TransportOptions, WebSocketTransport
from kuber_exec_asyncio._transport import AsyncioWebSocketTransport, open_asyncio_transport
from kuber_exec_core import ExecError
from kuber_exec_trio._transport import open_trio_transport

V5 = "v5.channel.k8s.io"

#: Whole-test bound: a transport that hangs fails its test instead of the run's timeout.
TEST_SECONDS = 30

T = TypeVar("T")


class Transport(WebSocketTransport, Protocol):
    """The seam, and what the shared close reads of a transport that has it."""

    @property
    def closing_handshake_done(self) -> bool: ...


Opener = Callable[[TransportOptions], AbstractAsyncContextManager[Transport]]


@dataclass(frozen=True)
class Runtime:
    """An event loop (anyio's name for it) and its binding's transport."""

    backend: str
    open_transport: Opener

    def run(self, main: Callable[[], Awaitable[T]]) -> T:
        """``main`` on this event loop, bounded by :data:`TEST_SECONDS`."""

        async def bounded() -> T:
            with anyio.fail_after(TEST_SECONDS):
                return await main()

        return anyio.run(bounded, backend=self.backend)


# A parametrization, not a fixture: hypothesis refuses function-scoped fixtures under @given.
pytestmark = pytest.mark.parametrize(
    "runtime",
    [
        pytest.param(Runtime("trio", open_trio_transport), id="trio"),
        pytest.param(Runtime("asyncio", open_asyncio_transport), id="asyncio"),
    ],
)

#: What a test's server does once the upgrade is accepted.
Serve = Callable[["ServerSide"], Awaitable[None]]


class ServerSide:
    """The accepted connection, seen from the server: frames out, frames in, raw writes."""

    def __init__(self, stream: SocketStream, protocol: ServerProtocol) -> None:
        self.stream = stream
        self.protocol = protocol
        self.received: list[Frame] = []

    async def flush(self, pieces: list[int] | None = None) -> None:
        """Write what the protocol queued, split at the given sizes (the rest in one write)."""
        data = b"".join(self.protocol.data_to_send())
        for size in pieces or []:
            if not data:
                break
            await self.stream.send(data[:size])
            data = data[size:]
        if data:
            await self.stream.send(data)

    async def read_frame(self, *, answer: bool = True) -> Frame:
        """The next frame from the client; ``answer``: write what the protocol replies (a
        pong to a ping) at once."""
        while not self.received:
            try:
                data = await self.stream.receive(65536)
            except anyio.EndOfStream:
                data = b""
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            self.received += [e for e in self.protocol.events_received() if isinstance(e, Frame)]
            if answer:
                await self.flush()
            if not data and not self.received:
                raise EOFError("the client closed")
        return self.received.pop(0)


@asynccontextmanager
async def loopback_listener() -> AsyncIterator[tuple[SocketListener, int]]:
    """A TCP listener on 127.0.0.1 and its port."""
    listeners = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listeners:
        [listener] = listeners.listeners
        assert isinstance(listener, SocketListener)
        yield listener, listener.extra(SocketAttribute.local_port)


def loopback_options(
    port: int, *, scheme: str = "ws", connect_timeout: float = 10
) -> TransportOptions:
    """How to open the exec WebSocket of a test server on 127.0.0.1:``port``."""
    return TransportOptions(
        url=f"{scheme}://127.0.0.1:{port}/exec",
        subprotocols=(V5,),
        ssl_context=None,
        headers=(),
        connect_timeout=connect_timeout,
    )


@asynccontextmanager
async def serving(
    serve: Serve, with_response: Callable[[ServerProtocol], None] | None = None
) -> AsyncIterator[TransportOptions]:
    """A one-connection WebSocket server on loopback running ``serve`` after the upgrade;
    ``with_response`` queues frames that go out in the same write as the 101 response."""

    async def accept_one(listener: SocketListener) -> None:
        stream = await listener.accept()
        async with stream:
            protocol = ServerProtocol(subprotocols=[V5])  # type: ignore[list-item]
            request: Request | None = None
            while request is None:
                protocol.receive_data(await stream.receive(65536))
                request = next(
                    (e for e in protocol.events_received() if isinstance(e, Request)), None
                )
            protocol.send_response(protocol.accept(request))
            if with_response is not None:
                with_response(protocol)
            side = ServerSide(stream, protocol)
            await side.flush()
            await serve(side)

    async with loopback_listener() as (listener, port), anyio.create_task_group() as group:
        group.start_soon(accept_one, listener)
        try:
            yield loopback_options(port)
        finally:
            group.cancel_scope.cancel()


async def receive_all(transport: Transport) -> list[bytes | str]:
    messages: list[bytes | str] = []
    with anyio.fail_after(10):
        try:
            while True:
                messages.append(await transport.receive())
        except TransportClosed:
            return messages


async def reading_stopped(transport: Transport) -> None:
    """Return once the client has stopped reading what the server sends (nothing taken)."""
    if isinstance(transport, AsyncioWebSocketTransport):
        # asyncio reads as bytes come (in the loop's callbacks: every task may wait meanwhile)
        # until more frames wait to be taken than it keeps; nothing but its call to pause its
        # asyncio transport marks that moment, so that call is what is waited for.
        inner = transport._transport
        assert inner is not None
        if inner.is_reading():
            paused = anyio.Event()
            pause_reading = inner.pause_reading

            def pause_and_tell() -> None:
                pause_reading()
                paused.set()

            inner.pause_reading = pause_and_tell  # type: ignore[method-assign]
            await paused.wait()
    # trio reads only in a receive: once every task waits, the server's write is stuck.
    await anyio.wait_all_tasks_blocked()


MESSAGES = st.lists(st.binary(min_size=0, max_size=3000) | st.text(max_size=300), max_size=8)


@given(
    messages=MESSAGES,
    fragment_sizes=st.lists(st.integers(1, 700), max_size=4),
    pieces=st.lists(st.integers(1, 900), max_size=12),
)
def test_messages_arrive_whole_in_order_however_framed_and_split(
    runtime: Runtime, messages: list[bytes | str], fragment_sizes: list[int], pieces: list[int]
) -> None:
    """Whatever the fragmentation and however TCP splits the bytes, each message arrives once,
    whole, as bytes (binary) or str (text), in order; then the server's Close ends receiving."""

    async def serve(side: ServerSide) -> None:
        for message in messages:
            data = message.encode() if isinstance(message, str) else message
            text = isinstance(message, str)
            send = side.protocol.send_text if text else side.protocol.send_binary
            cuts = [size for size in fragment_sizes if size < len(data)]
            if not cuts:
                send(data)
                continue
            send(data[: cuts[0]], fin=False)
            rest = data[cuts[0] :]
            for size in cuts[1:]:
                side.protocol.send_continuation(rest[:size], fin=False)
                rest = rest[size:]
            side.protocol.send_continuation(rest, fin=True)
        side.protocol.send_close(1000)
        await side.flush(pieces)
        await side.read_frame()  # the client's Close echo

    async def main() -> list[bytes | str]:
        async with serving(serve) as options, runtime.open_transport(options) as transport:
            received = await receive_all(transport)
            assert transport.closing_handshake_done
            return received

    assert runtime.run(main) == messages


def test_many_messages_sent_before_any_is_taken_arrive_whole_in_order(runtime: Runtime) -> None:
    """Messages the server sends before any is taken do not all come into memory: reading
    stops while parsed ones wait to be taken (the server's write stalls) and starts again as
    they are taken; each message still arrives once, whole, in order."""
    messages = [
        number.to_bytes(4, "big") + bytes([number % 256]) * (32 * 1024 - 4) for number in range(200)
    ]

    async def main() -> list[bytes | str]:
        written = anyio.Event()

        async def serve(side: ServerSide) -> None:
            # A small, fixed send buffer (no autotuning): the kernel holds far less than the
            # 6.25 MiB burst, so the server's write waits for the client to read.
            raw = side.stream.extra(SocketAttribute.raw_socket)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
            for message in messages:
                side.protocol.send_binary(message)
            side.protocol.send_close(1000)
            await side.flush()
            written.set()
            await side.read_frame()  # the client's Close echo

        async with serving(serve) as options, runtime.open_transport(options) as transport:
            await reading_stopped(transport)
            # Nothing taken yet: had the client kept reading into memory, the write would be over.
            assert not written.is_set()
            received = await receive_all(transport)
            assert transport.closing_handshake_done
            return received

    assert runtime.run(main) == messages


def test_a_pong_answers_its_ping_and_the_earlier_ones(runtime: Runtime) -> None:
    async def serve(side: ServerSide) -> None:
        first = await side.read_frame(answer=False)
        second = await side.read_frame(answer=False)
        assert (first.opcode, second.opcode) == (Opcode.PING, Opcode.PING)
        side.protocol.data_to_send()  # the protocol's pongs to both: only the last one goes
        side.protocol.send_pong(second.data)
        side.protocol.send_binary(b"\x01after")
        await side.flush()
        await anyio.sleep_forever()

    async def main() -> None:
        async with serving(serve) as options, runtime.open_transport(options) as transport:
            answered: list[int] = []

            async def ping(number: int) -> None:
                await transport.ping()
                answered.append(number)

            with anyio.fail_after(10):
                async with anyio.create_task_group() as group:
                    group.start_soon(ping, 1)
                    await anyio.wait_all_tasks_blocked()
                    group.start_soon(ping, 2)
                    await anyio.wait_all_tasks_blocked()
                    assert await transport.receive() == b"\x01after"
            assert sorted(answered) == [1, 2]

    runtime.run(main)


@pytest.mark.parametrize("with_the_response", [False, True])
def test_a_server_ping_is_answered_while_receiving(
    runtime: Runtime, with_the_response: bool
) -> None:
    """Also a ping in the same read as the upgrade's response (answered when it is parsed)."""

    def ping(protocol: ServerProtocol) -> None:
        protocol.send_ping(b"are you there")

    async def serve(side: ServerSide) -> None:
        if not with_the_response:
            ping(side.protocol)
            await side.flush()
        pong = await side.read_frame()
        assert (pong.opcode, pong.data) == (Opcode.PONG, b"are you there")
        side.protocol.send_binary(b"\x01yes")
        side.protocol.send_close(1000)
        await side.flush()
        await side.read_frame()

    async def main() -> list[bytes | str]:
        async with (
            serving(serve, ping if with_the_response else None) as options,
            runtime.open_transport(options) as transport,
        ):
            return await receive_all(transport)

    assert runtime.run(main) == [b"\x01yes"]


def test_invalid_utf8_in_a_text_message_ends_the_connection_uncleanly(runtime: Runtime) -> None:
    async def serve(side: ServerSide) -> None:
        side.protocol.send_text(b"\xff\xfe")
        await side.flush()
        close = await side.read_frame()
        assert close.opcode is Opcode.CLOSE
        assert close.data[:2] == (1007).to_bytes(2, "big")

    async def main() -> None:
        async with serving(serve) as options, runtime.open_transport(options) as transport:
            with anyio.fail_after(10), pytest.raises(TransportClosed) as closed:
                await transport.receive()
            assert not closed.value.clean
            assert closed.value.reason == "the server sent invalid UTF-8"

    runtime.run(main)


@pytest.mark.parametrize("with_the_response", [False, True])
def test_a_message_over_the_limit_is_refused_with_1009_and_named(
    runtime: Runtime, with_the_response: bool
) -> None:
    """Also when the message comes in the same read as the upgrade's response: the 1009 Close
    the parser queued then must still go out (the server waits for it)."""

    def too_big(protocol: ServerProtocol) -> None:
        protocol.send_binary(b"\x01" + b"x" * 5000)

    async def serve(side: ServerSide) -> None:
        if not with_the_response:
            too_big(side.protocol)
            await side.flush()
        close = await side.read_frame()
        assert close.data[:2] == (1009).to_bytes(2, "big")

    async def main() -> None:
        async with serving(serve, too_big if with_the_response else None) as options:
            small = attrs.evolve(options, max_message_bytes=4096)
            async with runtime.open_transport(small) as transport:
                with anyio.fail_after(10), pytest.raises(TransportClosed) as closed:
                    await transport.receive()
        assert not closed.value.clean
        assert closed.value.reason is not None
        assert "4096 bytes message limit" in closed.value.reason

    runtime.run(main)


def test_a_cancelled_receive_loses_no_message_and_ping_fails_once_closed(
    runtime: Runtime,
) -> None:
    async def serve(side: ServerSide) -> None:
        await side.read_frame()  # the client says when to send (a text frame)
        side.protocol.send_binary(b"\x01kept")
        side.protocol.send_close(1000)
        await side.flush()
        await side.read_frame()

    async def main() -> None:
        async with serving(serve) as options, runtime.open_transport(options) as transport:
            async with anyio.create_task_group() as group:
                group.start_soon(transport.receive)
                await anyio.wait_all_tasks_blocked()
                group.cancel_scope.cancel()  # nothing has come: cancelled while reading
            await transport.send("go")
            assert await receive_all(transport) == [b"\x01kept"]
            with pytest.raises(TransportClosed):
                await transport.ping()
            with pytest.raises(TransportClosed):
                await transport.send(b"\x00late")

    runtime.run(main)


async def _the_end(transport: Transport) -> TransportClosed:
    """How ``transport`` ends: what its receive raises after the messages still to come."""
    while True:
        try:
            await transport.receive()
        except TransportClosed as ended:
            return ended


def test_closing_a_connection_the_server_reset_raises_nothing_and_ends_it(
    runtime: Runtime,
) -> None:
    # Seen on a busy 1.37 cluster: the server dropped the exec connection while the reader was
    # behind; the session then ended and leaving tried the closing handshake, whose Close frame
    # could not be written. That is "nothing to wait for", not an error escaping the exit.
    def serve_and_reset(listener: socket.socket) -> None:
        accepted, _ = listener.accept()
        with accepted:
            protocol = ServerProtocol(subprotocols=[V5])  # type: ignore[list-item]
            request: Request | None = None
            while request is None:
                protocol.receive_data(accepted.recv(65536))
                events = protocol.events_received()
                request = next((e for e in events if isinstance(e, Request)), None)
            protocol.send_response(protocol.accept(request))
            protocol.send_binary(b"\x01partial")
            accepted.sendall(b"".join(protocol.data_to_send()))
            # Linger 0: closing sends a TCP reset, and no Close frame goes out.
            accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01" + b"\x00" * 7)

    async def main() -> None:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            options = loopback_options(listener.getsockname()[1])
            async with anyio.create_task_group() as group:
                reset = anyio.Event()

                async def server() -> None:
                    await anyio.to_thread.run_sync(serve_and_reset, listener)
                    reset.set()

                group.start_soon(server)
                async with runtime.open_transport(options) as transport:
                    await reset.wait()  # nothing read since the upgrade: the reader was behind
                    # trio sees the reset as it writes the Close (False: nothing to wait for);
                    # asyncio's write hands the frame to its loop, which finds the reset later.
                    await transport.aclose()
                    ended = await _the_end(transport)
                    assert not ended.clean
                    transport.abort()

    runtime.run(main)


def test_a_refused_upgrade_without_a_length_is_reported_at_the_close(runtime: Runtime) -> None:
    async def main() -> None:
        async with loopback_listener() as (listener, port):

            async def refuse() -> None:
                stream = await listener.accept()
                async with stream:
                    await stream.receive(65536)
                    await stream.send(b"HTTP/1.1 403 Forbidden\r\n\r\n")

            options = loopback_options(port, scheme="http")
            async with anyio.create_task_group() as group:
                group.start_soon(refuse)
                with pytest.raises(ExecError) as refused, anyio.fail_after(5):
                    async with runtime.open_transport(options):
                        pass
        assert refused.value.http_status == 403

    runtime.run(main)


def test_an_unanswered_upgrade_fails_at_the_connect_deadline_and_says_so(
    runtime: Runtime,
) -> None:
    # The connect and the upgrade's answer share ``connect_timeout``: a server that accepts
    # and never answers fails the opening with the upgrade named, and the client drops its
    # socket (the server reads the end of the stream).
    async def main() -> None:
        async with loopback_listener() as (listener, port):
            client_gone = anyio.Event()

            async def never_answer() -> None:
                stream = await listener.accept()
                async with stream:
                    try:
                        while True:
                            await stream.receive(65536)  # the request, then the end
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        client_gone.set()

            options = loopback_options(port, connect_timeout=0.2)
            async with anyio.create_task_group() as group:
                group.start_soon(never_answer)
                with pytest.raises(ExecError) as failed:
                    async with runtime.open_transport(options):
                        pass
                with anyio.fail_after(5):
                    await client_gone.wait()
        assert failed.value.code.value == "EXEC_FAILED"
        assert failed.value.message == "The exec upgrade failed: no answer within 0.2 s"

    runtime.run(main)
