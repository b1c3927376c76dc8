"""Channel framing shared by both directions (docs/protocol.md).

One WebSocket message is ``[channel][payload]``. Binary subprotocols put the raw channel byte first
and send binary frames; base64 ones put the ASCII digit ``'0'+channel`` first and the payload as
padded standard base64, in text frames. Messages are never fragmented and never reassembled.
"""

from __future__ import annotations

import base64
import binascii
import enum

from ._errors import ExecProtocolError
from ._subprotocols import Subprotocol

__all__ = [
    "CLOSE_STDIN_PAYLOAD",
    "MAX_CLIENT_PAYLOAD_BYTES",
    "Channel",
    "Message",
    "decode_message",
    "encode_message",
]

#: A WebSocket message as the transport hands it over: bytes for binary frames, str for text.
Message = bytes | str

#: client-go's stdin buffer: client messages carry at most 32 KiB of payload (+1 channel byte).
MAX_CLIENT_PAYLOAD_BYTES = 32 * 1024


class Channel(enum.IntEnum):
    """Channel numbers of the remote-command protocol."""

    STDIN = 0
    STDOUT = 1
    STDERR = 2
    ERROR = 3
    RESIZE = 4
    #: v5 only: ``[255, 0]`` closes stdin (docs/protocol.md).
    CLOSE = 255


#: The payload of v5's stdin close, ``[255, 0]``: "close channel 0". Any other channel-255 message
#: tears the session down on a real server.
CLOSE_STDIN_PAYLOAD = bytes((Channel.STDIN,))


def encode_message(subprotocol: Subprotocol, channel: int, payload: bytes) -> Message:
    """Frame ``payload`` for ``channel`` in ``subprotocol``'s encoding (one whole message)."""
    if subprotocol.is_base64:
        if not 0 <= channel <= 9:
            raise ValueError(f"channel {channel} cannot be written in a base64 subprotocol")
        return chr(0x30 + channel) + base64.b64encode(payload).decode("ascii")
    return bytes((channel,)) + payload


def decode_message(subprotocol: Subprotocol, message: Message) -> tuple[int, bytes] | None:
    """Split one received message into ``(channel, payload)``; ``None`` for an empty message.

    The channel is returned as sent (unknown ones are the caller's to ignore).

    Raises:
        ExecProtocolError: a text frame on a binary subprotocol (or the reverse), a base64
            channel that is not an ASCII digit, or a payload that is not padded base64.
    """
    if subprotocol.is_base64:
        if not isinstance(message, str):
            raise ExecProtocolError(f"a binary frame arrived on {subprotocol.value}")
        if not message:
            return None
        digit = ord(message[0]) - 0x30
        if not 0 <= digit <= 9:
            raise ExecProtocolError("a base64 message did not start with a channel digit")
        try:
            payload = base64.b64decode(message[1:].encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise ExecProtocolError("a base64 message had a malformed payload") from None
        return digit, payload
    if not isinstance(message, bytes | bytearray | memoryview):
        raise ExecProtocolError(f"a text frame arrived on {subprotocol.value}")
    if not message:
        return None
    view = memoryview(message)
    return view[0], bytes(view[1:])
