"""The trio binding's own WebSocket transport against a real loopback server, frame by frame.

The server is ``websockets``' sans-IO ``ServerProtocol`` on a trio TCP listener on 127.0.0.1, so
each test chooses exactly what goes on the wire: fragmented messages, text, pings, pongs, how the
bytes are split across TCP writes, and when the server closes. The conformance suite runs the
transport through whole exec sessions; these are the frame-level rules under it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from kuber_exec_anyio.transport import TransportClosed, TransportOptions
from kuber_exec_core import ExecError
from kuber_exec_trio._transport import TrioWebSocketTransport, open_trio_transport

V5 = "v5.channel.k8s.io"

#: What a test's server does once the upgrade is accepted.
Serve = Callable[["ServerSide"], Awaitable[None]]


class ServerSide:
    """The accepted connection, seen from the server: frames out, frames in, raw writes."""

    def __init__(self, stream: trio.SocketStream, protocol: ServerProtocol) -> None:
        self.stream = stream
        self.protocol = protocol
        self.received: list[Frame] = []

    async def flush(self, pieces: list[int] | None = None) -> None:
        """Write what the protocol queued, split at the given sizes (the rest in one write)."""
        data = b"".join(self.protocol.data_to_send())
        for size in pieces or []:
            if not data:
                break
            await self.stream.send_all(data[:size])
            data = data[size:]
        if data:
            await self.stream.send_all(data)

    async def read_frame(self, *, answer: bool = True) -> Frame:
        """The next frame from the client; ``answer``: write what the protocol replies (a
        pong to a ping) at once."""
        while not self.received:
            data = await self.stream.receive_some(65536)
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
async def serving(
    serve: Serve, with_response: Callable[[ServerProtocol], None] | None = None
) -> AsyncIterator[TransportOptions]:
    """A one-connection WebSocket server on loopback running ``serve`` after the upgrade;
    ``with_response`` queues frames that go out in the same write as the 101 response."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def accept_one() -> None:
        stream = await listeners[0].accept()
        async with stream:
            protocol = ServerProtocol(subprotocols=[V5])  # type: ignore[list-item]
            request: Request | None = None
            while request is None:
                protocol.receive_data(await stream.receive_some(65536))
                request = next(
                    (e for e in protocol.events_received() if isinstance(e, Request)), None
                )
            protocol.send_response(protocol.accept(request))
            if with_response is not None:
                with_response(protocol)
            side = ServerSide(stream, protocol)
            await side.flush()
            await serve(side)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept_one)
        try:
            yield TransportOptions(
                url=f"ws://127.0.0.1:{port}/exec",
                subprotocols=(V5,),
                ssl_context=None,
                headers=(),
                connect_timeout=10,
            )
        finally:
            nursery.cancel_scope.cancel()
            await listeners[0].aclose()


async def receive_all(transport: TrioWebSocketTransport) -> list[bytes | str]:
    messages: list[bytes | str] = []
    with trio.fail_after(10):
        try:
            while True:
                messages.append(await transport.receive())
        except TransportClosed:
            return messages


MESSAGES = st.lists(st.binary(min_size=0, max_size=3000) | st.text(max_size=300), max_size=8)


