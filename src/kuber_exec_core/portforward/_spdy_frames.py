"""SPDY/3 frames: their layout, an incremental reader and the writers (docs/port-forward.md).

Every frame starts with 8 bytes. A control frame: the control bit, the version (3) and the type
in the first word, then 8 bits of flags and a 24-bit length. A DATA frame: a clear bit and the
31-bit stream id, then flags and length. The reader is fed bytes cut anywhere (a WebSocket
message may hold part of a frame, or several) and returns whole control frames; a DATA frame's
payload is handed on in pieces as it arrives, so a 16 MiB frame never sits in memory whole.
Header blocks are returned still compressed: decompressing them is the session's job, in frame
order, with the one context of its direction (:mod:`._spdy_headers`).
"""

from __future__ import annotations

import enum
import struct

import attrs

from ._errors import PortForwardProtocolError

__all__ = [
    "FLAG_FIN",
    "FLAG_UNIDIRECTIONAL",
    "MAX_CONTROL_FRAME_BYTES",
    "SPDY_VERSION",
    "ControlFrame",
    "DataChunk",
    "FrameReader",
    "FrameType",
    "GoAwayStatus",
    "RstStatus",
    "data_frame",
    "goaway_frame",
    "headers_frame",
    "ping_frame",
    "rst_stream_frame",
    "settings_frame",
    "syn_reply_frame",
    "syn_stream_frame",
    "window_update_frame",
]

SPDY_VERSION = 3
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02
_CONTROL_BIT = 0x8000
_MAX_LENGTH = (1 << 24) - 1
_MAX_ID = (1 << 31) - 1

#: The largest control frame the reader accepts. Port-forward's header blocks are a few dozen
#: bytes; a peer announcing more is hostile or broken, and we never buffer it.
MAX_CONTROL_FRAME_BYTES = 64 * 1024


class FrameType(enum.IntEnum):
    """The control frame types of SPDY/3.1 (CREDENTIAL, type 10, is not spoken)."""

    SYN_STREAM = 1
    SYN_REPLY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PING = 6
    GOAWAY = 7
    HEADERS = 8
    WINDOW_UPDATE = 9


class RstStatus(enum.IntEnum):
    """RST_STREAM status codes."""

    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    UNSUPPORTED_VERSION = 4
    CANCEL = 5
    INTERNAL_ERROR = 6
    FLOW_CONTROL_ERROR = 7
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9
    INVALID_CREDENTIALS = 10
    FRAME_TOO_LARGE = 11


class GoAwayStatus(enum.IntEnum):
    """GOAWAY status codes."""

    OK = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


@attrs.frozen
class ControlFrame:
    """One control frame, its fields decoded (``header_block`` still compressed).

    ``stream_id`` is the frame's stream (SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS,
    WINDOW_UPDATE), GOAWAY's last good stream, or 0. ``value`` is RST_STREAM's or GOAWAY's status,
    PING's id, or WINDOW_UPDATE's delta. ``settings`` maps SETTINGS' ids to values.
    """

    type: FrameType
    flags: int
    stream_id: int = 0
    value: int = 0
    associated_id: int = 0
    header_block: bytes = b""
    settings: tuple[tuple[int, int], ...] = ()

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


@attrs.frozen
class DataChunk:
    """A piece of one DATA frame's payload; ``fin`` is set on the frame's last piece (which
    may be empty) when the frame carries FLAG_FIN. ``frame_start`` marks the first piece."""

    stream_id: int
    data: bytes
    fin: bool
    frame_start: bool


_HEADER = struct.Struct(">II")
_U32 = struct.Struct(">I")


