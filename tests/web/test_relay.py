"""The relay's connection to the replica holding a session, against a real loopback holder
(websockets' sans-IO server on a TCP listener) that ends as a killed process does: the socket
closed with no Close frame."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest
from websockets.frames import CloseCode
from websockets.http11 import Request
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from kuber_exec_web import PROTOCOL
from kuber_exec_web._relay import relay_connect

pytestmark = pytest.mark.anyio

Holder = Callable[[anyio.abc.SocketStream, ServerProtocol], Awaitable[None]]


@asynccontextmanager
async def _holder(then: Holder) -> AsyncIterator[str]:
    """A holder on loopback: accepts one WebSocket, sends ``b"screen"``, then runs ``then``."""

    async def serve(stream: anyio.abc.SocketStream) -> None:
        protocol = ServerProtocol(subprotocols=[Subprotocol(PROTOCOL)])
        async with stream:
            while not (requests := protocol.events_received()):
                protocol.receive_data(await stream.receive())
            request = requests[0]
            assert isinstance(request, Request)
            protocol.send_response(protocol.accept(request))
            protocol.send_binary(b"screen")
            await stream.send(b"".join(protocol.data_to_send()))
            await then(stream, protocol)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, serve)
        yield f"127.0.0.1:{port}"
        tasks.cancel_scope.cancel()


async def _killed(stream: anyio.abc.SocketStream, protocol: ServerProtocol) -> None:
    # No Close frame: the kernel closes a killed process's socket (a FIN; a reset could
    # discard the handshake's answer before the client read it).
    await stream.aclose()


async def _closed_cleanly(stream: anyio.abc.SocketStream, protocol: ServerProtocol) -> None:
    protocol.send_close(CloseCode.NORMAL_CLOSURE, "bye")
    await stream.send(b"".join(protocol.data_to_send()))
    await stream.aclose()


@pytest.mark.parametrize(
    ("then", "code", "reason"), [(_killed, 1006, ""), (_closed_cleanly, 1000, "bye")]
)
async def test_messages_after_the_holder_s_end_are_dropped_not_raised(
    then: Holder, code: int, reason: str
) -> None:
    """The page's ack may cross the holder's end: sending it then is a no-op, so the relay goes
    on to tell the page (a raise there closed the page's connection with 1000 instead)."""
    with anyio.fail_after(10):
        async with _holder(then) as address:
            upstream = await relay_connect(address, "/terminal", [PROTOCOL])
            try:
                assert await upstream.receive() == b"screen"
                assert await upstream.receive() is None
                assert (upstream.close_code, upstream.close_reason) == (code, reason)
                await upstream.send('{"type": "ack"}')
                await upstream.send(b"typed")
            finally:
                await upstream.aclose(clean=False)
