"""The exec WebSocket's client side on ``websockets``' sans-IO ``ClientProtocol``, without I/O.

Both runtime bindings move bytes their own way (``kuber_exec_trio`` reads in the receiving task,
``kuber_exec_asyncio`` in a protocol's ``data_received``) and share what lies between the bytes
and the messages the connection code wants: the upgrade request and what its answer means
(:func:`open_protocol`, :func:`upgrade_frames`), and :class:`ReceivedFrames`, which turns the
parser's frames into whole messages, answers pongs to pings and notes how the connection ended.

Nothing here awaits or imports a runtime: events a runtime must wake (a ping's pong, the
server's Close) are handed in as objects with a ``set()`` method.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import Protocol

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidStatus, PayloadTooBig
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol as WebSocketSubprotocol
from websockets.uri import WebSocketURI, parse_uri

from kuber_exec_anyio.transport import (
    CLOSE_MESSAGE_TOO_BIG,
    MAX_SERVER_MESSAGE_BYTES,
    NoDebugLogger,
    TransportClosed,
    TransportOptions,
    describe_error,
    message_too_big,
)
from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_core.kube import exec_upgrade_error

__all__ = [
    "CLOSE_NORMAL",
    "RECEIVE_BYTES",
    "ReceivedFrames",
    "Wakeable",
    "frames_of",
    "open_protocol",
    "upgrade_frames",
]

#: What one read takes from the kernel at most: a syscall per 4 KiB (trio-websocket's default)
#: was most of a transfer's cost; 256 KiB is asyncio's own read size.
RECEIVE_BYTES = 256 * 1024
CLOSE_NORMAL = 1000
_CLOSE_INVALID_DATA = 1007


class Wakeable(Protocol):
    """An event of the runtime's (``trio.Event``, ``asyncio.Event``): set, never cleared."""

    def set(self) -> None: ...


def open_protocol(
    options: TransportOptions, logger_name: str
) -> tuple[ClientProtocol, WebSocketURI]:
    """A ``ClientProtocol`` for ``options`` with the upgrade request already queued (headers,
    the token among them, included), and the parsed URI to connect to.

    ``websockets`` logs every handshake header at DEBUG, ``Authorization`` included: the
    protocol logs through a :class:`NoDebugLogger` named ``logger_name``.

    Raises:
        ExecError: ``EXEC_FAILED`` when the URL is not a WebSocket URL.
    """
    url = options.url
    if url.startswith(("http://", "https://")):
        url = "ws" + url[len("http") :]
    try:
        uri = parse_uri(url)
    except InvalidHandshake as error:
        raise ExecError(
            ExecErrorCode.FAILED, f"The exec upgrade failed: {describe_error(error)}"
        ) from None
    protocol = ClientProtocol(
        uri,
        subprotocols=[WebSocketSubprotocol(name) for name in options.subprotocols],
        max_size=options.max_message_bytes,
        logger=NoDebugLogger(logging.getLogger(logger_name)),
    )
    request = protocol.connect()
    for name, value in options.headers:
        request.headers[name] = value
    protocol.send_request(request)
    return protocol, uri


def upgrade_frames(
    protocol: ClientProtocol,
    events: list[Request | Response | Frame],
    options: TransportOptions,
) -> list[Frame]:
    """What the upgrade's answer means, once ``events`` holds it (or the stream ended without
    one, ``events`` empty): the frames that came in the same read as an accepted upgrade.

    Raises:
        ExecError: the seed's mapping of a refused upgrade (``exec_upgrade_error``);
            ``EXEC_FAILED`` for an answer that is no upgrade, or none.
    """
    failure = protocol.handshake_exc
    if isinstance(failure, InvalidStatus):
        response = failure.response
        raise exec_upgrade_error(
            response.status_code, bytes(response.body or b""), options.subprotocols
        )
    if failure is not None or not events:
        reason = describe_error(failure) if failure is not None else "the server closed"
        raise ExecError(ExecErrorCode.FAILED, f"The exec upgrade failed: {reason}")
    # The first event is the Response; frames sent right behind it came in the same read.
    return frames_of(events[1:])


def frames_of(events: list[Request | Response | Frame]) -> list[Frame]:
    """The frames among ``events`` (after the handshake the protocol produces nothing else)."""
    return [event for event in events if isinstance(event, Frame)]


