"""The tunnel connection's keepalive and ends (``kuber_exec_anyio._portforward._tunnel``), over
an in-memory transport whose far end is the core's ``TunnelServer`` (or nothing at all)."""

from __future__ import annotations

import contextlib

import anyio
import anyio.abc
import pytest

from kuber_exec_anyio._portforward._tunnel import TunnelConnection
from kuber_exec_anyio.transport import TransportClosed
from kuber_exec_core import NEED_DATA, ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_core.portforward import ConnectionRequested, TunnelServer

_PING = b"\x80\x03\x00\x06"


class MemoryTransport:
    """A WebSocket whose server is the test: what we send is in ``sent``, what the server says
    is pushed with ``deliver``; ``hang_up`` ends it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self._to_client, self._from_server = anyio.create_memory_object_stream[bytes | None](100)
        self.arrived = anyio.Event()

    @property
    def subprotocol(self) -> str | None:
        return "SPDY/3.1+portforward.k8s.io"

    async def send(self, message: Message) -> None:
        assert isinstance(message, bytes)
        self.sent.append(message)
        self.arrived.set()
        self.arrived = anyio.Event()

    async def deliver(self, data: bytes | None) -> None:
        await self._to_client.send(data)

    async def receive(self) -> Message:
        data = await self._from_server.receive()
        if data is None:
            raise TransportClosed(clean=True)
        return data

    async def ping(self) -> None:
        raise AssertionError("the tunnel pings in SPDY, not in WebSocket")

    async def aclose(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def close(self) -> None:
        self._to_client.close()
        self._from_server.close()


pytestmark = pytest.mark.anyio


async def test_a_peer_that_answers_no_ping_ends_the_tunnel_and_its_connections(
    anyio_backend: str,
) -> None:
    transport = MemoryTransport()
    server = TunnelServer()
    tunnel = TunnelConnection(transport, pod="p", ping_interval=0.05, pong_timeout=0.2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(tunnel.run)

            async def open_one() -> None:
                # Ready once the server accepts, or failed with the tunnel: either is fine here.
                with contextlib.suppress(ExecError):
                    await (await tunnel.open(80)).aclose()

            # The server accepts the streams (so the connection is ready), then goes silent.
            tasks.start_soon(open_one)
            while not any(b"\x80\x03\x00\x01" in m for m in transport.sent):  # SYN_STREAM
                await transport.arrived.wait()
            for message in transport.sent:
                server.receive_data(message)
            await transport.deliver(server.data_to_send())
        assert tunnel.error is not None
        assert tunnel.error.code is ExecErrorCode.FAILED
        assert "did not answer a ping within 0.2 s" in tunnel.error.message
    assert any(m.startswith(_PING) for m in transport.sent)
    transport.close()


async def test_a_peer_that_answers_pings_keeps_the_tunnel(anyio_backend: str) -> None:
    transport = MemoryTransport()
    server = TunnelServer()
    tunnel = TunnelConnection(transport, pod="p", ping_interval=0.02, pong_timeout=5)
    pings = 0
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(tunnel.run)
            seen = 0
            while pings < 5:
                await transport.arrived.wait()
                for message in transport.sent[seen:]:
                    pings += message.startswith(_PING)
                    server.receive_data(message)
                seen = len(transport.sent)
                await transport.deliver(server.data_to_send())
            assert tunnel.error is None
            await transport.deliver(None)  # the server hangs up
        assert tunnel.error is not None
        assert tunnel.error.message == "the port-forward tunnel ended: the server closed it"
    transport.close()


async def test_the_server_closing_fails_open_connections_with_why(anyio_backend: str) -> None:
    transport = MemoryTransport()
    server = TunnelServer()
    tunnel = TunnelConnection(transport, pod="p", ping_interval=None)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(tunnel.run)
            streams = []

            async def open_one() -> None:
                streams.append(await tunnel.open(80))

            tasks.start_soon(open_one)
            seen = 0
            while not streams:
                await transport.arrived.wait()
                for message in transport.sent[seen:]:
                    server.receive_data(message)
                seen = len(transport.sent)
                while (event := server.next_event()) is not NEED_DATA:
                    assert not isinstance(event, ConnectionRequested) or event.port == 80
                await transport.deliver(server.data_to_send())
            await transport.deliver(b"\x00\x00\x00\x63\x00\x00\x00\x01x")  # DATA, stream 99
            with pytest.raises(ExecError) as caught:
                await streams[0].receive()
            assert "stream 99, which was never opened" in caught.value.message
            await streams[0].aclose()
    transport.close()
