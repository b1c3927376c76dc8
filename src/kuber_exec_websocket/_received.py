"""What the server sends after the upgrade, parsed: :class:`ReceivedFrames`.

The exec stream is a long run of server-to-client binary frames, each one channel-prefixed
message. ``websockets``' parser copied every message three times on its way to a ``bytes``
(into its buffer, out of it as a ``bytearray``, into ``bytes``); this one slices each whole
frame out of the read it arrived in (one copy), and joins the pieces of a frame that straddles
two reads once. It keeps RFC 6455's rules for what a server may send a client (section 5):
frames are never masked, reserved bits are never set without an extension, control frames are
whole and at most 125 bytes, a continuation belongs to a message, a text message is UTF-8, a
Close carries a valid code; anything else fails the connection (1002, 1007) and a message over
the limit is refused as soon as its header says so (1009). Frames are written by the
``websockets`` ``ClientProtocol`` that did the upgrade (masking, state).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Protocol

import attrs
from websockets.client import ClientProtocol
from websockets.protocol import State

from kuber_exec_core.channels import Message
from kuber_exec_core.transport import message_too_big

from ._limits import (
    CLOSE_INVALID_DATA,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_PROTOCOL_ERROR,
    MAX_CONTROL_PAYLOAD,
    MAX_HEADER,
    MAX_SERVER_MESSAGE_BYTES,
)

__all__ = ["DROPPED", "ConnectionEnded", "ReceivedFrames", "Wakeable"]

_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_FIN = 0x80
_RESERVED_BITS = 0x70
_MASKED = 0x80


@attrs.frozen(kw_only=True)
class ConnectionEnded:
    """How the connection ended: ``clean`` when the server's Close frame arrived; ``reason``
    why, when the parser knows better than "closed" (a message over the size limit, a broken
    protocol). A binding raises its runtime's end of the stream from it
    (``kuber_exec_anyio.transport.TransportClosed``)."""

    clean: bool
    reason: str | None = None


#: The connection dropped without a Close: the end of the stream, an abort, a broken socket.
DROPPED = ConnectionEnded(clean=False)


class Wakeable(Protocol):
    """An event of the runtime's (``trio.Event``, ``asyncio.Event``): set, never cleared."""

    def set(self) -> None: ...


class _Failure(Exception):
    """The server broke the protocol: the connection fails with ``code``."""

    def __init__(self, code: int, what: str, reason: str) -> None:
        super().__init__(what)
        self.code = code
        self.what = what  # said on the wire, in our Close frame
        self.reason = reason  # said to the caller, in the ConnectionEnded


def _protocol_error(what: str) -> _Failure:
    return _Failure(CLOSE_PROTOCOL_ERROR, what, f"the server broke the WebSocket protocol: {what}")


def _valid_close_code(code: int) -> bool:
    # RFC 6455 7.4: 1004-1006 and 1015 are never sent; 1016-2999 are reserved; 3000-4999 are
    # for libraries and applications.
    return (1000 <= code <= 1014 and code not in (1004, 1005, 1006)) or 3000 <= code <= 4999