class ReceivedFrames:
    """The frames parsed and not yet taken, and what they mean for the connection.

    A binding feeds the protocol, hands its frames to :meth:`absorb`, and takes messages with
    :meth:`next_message`; it writes whatever the protocol queued (a pong, the Close echo, the
    Close of a failed connection) its own way. Fragmented messages are assembled; a pong
    answers its ping and every earlier one; invalid UTF-8 in a text message fails the
    connection (1007); a Close, a parse failure or the end of the stream set :attr:`end`.
    """

    def __init__(
        self,
        protocol: ClientProtocol,
        close_received: Wakeable,
        max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES,
    ) -> None:
        self.protocol = protocol
        #: Frames parsed and not yet taken (a read may carry many messages).
        self.frames: deque[Frame] = deque()
        #: How the connection ended, once it has (raised by every later receive).
        self.end: TransportClosed | None = None
        self._close_received = close_received
        self._max_message_bytes = max_message_bytes
        self._fragments: list[bytes | bytearray | memoryview] = []
        self._fragmented_opcode: Opcode | None = None
        self._pongs: dict[bytes, Wakeable] = {}
        self._ping_numbers = itertools.count()

    def absorb(self, frames: list[Frame], *, at_eof: bool = False) -> None:
        """Take ``frames`` (parsed from the last read, or with the upgrade's response) and
        note whether the protocol has ended the connection: a parse failure (the Close it
        queued goes out with the next write) or the end of the stream."""
        self.frames.extend(frames)
        if self.frames:
            return  # the end, if any, is noted once what came before it is taken
        protocol = self.protocol
        if protocol.parser_exc is not None:
            too_big = isinstance(protocol.parser_exc, PayloadTooBig)
            reason = message_too_big(self._max_message_bytes) if too_big else None
            self.ended(TransportClosed(clean=False, reason=reason))
        elif at_eof:
            self.ended(TransportClosed(clean=protocol.close_rcvd is not None))

    def next_message(self) -> Message | None:
        """The next whole message, or ``None`` when the frames are used up (then :attr:`end`
        says whether more can come)."""
        frames = self.frames
        while frames:
            message = self._take(frames.popleft())
            if message is not None:
                return message
        self.absorb([])  # a failure noted behind the frames just taken
        return None

    def ping(self, pong: Wakeable) -> bytes:
        """The payload of a new ping, whose pong (or the end) will set ``pong``."""
        payload = next(self._ping_numbers).to_bytes(8, "big")
        self._pongs[payload] = pong
        return payload

    def pong_arrived(self, payload: bytes) -> bool:
        """Whether the pong for the ping ``payload`` came (``False``: the connection ended);
        forgets the ping either way."""
        return self._pongs.pop(payload, None) is None

    def ended(self, closed: TransportClosed) -> None:
        """The connection is over (the first reason stays); wakes the close and every ping."""
        if self.end is None:
            self.end = closed
        self._close_received.set()
        for event in self._pongs.values():
            event.set()  # a waiting ping wakes, finds its key still there, and raises

    def _take(self, frame: Frame) -> Message | None:
        # The whole message ``frame`` completes, if any; control frames are handled here.
        opcode = frame.opcode
        if opcode is Opcode.BINARY or opcode is Opcode.TEXT:
            if frame.fin:
                return self._message(opcode, frame.data)
            self._fragmented_opcode = opcode
            self._fragments = [frame.data]
            return None
        if opcode is Opcode.CONT:
            self._fragments.append(frame.data)
            if not frame.fin or self._fragmented_opcode is None:
                return None
            data, self._fragments = b"".join(self._fragments), []
            fragmented, self._fragmented_opcode = self._fragmented_opcode, None
            return self._message(fragmented, data)
        if opcode is Opcode.PONG:
            self._pong(bytes(frame.data))
        elif opcode is Opcode.CLOSE:
            close = self.protocol.close_rcvd
            too_big = close is not None and close.code == CLOSE_MESSAGE_TOO_BIG
            reason = message_too_big(self._max_message_bytes) if too_big else None
            self.ended(TransportClosed(clean=True, reason=reason))
        return None

    def _message(self, opcode: Opcode, data: bytes | bytearray | memoryview) -> Message | None:
        if opcode is Opcode.BINARY:
            return bytes(data)
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError:
            self.protocol.fail(_CLOSE_INVALID_DATA, "invalid UTF-8 in a text message")
            self.ended(TransportClosed(clean=False, reason="the server sent invalid UTF-8"))
            return None

    def _pong(self, payload: bytes) -> None:
        # A pong answers its ping and every earlier one (RFC 6455 5.5.3).
        for pending in [key for key in self._pongs if key <= payload]:
            self._pongs.pop(pending).set()
