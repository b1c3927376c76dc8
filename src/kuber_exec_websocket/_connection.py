"""The client's side of an exec WebSocket after the upgrade, without I/O: :class:`ClientConnection`.

Both bindings move the bytes their own way; what a send, a ping and a close may do on the
connection as it stands, and what each queues for writing, is decided here once.
"""

from __future__ import annotations

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState
from websockets.protocol import State

from kuber_exec_core.channels import Message

from ._limits import CLOSE_NORMAL, MAX_SERVER_MESSAGE_BYTES
from ._received import ReceivedFrames, Wakeable
from ._upgrade import wire_subprotocol

__all__ = ["ClientConnection"]


class ClientConnection:
    """One exec WebSocket after an accepted upgrade: ``protocol`` (the upgrade's
    ``ClientProtocol``) writes the client's frames, :attr:`received` parses the server's.

    Each ``queue_*`` method decides whether the connection still takes that frame and, when it
    does, queues its bytes on ``protocol`` (the binding writes ``protocol.data_to_send()`` its own
    way); when it does not, nothing is queued and the binding reports the end its runtime's way.
    """

    __slots__ = ("protocol", "received")

    def __init__(
        self, protocol: ClientProtocol, max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES
    ) -> None:
        self.protocol = protocol
        #: The server's frames, parsed into messages; the end of the connection.
        self.received = ReceivedFrames(protocol, max_message_bytes)

    @property
    def subprotocol(self) -> str | None:
        """The subprotocol the server chose (``None`` when it chose none)."""
        return wire_subprotocol(self.protocol.subprotocol)

    @property
    def open(self) -> bool:
        """Whether the connection takes a ping or our Close: it has not ended, and no Close
        went either way."""
        return self.received.end is None and self.protocol.state is State.OPEN

    def queue_message(self, message: Message) -> bool:
        """Queue ``message`` as one whole frame (binary for bytes, text for str). ``False``,
        with nothing queued, once the connection has ended (every message before its end was
        taken) or a Close went either way: a message sent after the end is lost, never
        delivered later."""
        if self.received.end is not None:
            return False
        try:
            if isinstance(message, str):
                self.protocol.send_text(message.encode())
            else:
                self.protocol.send_binary(message)
        except InvalidState:
            return False
        return True

    def queue_ping(self, pong: Wakeable) -> bytes | None:
        """Queue a ping whose pong (that one or a later one's: :class:`ReceivedFrames`) sets
        ``pong``, and so does the connection's end. Its payload, for :meth:`ping_answered`;
        ``None``, with nothing queued, when the connection is not :attr:`open`."""
        if not self.open:
            return None
        payload = self.received.ping(pong)
        self.protocol.send_ping(payload)
        return payload

    def ping_answered(self, payload: bytes) -> bool:
        """After ``pong`` was set (or the wait for it ended): whether the ping ``payload`` was
        answered; ``False`` when the connection ended first. Forgets the ping either way."""
        return self.received.pong_arrived(payload)

    def queue_close(self) -> bool:
        """Queue our Close (1000, a normal close). ``True``: the server's reply is to come, as
        the end of the received messages; ``False``, with nothing queued, when there is nothing
        to wait for (the connection is already closing or closed)."""
        if not self.open:
            return False
        try:
            self.protocol.send_close(CLOSE_NORMAL)
        except InvalidState:
            return False
        return True
