"""The ``*.channel.k8s.io`` wire codec: framing, subprotocol negotiation, the Status channel.

``ExecSession`` uses all of it; it is public for transports, test servers and tools that need
the raw framing.
"""

from ._channels import CLOSE_STDIN_PAYLOAD as CLOSE_STDIN_PAYLOAD
from ._channels import MAX_CLIENT_PAYLOAD_BYTES as MAX_CLIENT_PAYLOAD_BYTES
from ._channels import Channel as Channel
from ._channels import Message as Message
from ._channels import decode_message as decode_message
from ._channels import encode_message as encode_message
from ._errors import ExecProtocolError as ExecProtocolError
from ._frames import TerminalFrame as TerminalFrame
from ._session import chunk_stdin as chunk_stdin
from ._status import parse_status as parse_status
from ._subprotocols import ALL_SUBPROTOCOLS as ALL_SUBPROTOCOLS
from ._subprotocols import accept_subprotocol as accept_subprotocol
from ._subprotocols import choose_subprotocol as choose_subprotocol
from ._subprotocols import parse_subprotocol_header as parse_subprotocol_header

__all__ = [
    "ALL_SUBPROTOCOLS",
    "CLOSE_STDIN_PAYLOAD",
    "MAX_CLIENT_PAYLOAD_BYTES",
    "Channel",
    "ExecProtocolError",
    "Message",
    "TerminalFrame",
    "accept_subprotocol",
    "choose_subprotocol",
    "chunk_stdin",
    "decode_message",
    "encode_message",
    "parse_status",
    "parse_subprotocol_header",
]
