"""The WebSocket package's limits and constants: how much one read takes, the close codes it
sends, and the frame sizes RFC 6455 fixes. The server message limit itself is the core's
(``kuber_exec_core.transport``), shared with the async layer's ``TransportOptions``."""

from __future__ import annotations

from kuber_exec_core.transport import CLOSE_MESSAGE_TOO_BIG, MAX_SERVER_MESSAGE_BYTES

__all__ = [
    "CLOSE_INVALID_DATA",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "CLOSE_PROTOCOL_ERROR",
    "MAX_CONTROL_PAYLOAD",
    "MAX_HEADER",
    "MAX_RESPONSE_HEAD",
    "MAX_SERVER_MESSAGE_BYTES",
    "RECEIVE_BYTES",
]

#: What one read takes from the kernel at most: a syscall per 4 KiB (trio-websocket's default)
#: was most of a transfer's cost; 256 KiB is asyncio's own read size.
RECEIVE_BYTES = 256 * 1024

#: RFC 6455 7.4.1's close codes that the client sends: a normal close (ours, when leaving),
#: a protocol error and data that does not match its type (the server broke the protocol).
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_INVALID_DATA = 1007

#: The longest header of an unmasked frame: two bytes and a 64-bit length (RFC 6455 5.2).
MAX_HEADER = 10
#: A control frame's payload is at most 125 bytes (RFC 6455 5.5).
MAX_CONTROL_PAYLOAD = 125

#: A response head longer than this is no API server's answer to the upgrade.
MAX_RESPONSE_HEAD = 64 * 1024
