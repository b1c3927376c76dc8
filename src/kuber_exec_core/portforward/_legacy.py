"""The legacy port-forward channels (every Kubernetes since 2016; docs/port-forward.md).

``GET .../portforward?ports=8080&ports=9090`` with subprotocol ``v4.channel.k8s.io``: port i of
the query gets data channel 2i and error channel 2i+1. **The server's first message on each
channel is the port, 2 bytes little-endian**; after that, a message is ``[channel][payload]``
both ways (the client writes only on data channels). One WebSocket carries one TCP connection
per port and there is no half-close: the connection ends when the WebSocket does, so a client
opens one WebSocket per local connection.

:class:`LegacyClient` and :class:`LegacyServer` are the two ends' codecs, fed whole messages.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from ._errors import PortForwardProtocolError
from ._tunnel import MAX_ERROR_MESSAGE_BYTES, check_port

__all__ = [
    "LEGACY_SUBPROTOCOL",
    "MAX_LEGACY_PAYLOAD_BYTES",
    "LegacyClient",
    "LegacyData",
    "LegacyServer",
    "legacy_query",
]

LEGACY_SUBPROTOCOL = "v4.channel.k8s.io"

#: The most payload one client message carries (as the exec stdin path: client-go's 32 KiB).
MAX_LEGACY_PAYLOAD_BYTES = 32 * 1024

_PORT = struct.Struct("<H")


def legacy_query(ports: Sequence[int]) -> list[tuple[str, str]]:
    """The query of a legacy port-forward upgrade for ``ports`` (checked, in order)."""
    if not ports:
        raise ValueError("a legacy port-forward needs at least one port")
    return [("ports", str(check_port(port))) for port in ports]


@attrs.frozen(repr=False)
class LegacyData:
    """Bytes from the pod's port number ``index`` (its place in the query)."""

    index: int
    data: bytes

    def __repr__(self) -> str:
        return f"LegacyData(index={self.index}, {len(self.data)} bytes)"


class LegacyClient:
    """The client end of one legacy port-forward WebSocket for ``ports``.

    ``receive_message(message)`` returns the pod's bytes as :class:`LegacyData` (``None`` for
    the port prefixes and error text); ``errors()`` is what the server wrote on each port's
    error channel (its failure, read when the WebSocket ends); ``encode(index, data)`` frames
    client bytes.

    Raises (from ``receive_message``):
        PortForwardProtocolError: a text message, a channel of no requested port, a first
            message that is not the channel's port, or data before it.
    """

    def __init__(self, ports: Sequence[int]) -> None:
        legacy_query(ports)
        self.ports = tuple(ports)
        self._prefixed = [False] * (2 * len(ports))
        self._errors = [bytearray() for _ in ports]

    def receive_message(self, message: bytes | str) -> LegacyData | None:
        if not isinstance(message, bytes | bytearray | memoryview):
            raise PortForwardProtocolError("a text message on a binary port-forward")
        if not message:
            return None
        channel, payload = message[0], bytes(message[1:])
        if channel >= len(self._prefixed):
            raise PortForwardProtocolError(f"a message on channel {channel}, of no port")
        index = channel // 2
        if not self._prefixed[channel]:
            if len(payload) < 2 or _PORT.unpack_from(payload)[0] != self.ports[index]:
                raise PortForwardProtocolError(
                    f"channel {channel} did not start with port {self.ports[index]}"
                )
            self._prefixed[channel] = True
            payload = payload[2:]
            if not payload:
                return None
        if channel % 2:
            room = MAX_ERROR_MESSAGE_BYTES - len(self._errors[index])
            self._errors[index] += payload[: max(0, room)]
            return None
        return LegacyData(index, payload)

    def errors(self) -> list[str | None]:
        """Each port's error text, or ``None`` when its error channel stayed empty."""
        return [bytes(text).decode("utf-8", "replace") or None for text in self._errors]

    def encode(self, index: int, data: bytes) -> list[bytes]:
        """``data`` for port number ``index`` as messages of at most 32 KiB of payload."""
        if not 0 <= index < len(self.ports):
            raise ValueError(f"no port number {index}")
        channel = bytes((2 * index,))
        return [
            channel + data[start : start + MAX_LEGACY_PAYLOAD_BYTES]
            for start in range(0, len(data), MAX_LEGACY_PAYLOAD_BYTES)
        ]


class LegacyServer:
    """The server end: ``opening_messages()`` first, then ``receive_message`` for the client's
    bytes (``(index, data)``; ``None`` for what is ignored) and ``encode``/``error`` to answer."""

    def __init__(self, ports: Sequence[int]) -> None:
        legacy_query(ports)
        self.ports = tuple(ports)

    def opening_messages(self) -> list[bytes]:
        return [
            bytes((channel,)) + _PORT.pack(port)
            for index, port in enumerate(self.ports)
            for channel in (2 * index, 2 * index + 1)
        ]

    def receive_message(self, message: bytes | str) -> tuple[int, bytes] | None:
        """The client's bytes for port number ``index``; writes on an error channel, empty
        messages and unknown channels are ignored (as the kubelet does).

        Raises:
            PortForwardProtocolError: a text message.
        """
        if not isinstance(message, bytes | bytearray | memoryview):
            raise PortForwardProtocolError("a text message on a binary port-forward")
        if not message or message[0] % 2 or message[0] // 2 >= len(self.ports):
            return None
        return message[0] // 2, bytes(message[1:])

    def encode(self, index: int, data: bytes) -> bytes:
        return bytes((2 * index,)) + data

    def error(self, index: int, message: str) -> bytes:
        return bytes((2 * index + 1,)) + message.encode("utf-8")