class ReceivedFrames:
    """The server's side of the connection after the upgrade: bytes in, messages out.

    A binding hands every read to :meth:`receive_data` (the end of the stream to
    :meth:`receive_eof`), takes whole messages with :meth:`next_message`, and writes whatever
    the ``protocol`` queued meanwhile (a pong, the Close echo, the Close of a failed
    connection) its own way. Binary messages come out as ``bytes``, text as ``str``; a pong
    answers its ping and every earlier one; the end of the connection (the server's Close, a
    failure, the end of the stream) is :attr:`end` once every message before it was taken.
    Nothing after a Close or a failure is parsed (RFC 6455 7.1.7).
    """

    def __init__(
        self,
        protocol: ClientProtocol,
        max_message_bytes: int = MAX_SERVER_MESSAGE_BYTES,
    ) -> None:
        self.protocol = protocol
        #: Whole messages parsed and not yet taken (a read may carry many).
        self.messages: deque[Message] = deque()
        #: How the connection ended, once it has and every message before it was taken.
        self.end: ConnectionEnded | None = None
        #: Whether the server's Close frame arrived.
        self.close_seen = False
        self._ending: ConnectionEnded | None = None
        self._max_message_bytes = max_message_bytes
        # The start of a frame that the last read cut short, and its length; once its header
        # is whole, the frame's first byte, header length, total length and _admit's answer.
        self._tail: list[memoryview] = []
        self._tail_size = 0
        self._tail_frame: tuple[int, int, int, bool] | None = None
        # A fragmented message being assembled: its opcode, parts and size so far.
        self._fragmented_opcode: int | None = None
        self._fragments: list[bytes] = []
        self._fragmented_size = 0
        self._pongs: dict[bytes, Wakeable] = {}
        self._ping_numbers = itertools.count()

    @property
    def closing_handshake_done(self) -> bool:
        """Whether the server's Close arrived and ours went out (queued, with the echo)."""
        return self.close_seen and self.protocol.close_sent is not None

    # -- bytes in ------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray) -> None:
        """Parse one read: every frame it completes is handled, a frame it leaves unfinished
        waits for the next read."""
        if self._ending is not None:
            return  # after a Close or a failure nothing more is read
        if type(data) is not bytes:
            data = bytes(data)  # slices of bytes are the messages' own bytes
        try:
            start = self._finish_tail(data) if self._tail else 0
            if start < len(data):
                self._parse(data, start)
        except _Failure as failure:
            self._fail(failure)

    def receive_eof(self) -> None:
        """The stream ended: cleanly only after the server's Close."""
        if self._ending is None:
            self.ended(DROPPED)

    def _parse(self, data: bytes, pos: int) -> None:
        # Every whole frame in data from pos; the rest becomes the tail.
        size = len(data)
        messages = self.messages
        while (parsed := _read_header(data, pos)) is not None:
            first, header, length = parsed
            plain = self._admit(first, length)
            end = pos + header + length
            if end > size:
                break
            if plain:
                messages.append(data[pos + header : end])
            else:
                self._frame(first, data[pos + header : end])
                if self._ending is not None:
                    return
            pos = end
        if pos < size:
            self._tail = [memoryview(data)[pos:]]
            self._tail_size = size - pos

    def _finish_tail(self, data: bytes) -> int:
        # Complete the frame the last read cut short; return where the next frame starts in
        # data (its length when the frame is still not whole).
        if self._tail_frame is None:
            # The header itself was cut: at most 10 pieces to look at, once each read.
            head = _first_bytes([*self._tail, memoryview(data)], MAX_HEADER)
            parsed = _read_header(head, 0)
            if parsed is None:
                self._keep(data)
                return len(data)
            first, header, length = parsed
            self._tail_frame = (first, header, header + length, self._admit(first, length))
        first, header, total, plain = self._tail_frame
        if self._tail_size + len(data) < total:
            self._keep(data)  # a frame longer than a read: its pieces are joined once, at the end
            return len(data)
        used = total - self._tail_size
        parts = [*self._tail, memoryview(data)[:used]]
        self._tail, self._tail_size, self._tail_frame = [], 0, None
        payload = _join_after(parts, header)
        if plain:
            self.messages.append(payload)
        else:
            self._frame(first, payload)
        return used if self._ending is None else len(data)

    def _keep(self, data: bytes) -> None:
        self._tail.append(memoryview(data))
        self._tail_size += len(data)

    def _admit(self, first: int, length: int) -> bool:
        # Check a frame's header before its payload is waited for. True: a whole binary
        # message outside a fragmented one (the exec stream's every output message), taken as
        # it is; False: a frame for _frame.
        if first == _FIN | _BINARY and self._fragmented_opcode is None:
            if length > self._max_message_bytes:
                raise self._too_big()
            return True
        self._check(first, length)
        return False

    def _check(self, first: int, length: int) -> None:
        # The rules a frame's header must meet, before its payload is waited for.
        if first & _RESERVED_BITS:
            raise _protocol_error("reserved bits set without an extension")
        opcode = first & 0x0F
        if opcode >= _CLOSE:
            if opcode > _PONG:
                raise _protocol_error(f"unknown opcode {opcode}")
            if not first & _FIN:
                raise _protocol_error("a fragmented control frame")
            if length > MAX_CONTROL_PAYLOAD:
                raise _protocol_error("a control frame over 125 bytes")
            return
        if opcode > _BINARY:
            raise _protocol_error(f"unknown opcode {opcode}")
        if opcode == _CONTINUATION:
            if self._fragmented_opcode is None:
                raise _protocol_error("a continuation frame outside a message")
            if self._fragmented_size + length > self._max_message_bytes:
                raise self._too_big()
        elif self._fragmented_opcode is not None:
            raise _protocol_error("a new message inside a fragmented one")
        elif length > self._max_message_bytes:
            raise self._too_big()

    def _too_big(self) -> _Failure:
        return _Failure(
            CLOSE_MESSAGE_TOO_BIG,
            f"over {self._max_message_bytes} bytes",
            message_too_big(self._max_message_bytes),
        )

    # -- frames --------------------------------------------------------------------------------

    def _frame(self, first: int, payload: bytes) -> None:
        # A whole frame that passed _check (or the fast path's test).
        opcode = first & 0x0F
        if opcode in (_BINARY, _TEXT):
            if first & _FIN:
                self.messages.append(_message(opcode, payload))
            else:
                self._fragmented_opcode = opcode
                self._fragments = [payload]
                self._fragmented_size = len(payload)
        elif opcode == _CONTINUATION:
            self._fragments.append(payload)
            self._fragmented_size += len(payload)
            if first & _FIN:
                assert self._fragmented_opcode is not None  # _check refused a stray one
                data = b"".join(self._fragments)
                opcode = self._fragmented_opcode
                self._fragmented_opcode, self._fragments, self._fragmented_size = None, [], 0
                self.messages.append(_message(opcode, data))
        elif opcode == _PING:
            if self.protocol.state is State.OPEN:
                self.protocol.send_pong(payload)
        elif opcode == _PONG:
            self._pong(payload)
        else:
            self._close(payload)

    def _pong(self, payload: bytes) -> None:
        # A pong answers its ping and every earlier one (RFC 6455 5.5.3: a server may answer
        # only the last ping it got); an unsolicited pong answers none.
        if payload not in self._pongs:
            return
        for pending in list(self._pongs):  # in the order the pings went out
            self._pongs.pop(pending).set()
            if pending == payload:
                break

    def _close(self, payload: bytes) -> None:
        code: int | None = None
        if payload:
            if len(payload) < 2:
                raise _protocol_error("a Close frame with a one-byte payload")
            code = int.from_bytes(payload[:2], "big")
            if not _valid_close_code(code):
                raise _protocol_error(f"close code {code}")
            try:
                payload[2:].decode()
            except UnicodeDecodeError:
                raise _Failure(
                    CLOSE_INVALID_DATA,
                    "invalid UTF-8 in the close reason",
                    "the server sent invalid UTF-8",
                ) from None
        if self._fragmented_opcode is not None:
            # RFC 6455 allows a control frame between fragments, but a Close there ends the
            # connection with a message cut short: output lost, not a clean end (websockets
            # fails it the same way).
            raise _protocol_error("a Close frame inside a fragmented message")
        self.close_seen = True
        protocol = self.protocol
        if protocol.state is State.OPEN:
            # The echo (RFC 6455 5.5.1): the same code, or none.
            if code is None:
                protocol.send_close()
            else:
                protocol.send_close(code)
        too_big = code == CLOSE_MESSAGE_TOO_BIG
        reason = message_too_big(self._max_message_bytes) if too_big else None
        self.ended(ConnectionEnded(clean=True, reason=reason))

    def _fail(self, failure: _Failure) -> None:
        # RFC 6455 7.1.7: our Close with the code (when none went out yet), and nothing more
        # is read; the binding drops the connection once the Close is written.
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(failure.code, failure.what)
        self.ended(ConnectionEnded(clean=False, reason=failure.reason))

    # -- messages and the end ------------------------------------------------------------------

    def next_message(self) -> Message | None:
        """The next whole message, or ``None`` when none is parsed (then :attr:`end` says
        whether more can come)."""
        messages = self.messages
        if messages:
            return messages.popleft()
        if self._ending is not None:
            self.end = self._ending
        return None

    def ended(self, closed: ConnectionEnded) -> None:
        """The connection is over (a Close, a failure, the end of the stream, an abort, a
        broken socket): the first reason stays; waiting pings wake."""
        if self._ending is None:
            self._ending = closed
            self._tail, self._tail_size, self._tail_frame = [], 0, None
        if not self.messages:
            self.end = self._ending
        for event in self._pongs.values():
            event.set()  # a waiting ping wakes, finds its key still there, and raises

    # -- pings ---------------------------------------------------------------------------------

    def ping(self, pong: Wakeable) -> bytes:
        """The payload of a new ping, whose pong (or the end) will set ``pong``."""
        payload = next(self._ping_numbers).to_bytes(8, "big")
        self._pongs[payload] = pong
        return payload

    def pong_arrived(self, payload: bytes) -> bool:
        """Whether the pong for the ping ``payload`` came (``False``: the connection ended);
        forgets the ping either way."""
        return self._pongs.pop(payload, None) is None