@given(
    messages=MESSAGES,
    fragment_sizes=st.lists(st.integers(1, 700), max_size=4),
    pieces=st.lists(st.integers(1, 900), max_size=12),
)
def test_messages_arrive_whole_in_order_however_framed_and_split(
    messages: list[bytes | str], fragment_sizes: list[int], pieces: list[int]
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
        async with serving(serve) as options, open_trio_transport(options) as transport:
            received = await receive_all(transport)
            assert transport.closing_handshake_done
            return received

    assert trio.run(main) == messages


def test_a_pong_answers_its_ping_and_the_earlier_ones() -> None:
    async def serve(side: ServerSide) -> None:
        first = await side.read_frame(answer=False)
        second = await side.read_frame(answer=False)
        assert (first.opcode, second.opcode) == (Opcode.PING, Opcode.PING)
        side.protocol.data_to_send()  # the protocol's pongs to both: only the last one goes
        side.protocol.send_pong(second.data)
        side.protocol.send_binary(b"\x01after")
        await side.flush()
        await trio.sleep_forever()

    async def main() -> None:
        async with serving(serve) as options, open_trio_transport(options) as transport:
            answered: list[int] = []

            async def ping(number: int) -> None:
                await transport.ping()
                answered.append(number)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ping, 1)
                    await trio.testing.wait_all_tasks_blocked()
                    nursery.start_soon(ping, 2)
                    await trio.testing.wait_all_tasks_blocked()
                    assert await transport.receive() == b"\x01after"
            assert sorted(answered) == [1, 2]

    trio.run(main)


@pytest.mark.parametrize("with_the_response", [False, True])
def test_a_server_ping_is_answered_while_receiving(with_the_response: bool) -> None:
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
            open_trio_transport(options) as transport,
        ):
            return await receive_all(transport)

    assert trio.run(main) == [b"\x01yes"]


def test_invalid_utf8_in_a_text_message_ends_the_connection_uncleanly() -> None:
    async def serve(side: ServerSide) -> None:
        side.protocol.send_text(b"\xff\xfe")
        await side.flush()
        close = await side.read_frame()
        assert close.opcode is Opcode.CLOSE
        assert close.data[:2] == (1007).to_bytes(2, "big")

    async def main() -> None:
        async with serving(serve) as options, open_trio_transport(options) as transport:
            with trio.fail_after(10), pytest.raises(TransportClosed) as closed:
                await transport.receive()
            assert not closed.value.clean
            assert closed.value.reason == "the server sent invalid UTF-8"

    trio.run(main)


@pytest.mark.parametrize("with_the_response", [False, True])
def test_a_message_over_the_limit_is_refused_with_1009_and_named(with_the_response: bool) -> None:
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
            small = TransportOptions(
                url=options.url,
                subprotocols=options.subprotocols,
                ssl_context=None,
                headers=(),
                connect_timeout=10,
                max_message_bytes=4096,
            )
            async with open_trio_transport(small) as transport:
                with trio.fail_after(10), pytest.raises(TransportClosed) as closed:
                    await transport.receive()
        assert not closed.value.clean
        assert closed.value.reason is not None
        assert "4096 bytes message limit" in closed.value.reason

    trio.run(main)


def test_a_cancelled_receive_loses_no_message_and_ping_fails_once_closed() -> None:
    async def serve(side: ServerSide) -> None:
        await side.read_frame()  # the client says when to send (a text frame)
        side.protocol.send_binary(b"\x01kept")
        side.protocol.send_close(1000)
        await side.flush()
        await side.read_frame()

    async def main() -> None:
        async with serving(serve) as options, open_trio_transport(options) as transport:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(transport.receive)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()  # nothing has come: cancelled while reading
            await transport.send("go")
            assert await receive_all(transport) == [b"\x01kept"]
            with pytest.raises(TransportClosed):
                await transport.ping()
            with pytest.raises(TransportClosed):
                await transport.send(b"\x00late")

    trio.run(main)


def test_a_refused_upgrade_without_a_length_is_reported_at_the_close() -> None:
    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]

        async def refuse() -> None:
            stream = await listeners[0].accept()
            async with stream:
                await stream.receive_some(65536)
                await stream.send_all(b"HTTP/1.1 403 Forbidden\r\n\r\n")

        options = TransportOptions(
            url=f"http://127.0.0.1:{port}/exec",
            subprotocols=(V5,),
            ssl_context=None,
            headers=(),
            connect_timeout=10,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse)
            with pytest.raises(ExecError) as refused, trio.fail_after(5):
                async with open_trio_transport(options):
                    pass
            await listeners[0].aclose()
        assert refused.value.http_status == 403

    trio.run(main)
