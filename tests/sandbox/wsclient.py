"""A deliberately low-level WebSocket client for protocol tests: wsproto over a trio socket.

It can do what well-behaved libraries refuse to: offer no subprotocol, fragment a message, send an
oversized frame, send a text frame on a binary subprotocol, vanish without a Close.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import h11
import trio
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, Pong, TextMessage
from wsproto.utilities import generate_nonce

from kuber_exec_sandbox import Sandbox


@attrs.define
class Rejected:
    """A non-101 answer to the upgrade."""

    status: int
    headers: dict[str, str]
    body: bytes


@attrs.define
class Closed:
    """The server's Close frame (``code`` 1006: the connection dropped without one)."""

    code: int
    reason: str


class RawWebSocket:
    """An accepted exec WebSocket."""

    def __init__(self, stream: trio.SocketStream, trailing: bytes, subprotocol: str | None) -> None:
        self.stream = stream
        self.subprotocol = subprotocol
        self._ws = Connection(ConnectionType.CLIENT)
        self._frame: list[bytes | str] = []
        if trailing:
            self._ws.receive_data(trailing)

    async def send(self, message: bytes | str, *, finished: bool = True) -> None:
        event = (
            TextMessage(message, message_finished=finished)
            if isinstance(message, str)
            else BytesMessage(message, message_finished=finished)
        )
        await self.stream.send_all(self._ws.send(event))

    async def ping(self, payload: bytes) -> bytes:
        """Send a Ping and return the payload of the Pong (messages meanwhile are not expected)."""
        await self.stream.send_all(self._ws.send(Ping(payload=payload)))
        while True:
            for event in self._ws.events():
                if isinstance(event, Pong):
                    return bytes(event.payload)
                raise AssertionError(f"unexpected {event!r} while waiting for a pong")
            self._ws.receive_data(bytes(await self.stream.receive_some(65536)))

    async def receive(self) -> bytes | str | Closed:
        """The next whole server message, or the Close."""
        while True:
            for event in self._ws.events():
                if isinstance(event, Message):
                    self._frame.append(event.data)
                    if event.message_finished:
                        parts, self._frame = self._frame, []
                        if isinstance(event, TextMessage):
                            return "".join(str(p) for p in parts)
                        return b"".join(bytes(p) for p in parts if isinstance(p, bytes))
                elif isinstance(event, CloseConnection):
                    return Closed(event.code, event.reason or "")
                elif isinstance(event, Ping):
                    await self.stream.send_all(self._ws.send(event.response()))
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            self._ws.receive_data(bytes(data) or None)

    async def receive_all(self) -> tuple[list[bytes | str], Closed]:
        """Every message up to the Close."""
        messages: list[bytes | str] = []
        while True:
            message = await self.receive()
            if isinstance(message, Closed):
                await self.stream.aclose()
                return messages, message
            messages.append(message)

    async def close(self, code: int = 1000) -> None:
        await self.stream.send_all(self._ws.send(CloseConnection(code=code)))

    async def vanish(self) -> None:
        """Drop the TCP connection without a Close."""
        await self.stream.aclose()


async def connect(
    sandbox: Sandbox,
    target: str,
    subprotocols: Sequence[str] | None,
    *,
    extra_headers: Sequence[tuple[str, str]] = (),
    method: str = "GET",
) -> RawWebSocket | Rejected:
    """Upgrade ``target`` (path and query); ``subprotocols=None`` sends no protocol header."""
    host, port = sandbox.url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    client = h11.Connection(h11.CLIENT)
    headers: list[tuple[str, str]] = [
        ("Host", f"{host}:{port}"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", generate_nonce().decode("ascii")),
        ("Sec-WebSocket-Version", "13"),
        *extra_headers,
    ]
    if subprotocols is not None:
        headers.append(("Sec-WebSocket-Protocol", ", ".join(subprotocols)))
    await stream.send_all(client.send(h11.Request(method=method, target=target, headers=headers)))
    await stream.send_all(client.send(h11.EndOfMessage()))
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(bytes(await stream.receive_some(65536)))
            continue
        break
    if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
        answered = dict((k.decode().lower(), v.decode()) for k, v in event.headers)
        protocol = answered.get("sec-websocket-protocol")
        return RawWebSocket(stream, bytes(client.trailing_data[0]), protocol)
    assert isinstance(event, h11.Response), event
    response_headers = {k.decode().lower(): v.decode() for k, v in event.headers}
    body = b""
    while True:
        part = client.next_event()
        if part is h11.NEED_DATA:
            client.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(part, h11.Data):
            body += part.data
        else:
            break
    await stream.aclose()
    return Rejected(event.status_code, response_headers, body)
