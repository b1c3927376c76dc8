"""The server side of the channel protocol, for the sandbox server and for round-trip tests.

It mirrors what apimachinery's ``wsstream`` and the kubelet's remote-command handler do
(docs/protocol.md): one empty message on the lowest writable channel right after the handshake,
output as whole messages, the Status last; client messages on channels 1–3 and on unknown channels
dropped; ``[255, 0]`` closes stdin on v5 and any other channel-255 message tears the session down.
"""

from __future__ import annotations

import json

import attrs

from ._channels import CLOSE_STDIN_PAYLOAD, Channel, Message, decode_message, encode_message
from ._errors import ExecProtocolError
from ._state import MAX_TERMINAL_DIMENSION
from ._subprotocols import Subprotocol

__all__ = [
    "MAX_CLIENT_FRAME_BYTES",
    "ClientMessage",
    "ResizeReceived",
    "ServerChannel",
    "StdinClosed",
    "StdinReceived",
]


#: The largest client frame a real server reads (x/net/websocket's ``DefaultMaxPayloadBytes``, which
#: wsstream uses): a bigger frame ends the session (docs/protocol.md).
MAX_CLIENT_FRAME_BYTES = 32 << 20


@attrs.frozen
class StdinReceived:
    """Bytes for the process's stdin (never empty: empty stdin messages are no-ops, not EOF)."""

    data: bytes


@attrs.frozen
class StdinClosed:
    """The v5 client closed stdin."""


@attrs.frozen
class ResizeReceived:
    """The client's terminal size."""

    width: int
    height: int


ClientMessage = StdinReceived | StdinClosed | ResizeReceived


class ServerChannel:
    """Encode server messages and decode client messages for one negotiated subprotocol."""

    def __init__(self, subprotocol: Subprotocol) -> None:
        self.subprotocol = subprotocol

    def initial_message(self, *, stdout: bool, stderr: bool) -> Message:
        """The empty message sent right after the handshake, on the lowest writable channel."""
        channel = Channel.STDOUT if stdout else Channel.STDERR if stderr else Channel.ERROR
        return encode_message(self.subprotocol, channel, b"")

    def output(self, channel: Channel, data: bytes) -> Message:
        """One stdout or stderr message."""
        return encode_message(self.subprotocol, channel, data)

    def status(self, status: bytes) -> Message:
        """The channel-3 message carrying a Status (or pre-v4 failure text)."""
        return encode_message(self.subprotocol, Channel.ERROR, status)

    def status_message(self, status: bytes) -> Message | None:
        """What to send on channel 3 for a finished exec whose outcome is the Status ``status``.

        v4/v5: the Status JSON itself. Pre-v4 (docs/protocol.md): nothing on success, and only the
        Status ``message`` as plain text on failure (the kubelet's v1 status writer).
        """
        if self.subprotocol.has_structured_status:
            return self.status(status)
        decoded = json.loads(status)
        if decoded.get("status") == "Success":
            return None
        return self.status(str(decoded.get("message", "")).encode("utf-8"))

    def decode_client(self, message: Message) -> ClientMessage | None:
        """One client message as an event, or ``None`` when the server drops it.

        Raises:
            ExecProtocolError: a malformed frame, a bad v5 close, or malformed resize JSON.
        """
        decoded = decode_message(self.subprotocol, message)
        if decoded is None:
            return None
        channel, payload = decoded
        if channel == Channel.STDIN:
            return StdinReceived(payload) if payload else None
        if channel == Channel.RESIZE:
            return _resize(payload)
        if channel == Channel.CLOSE and self.subprotocol.can_close_stdin:
            if payload != CLOSE_STDIN_PAYLOAD:
                raise ExecProtocolError("a v5 close message must be exactly [255, 0]")
            return StdinClosed()
        return None


def _resize(payload: bytes) -> ResizeReceived:
    try:
        size = json.loads(payload)
    except (ValueError, RecursionError):
        raise ExecProtocolError("a resize message was not JSON") from None
    if not isinstance(size, dict):
        raise ExecProtocolError("a resize message was not a JSON object")
    width, height = size.get("Width", 0), size.get("Height", 0)
    for value in (width, height):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 <= value <= MAX_TERMINAL_DIMENSION
        ):
            raise ExecProtocolError("a resize message had a size outside uint16")
    return ResizeReceived(width, height)