class FrameReader:
    """Parses a SPDY byte stream fed in arbitrary pieces.

    ``feed(data)`` returns the frames and DATA pieces completed by ``data``, in order. Buffered
    memory is bounded by :data:`MAX_CONTROL_FRAME_BYTES` plus one fed piece.

    Raises (from ``feed``):
        PortForwardProtocolError: a control frame of another version, of an unknown type, longer
            than :data:`MAX_CONTROL_FRAME_BYTES`, or whose length does not fit its type; a frame
            naming stream 0 where a stream is required. The reader is unusable afterwards.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        # A DATA frame in progress: its stream, flags, and payload bytes still to come.
        self._data_stream = 0
        self._data_flags = 0
        self._data_left = 0
        self._data_started = False
        self._in_data = False
        self._broken: PortForwardProtocolError | None = None

    def feed(self, data: bytes) -> list[ControlFrame | DataChunk]:
        if self._broken is not None:
            raise self._broken
        try:
            return self._feed(data)
        except PortForwardProtocolError as error:
            self._broken = error
            raise

    def _feed(self, data: bytes) -> list[ControlFrame | DataChunk]:
        out: list[ControlFrame | DataChunk] = []
        view = memoryview(data)
        while True:
            if self._in_data:
                take = min(self._data_left, len(view))
                piece = bytes(view[:take])
                view = view[take:]
                self._data_left -= take
                done = self._data_left == 0
                if piece or done:
                    out.append(
                        DataChunk(
                            self._data_stream,
                            piece,
                            fin=done and bool(self._data_flags & FLAG_FIN),
                            frame_start=not self._data_started,
                        )
                    )
                    self._data_started = True
                if not done:
                    return out
                self._in_data = False
                continue
            if len(self._buffer) < 8:
                need = 8 - len(self._buffer)
                self._buffer += view[:need]
                view = view[need:]
                if len(self._buffer) < 8:
                    return out
            first, second = _HEADER.unpack_from(self._buffer)
            flags, length = second >> 24, second & _MAX_LENGTH
            if not first & 0x80000000:
                stream_id = first & _MAX_ID
                if stream_id == 0:
                    raise PortForwardProtocolError("a DATA frame on stream 0")
                self._buffer.clear()
                self._in_data = True
                self._data_stream, self._data_flags = stream_id, flags
                self._data_left, self._data_started = length, False
                continue
            version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
            if version != SPDY_VERSION:
                raise PortForwardProtocolError(f"a control frame of SPDY version {version}")
            if length > MAX_CONTROL_FRAME_BYTES:
                raise PortForwardProtocolError(
                    f"a control frame of {length} bytes (the limit is {MAX_CONTROL_FRAME_BYTES})"
                )
            try:
                frame_type = FrameType(kind)
            except ValueError:
                raise PortForwardProtocolError(f"a control frame of unknown type {kind}") from None
            need = 8 + length - len(self._buffer)
            self._buffer += view[:need]
            view = view[need:]
            if len(self._buffer) < 8 + length:
                return out
            body = bytes(self._buffer[8:])
            self._buffer.clear()
            out.append(_control(frame_type, flags, body))


def _control(kind: FrameType, flags: int, body: bytes) -> ControlFrame:
    size = len(body)

    def need(exact: int | None = None, minimum: int | None = None) -> None:
        if (exact is not None and size != exact) or (minimum is not None and size < minimum):
            raise PortForwardProtocolError(f"a {kind.name} frame of {size} bytes")

    def stream(offset: int = 0) -> int:
        stream_id: int = _U32.unpack_from(body, offset)[0] & _MAX_ID
        if stream_id == 0:
            raise PortForwardProtocolError(f"a {kind.name} frame on stream 0")
        return stream_id

    if kind is FrameType.SYN_STREAM:
        need(minimum=10)
        associated = _U32.unpack_from(body, 4)[0] & _MAX_ID
        return ControlFrame(kind, flags, stream(), associated_id=associated, header_block=body[10:])
    if kind in (FrameType.SYN_REPLY, FrameType.HEADERS):
        need(minimum=4)
        return ControlFrame(kind, flags, stream(), header_block=body[4:])
    if kind is FrameType.RST_STREAM:
        need(exact=8)
        return ControlFrame(kind, flags, stream(), value=_U32.unpack_from(body, 4)[0])
    if kind is FrameType.SETTINGS:
        need(minimum=4)
        count = _U32.unpack_from(body)[0]
        if size != 4 + 8 * count:
            raise PortForwardProtocolError(f"a SETTINGS frame of {size} bytes for {count} entries")
        settings = tuple(
            (_U32.unpack_from(body, 4 + 8 * i)[0] & 0xFFFFFF, _U32.unpack_from(body, 8 + 8 * i)[0])
            for i in range(count)
        )
        return ControlFrame(kind, flags, settings=settings)
    if kind is FrameType.PING:
        need(exact=4)
        return ControlFrame(kind, flags, value=_U32.unpack_from(body)[0])
    if kind is FrameType.GOAWAY:
        need(exact=8)
        last = _U32.unpack_from(body)[0] & _MAX_ID
        return ControlFrame(kind, flags, last, value=_U32.unpack_from(body, 4)[0])
    need(exact=8)  # WINDOW_UPDATE
    stream_id = _U32.unpack_from(body)[0] & _MAX_ID  # 0 is the session's window (SPDY/3.1)
    return ControlFrame(kind, flags, stream_id, value=_U32.unpack_from(body, 4)[0] & _MAX_ID)


def _control_bytes(kind: FrameType, flags: int, body: bytes) -> bytes:
    if len(body) > _MAX_LENGTH:
        raise ValueError("a control frame longer than 2**24 - 1 bytes")
    return _HEADER.pack((_CONTROL_BIT | SPDY_VERSION) << 16 | kind, flags << 24 | len(body)) + body


def _check_id(stream_id: int, *, zero: bool = False) -> None:
    if not (0 if zero else 1) <= stream_id <= _MAX_ID:
        raise ValueError(f"stream id {stream_id} is outside 1..2**31-1")


def syn_stream_frame(stream_id: int, header_block: bytes, *, fin: bool = False) -> bytes:
    """A SYN_STREAM (priority 0, no associated stream) carrying a compressed header block."""
    _check_id(stream_id)
    body = _U32.pack(stream_id) + _U32.pack(0) + b"\x00\x00" + header_block
    return _control_bytes(FrameType.SYN_STREAM, FLAG_FIN if fin else 0, body)


def syn_reply_frame(stream_id: int, header_block: bytes, *, fin: bool = False) -> bytes:
    _check_id(stream_id)
    body = _U32.pack(stream_id) + header_block
    return _control_bytes(FrameType.SYN_REPLY, FLAG_FIN if fin else 0, body)


def headers_frame(stream_id: int, header_block: bytes, *, fin: bool = False) -> bytes:
    _check_id(stream_id)
    body = _U32.pack(stream_id) + header_block
    return _control_bytes(FrameType.HEADERS, FLAG_FIN if fin else 0, body)


def rst_stream_frame(stream_id: int, status: RstStatus) -> bytes:
    _check_id(stream_id)
    return _control_bytes(FrameType.RST_STREAM, 0, _U32.pack(stream_id) + _U32.pack(status))


def settings_frame(settings: dict[int, int]) -> bytes:
    body = _U32.pack(len(settings)) + b"".join(
        _U32.pack(key & 0xFFFFFF) + _U32.pack(value) for key, value in settings.items()
    )
    return _control_bytes(FrameType.SETTINGS, 0, body)


def ping_frame(ping_id: int) -> bytes:
    return _control_bytes(FrameType.PING, 0, _U32.pack(ping_id))


def goaway_frame(last_good_stream_id: int, status: GoAwayStatus = GoAwayStatus.OK) -> bytes:
    _check_id(last_good_stream_id, zero=True)
    return _control_bytes(FrameType.GOAWAY, 0, _U32.pack(last_good_stream_id) + _U32.pack(status))


def window_update_frame(stream_id: int, delta: int) -> bytes:
    _check_id(stream_id, zero=True)
    if not 1 <= delta <= _MAX_ID:
        raise ValueError(f"window delta {delta} is outside 1..2**31-1")
    return _control_bytes(FrameType.WINDOW_UPDATE, 0, _U32.pack(stream_id) + _U32.pack(delta))


def data_frame(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
    """One DATA frame; ``data`` must be at most 2**24 - 1 bytes."""
    _check_id(stream_id)
    if len(data) > _MAX_LENGTH:
        raise ValueError("a DATA frame longer than 2**24 - 1 bytes")
    return _HEADER.pack(stream_id, (FLAG_FIN if fin else 0) << 24 | len(data)) + data