def _read_header(buffer: bytes, pos: int) -> tuple[int, int, int] | None:
    # (first byte, header length, payload length) of the frame at pos, or None when buffer
    # ends before its header does.
    available = len(buffer) - pos
    if available < 2:
        return None
    length = buffer[pos + 1]
    if length & _MASKED:
        raise _protocol_error("a masked frame from the server")
    if length < 126:
        return buffer[pos], 2, length
    if length == 126:
        if available < 4:
            return None
        return buffer[pos], 4, (buffer[pos + 2] << 8) | buffer[pos + 3]
    if available < 10:
        return None
    return buffer[pos], 10, int.from_bytes(buffer[pos + 2 : pos + 10], "big")


def _first_bytes(parts: list[memoryview], count: int) -> bytes:
    # The first count bytes of parts (fewer when they hold fewer).
    head = bytearray()
    for part in parts:
        head += part[: count - len(head)]
        if len(head) >= count:
            break
    return bytes(head)


def _join_after(parts: list[memoryview], skip: int) -> bytes:
    # The bytes of parts after the first skip bytes, in one copy.
    views: list[memoryview] = []
    for part in parts:
        if skip >= len(part):
            skip -= len(part)
            continue
        views.append(part[skip:] if skip else part)
        skip = 0
    return b"".join(views)


def _message(opcode: int, data: bytes) -> Message:
    if opcode == _BINARY:
        return data
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise _Failure(
            CLOSE_INVALID_DATA, "invalid UTF-8 in a text message", "the server sent invalid UTF-8"
        ) from None
