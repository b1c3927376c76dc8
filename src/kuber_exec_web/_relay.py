"""Relaying a page to the replica that holds its shared terminal.

Behind a load balancer a page that reconnects may land on another replica than the one its
session runs in. The session's id names its replica, signed with the replicas' shared
``join_secret`` (``SessionHost.holder_of``); the replica the page reached opens a WebSocket to
that one, offering the page's own subprotocols (its bearer token, its viewer key or join token)
and passing every message through unchanged both ways, so that the holder authorizes and serves
it as if the page had come straight to it. When the holder cannot be reached (it was killed),
the page is told, with a close code it does not retry on.

The client is ``websockets``' sans-IO protocol on an anyio TCP stream: it runs on asyncio and
trio alike.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

import anyio
import anyio.abc
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

__all__ = ["RelayFailed", "relay_connect"]

logger = logging.getLogger("kuber_exec_web")

_CONNECT_TIMEOUT = 5.0
_MAX_MESSAGE = 16 * 1024 * 1024


class RelayFailed(Exception):
    """The holder replica could not be reached, or refused the upgrade."""


class RelayConnection:
    """One WebSocket to the holder replica: whole messages in and out."""

    def __init__(self, stream: anyio.abc.SocketStream, protocol: ClientProtocol) -> None:
        self._stream = stream
        self._protocol = protocol
        self._lock = anyio.Lock()
        self._pending: list[str | bytes] = []
        self.close_code: int | None = None
        self.close_reason = ""

    async def _flush(self) -> None:
        data = b"".join(self._protocol.data_to_send())
        if data:
            await self._stream.send(data)

    async def send(self, message: str | bytes) -> None:
        """Pass one message on. Once the holder's connection has ended (:meth:`receive`
        returned ``None``), the message is dropped: the page is told of the end from there."""
        async with self._lock:
            # The end may have been read while this task waited for the lock (a killed holder:
            # the page's ack crossed the EOF); the protocol would refuse the frame.
            if self._protocol.state is not State.OPEN:
                return
            if isinstance(message, str):
                self._protocol.send_text(message.encode("utf-8"))
            else:
                self._protocol.send_binary(message)
            await self._flush()

    async def receive(self) -> str | bytes | None:
        """The next whole message; ``None`` once the holder closed (``close_code``)."""
        fragments: list[bytes] = []
        text = False
        while True:
            for event in self._protocol.events_received():
                if not isinstance(event, Frame):
                    continue
                if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                    text = event.opcode is Opcode.TEXT
                    fragments = [bytes(event.data)]
                elif event.opcode is Opcode.CONT:
                    fragments.append(bytes(event.data))
                else:
                    continue  # Ping, Pong, Close: the protocol answers them; a Close is read below.
                if event.fin:
                    whole = b"".join(fragments)
                    self._pending.append(whole.decode("utf-8") if text else whole)
            await self._flush_locked()
            if self._pending:
                return self._pending.pop(0)
            # The holder's Close may have come with the handshake's answer (relay_connect).
            close = self._protocol.close_rcvd
            if close is not None:
                self.close_code, self.close_reason = close.code, close.reason
                return None
            if self.close_code is not None:
                return None
            try:
                data = await self._stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                self._protocol.receive_eof()
                self.close_code = 1006
                return None
            self._protocol.receive_data(data)

    async def _flush_locked(self) -> None:
        async with self._lock:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._flush()

    async def aclose(self, *, clean: bool) -> None:
        """Close: with a Close frame when the page closed on purpose (``clean``: the holder
        then lets its viewer leave), else by dropping the connection as the page's was
        dropped (the holder keeps its viewer for a return)."""
        if clean:
            with contextlib.suppress(Exception):
                async with self._lock:
                    self._protocol.send_close(1000)
                    await self._flush()
        await anyio.aclose_forcefully(self._stream)


async def relay_connect(
    holder: str, path_and_query: str, subprotocols: Sequence[str]
) -> RelayConnection:
    """Open the WebSocket to ``holder`` (``host:port``) at ``path_and_query``; raises
    :class:`RelayFailed` when it cannot be reached or refuses."""
    host, _, port = holder.rpartition(":")
    uri = parse_uri(f"ws://{holder}{path_and_query}")
    protocol = ClientProtocol(
        uri,
        # None, not []: an empty list sends an empty header, which a server refuses.
        subprotocols=[Subprotocol(s) for s in subprotocols] or None,
        max_size=_MAX_MESSAGE,
    )
    request = protocol.connect()
    # The holder checks the Origin against its own Host: the relay is its own origin.
    request.headers["Origin"] = f"http://{holder}"
    try:
        with anyio.fail_after(_CONNECT_TIMEOUT):
            stream = await anyio.connect_tcp(host.strip("[]"), int(port))
            protocol.send_request(request)
            await stream.send(b"".join(protocol.data_to_send()))
            while True:
                events = protocol.events_received()
                response = next((e for e in events if isinstance(e, Response)), None)
                if response is not None:
                    break
                data = await stream.receive()
                protocol.receive_data(data)
    except (
        OSError,
        TimeoutError,
        anyio.EndOfStream,
        anyio.BrokenResourceError,
        ValueError,
    ) as error:
        raise RelayFailed(f"the replica holding this session cannot be reached ({error})") from None
    if protocol.handshake_exc is not None:
        await anyio.aclose_forcefully(stream)
        raise RelayFailed("the replica holding this session refused the connection")
    connection = RelayConnection(stream, protocol)
    # Frames that came with the handshake's answer.
    for event in events:
        if isinstance(event, Frame) and event.opcode in (Opcode.TEXT, Opcode.BINARY) and event.fin:
            data = bytes(event.data)
            connection._pending.append(data.decode() if event.opcode is Opcode.TEXT else data)
    return connection
