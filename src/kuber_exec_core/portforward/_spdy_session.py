"""A SPDY/3.1 session, either end, without I/O.

Feed it the bytes that arrived (``receive_data``), then take events with ``next_event()`` until
``NEED_DATA``; act with ``open_stream``, ``reply``, ``send_data``, ``reset``, ``ping``,
``go_away``; send what ``data_to_send()`` returns. What it enforces:

- stream ids: the client's streams are odd, the server's even, each new one above the last; a
  peer that reuses an id, opens one of ours, or names a stream it never opened breaks the session;
- flow control: SPDY/3.1 gives every stream (and the session) a 64 KiB window that the receiver
  widens with WINDOW_UPDATE. client-go's spdystream never sends WINDOW_UPDATE and ignores ours,
  so windows are **honoured and enforced only with a peer that speaks them**: one that sent a
  SETTINGS with an initial window size or a WINDOW_UPDATE (this session sends both as its first
  frames). With such a peer a sender waits for the window (backpressure end to end), and data
  past the window we granted breaks the session; with client-go, backpressure is the
  transport's;
- bounded memory: control frames are small (:data:`~._spdy_frames.MAX_CONTROL_FRAME_BYTES`),
  header blocks inflate within a budget, DATA passes through in pieces, and a peer opening more
  than ``max_peer_streams`` streams at once has the extra ones refused (RST_STREAM).

A broken session raises :class:`~._errors.PortForwardProtocolError` from ``receive_data`` (and
from every later call), after queueing a GOAWAY with PROTOCOL_ERROR for the peer.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Mapping
from typing import Literal

import attrs

from .._session import NEED_DATA, SessionSignal
from ._errors import PortForwardProtocolError
from ._spdy_frames import (
    ControlFrame,
    DataChunk,
    FrameReader,
    FrameType,
    GoAwayStatus,
    RstStatus,
    data_frame,
    goaway_frame,
    ping_frame,
    rst_stream_frame,
    settings_frame,
    syn_reply_frame,
    syn_stream_frame,
    window_update_frame,
)
from ._spdy_headers import DEFAULT_HEADER_BUDGET, HeaderCompressor, HeaderDecompressor

__all__ = [
    "DEFAULT_WINDOW",
    "DataReceived",
    "GoAwayReceived",
    "HeadersReceived",
    "PingAnswered",
    "Role",
    "SessionEvent",
    "SpdySession",
    "StreamOpened",
    "StreamReplied",
    "StreamReset",
    "WindowOpened",
]

#: SPDY/3's initial window, for streams and for the session.
DEFAULT_WINDOW = 64 * 1024
_SETTINGS_INITIAL_WINDOW_SIZE = 7
_MAX_WINDOW = (1 << 31) - 1
_MAX_DATA_FRAME = 64 * 1024


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


@attrs.frozen
class StreamOpened:
    """The peer opened ``stream_id`` (SYN_STREAM); ``fin``: it will send nothing on it."""

    stream_id: int
    headers: Mapping[str, str]
    fin: bool


@attrs.frozen
class StreamReplied:
    """The peer accepted a stream we opened (SYN_REPLY)."""

    stream_id: int
    headers: Mapping[str, str]
    fin: bool


@attrs.frozen
class HeadersReceived:
    stream_id: int
    headers: Mapping[str, str]
    fin: bool


@attrs.frozen(repr=False)
class DataReceived:
    """Bytes on ``stream_id``; ``fin``: the peer's half is closed (``data`` may be empty)."""

    stream_id: int
    data: bytes
    fin: bool

    def __repr__(self) -> str:
        return f"DataReceived(stream_id={self.stream_id}, {len(self.data)} bytes, fin={self.fin})"


@attrs.frozen
class StreamReset:
    """The peer reset ``stream_id`` (RST_STREAM): both halves are closed."""

    stream_id: int
    status: int


@attrs.frozen
class WindowOpened:
    """The peer widened a send window (``stream_id`` 0: the session's)."""

    stream_id: int


@attrs.frozen
class PingAnswered:
    ping_id: int


@attrs.frozen
class GoAwayReceived:
    """The peer will accept no new stream; ours above ``last_good_stream_id`` were not seen."""

    last_good_stream_id: int
    status: int


SessionEvent = (
    StreamOpened
    | StreamReplied
    | HeadersReceived
    | DataReceived
    | StreamReset
    | WindowOpened
    | PingAnswered
    | GoAwayReceived
)


@attrs.define
class _Stream:
    ours: bool
    send_window: int
    receive_window: int
    local_open: bool = True
    remote_open: bool = True
    replied: bool = False
    unacknowledged: int = 0


class SpdySession:
    """One end of a SPDY/3.1 session (module docstring).

    Args:
        role: which end; the client's stream and ping ids are odd, the server's even.
        receive_window: the window this end grants each peer stream (announced in SETTINGS).
        header_budget: the most bytes one inflated header block may take.
        max_peer_streams: how many streams the peer may hold open at once; more are refused.
    """

    def __init__(
        self,
        role: Role,
        *,
        receive_window: int = 256 * 1024,
        header_budget: int = DEFAULT_HEADER_BUDGET,
        max_peer_streams: int = 2048,
    ) -> None:
        if not 1 <= receive_window <= _MAX_WINDOW:
            raise ValueError("receive_window must be within 1..2**31-1")
        self.role = role
        self._reader = FrameReader()
        self._compressor = HeaderCompressor()
        self._decompressor = HeaderDecompressor(header_budget)
        self._receive_window = receive_window
        self._max_peer_streams = max_peer_streams
        self._streams: dict[int, _Stream] = {}
        self._peer_streams = 0
        self._parity = 1 if role is Role.CLIENT else 0
        self._next_id = 1 if role is Role.CLIENT else 2
        self._next_ping = 1 if role is Role.CLIENT else 2
        self._pings: set[int] = set()
        self._last_peer_id = 0
        self._peer_initial_window = DEFAULT_WINDOW
        self._session_send_window = DEFAULT_WINDOW
        #: True once the peer showed it speaks flow control (module docstring).
        self.peer_flow_control = False
        self._outgoing = bytearray()
        self._events: collections.deque[SessionEvent] = collections.deque()
        self._error: PortForwardProtocolError | None = None
        self.going_away = False
        self.peer_going_away = False
        self._outgoing += settings_frame({_SETTINGS_INITIAL_WINDOW_SIZE: receive_window})
        # Our side of the session window is as wide as it goes: each stream's window is the
        # backpressure, and one slow connection must not stall the others.
        self._outgoing += window_update_frame(0, _MAX_WINDOW - DEFAULT_WINDOW)

    # -- what goes out -------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        """How many bytes are queued for the peer (what ``data_to_send`` would return)."""
        return len(self._outgoing)

    def data_to_send(self) -> bytes:
        """The bytes queued for the peer since the last call (possibly empty)."""
        out = bytes(self._outgoing)
        self._outgoing.clear()
        return out

    def open_stream(self, headers: Mapping[str, str], *, fin: bool = False) -> int:
        """Open a stream (SYN_STREAM) and return its id.

        Raises:
            ExecError: the session is broken, going away, or out of stream ids.
        """
        self._check_usable()
        if self.peer_going_away or self.going_away:
            raise PortForwardProtocolError("the session is going away: no new stream")
        stream_id = self._next_id
        if stream_id > _MAX_WINDOW:
            raise PortForwardProtocolError("the session ran out of stream ids")
        self._next_id += 2
        self._streams[stream_id] = _Stream(
            ours=True,
            send_window=self._peer_initial_window,
            receive_window=self._receive_window,
            local_open=not fin,
        )
        self._outgoing += syn_stream_frame(stream_id, self._compressor.compress(headers), fin=fin)
        return stream_id

    def reply(self, stream_id: int, headers: Mapping[str, str], *, fin: bool = False) -> None:
        """Accept a stream the peer opened (SYN_REPLY)."""
        self._check_usable()
        stream = self._streams.get(stream_id)
        if stream is None or stream.ours or stream.replied:
            raise ValueError(f"stream {stream_id} is not a peer's stream awaiting a reply")
        stream.replied = True
        self._outgoing += syn_reply_frame(stream_id, self._compressor.compress(headers), fin=fin)
        if fin:
            self._close_local(stream_id, stream)

    def send_window(self, stream_id: int) -> int | None:
        """How many bytes ``send_data`` may take now on ``stream_id``; ``None``: no limit (the
        peer does not speak flow control)."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.local_open:
            return 0
        if not self.peer_flow_control:
            return None
        return max(0, min(stream.send_window, self._session_send_window))

    def send_data(self, stream_id: int, data: bytes, *, fin: bool = False) -> int:
        """Queue as much of ``data`` as the windows allow, in DATA frames of at most 64 KiB,
        and return how many bytes were taken; ``fin`` closes our half once all of ``data`` is
        taken (an empty ``data`` with ``fin`` is a bare half-close).

        Raises:
            ValueError: the stream is not open for sending.
        """
        self._check_usable()
        stream = self._streams.get(stream_id)
        if stream is None or not stream.local_open:
            raise ValueError(f"stream {stream_id} is not open for sending")
        window = self.send_window(stream_id)
        taken = len(data) if window is None else min(window, len(data))
        view = memoryview(data)[:taken]
        for start in range(0, taken, _MAX_DATA_FRAME):
            piece = bytes(view[start : start + _MAX_DATA_FRAME])
            last = start + _MAX_DATA_FRAME >= taken
            self._outgoing += data_frame(stream_id, piece, fin=fin and last and taken == len(data))
        if fin and taken == len(data):
            if not taken:
                self._outgoing += data_frame(stream_id, b"", fin=True)
            self._close_local(stream_id, stream)
        if self.peer_flow_control:
            stream.send_window -= taken
            self._session_send_window -= taken
        return taken

    def consumed(self, stream_id: int, size: int) -> None:
        """The application has taken ``size`` received bytes of ``stream_id``: the window the
        peer may fill again (a WINDOW_UPDATE once half the window is free)."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.remote_open or size <= 0:
            return
        stream.unacknowledged += size
        if stream.unacknowledged >= self._receive_window // 2:
            self._outgoing += window_update_frame(stream_id, stream.unacknowledged)
            stream.receive_window += stream.unacknowledged
            stream.unacknowledged = 0

    def reset(self, stream_id: int, status: RstStatus = RstStatus.CANCEL) -> None:
        """Reset a stream (RST_STREAM) and forget it; a no-op for a stream already gone."""
        if self._streams.pop(stream_id, None) is None:
            return
        self._forget_peer(stream_id)
        self._outgoing += rst_stream_frame(stream_id, status)

    def ping(self) -> int:
        """Queue a PING and return its id; ``PingAnswered`` reports the echo."""
        self._check_usable()
        ping_id = self._next_ping
        self._next_ping = ping_id + 2 if ping_id + 2 <= 0xFFFFFFFF else 1 + ping_id % 2
        self._pings.add(ping_id)
        self._outgoing += ping_frame(ping_id)
        return ping_id

    def go_away(self, status: GoAwayStatus = GoAwayStatus.OK) -> None:
        """Tell the peer no new stream will be accepted (GOAWAY); open streams run on."""
        if not self.going_away:
            self.going_away = True
            self._outgoing += goaway_frame(self._last_peer_id, status)

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # -- what comes in -------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the peer, cut anywhere.

        Raises:
            PortForwardProtocolError: the peer broke SPDY (module docstring).
        """
        self._check_usable()
        try:
            for item in self._reader.feed(data):
                if isinstance(item, DataChunk):
                    self._on_data(item)
                else:
                    self._on_control(item)
        except PortForwardProtocolError as error:
            self._error = error
            self._outgoing += goaway_frame(self._last_peer_id, GoAwayStatus.PROTOCOL_ERROR)
            raise

    def next_event(self) -> SessionEvent | Literal[SessionSignal.NEED_DATA]:
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise self._error
        return NEED_DATA

    # -- the rules -----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error

    def _close_local(self, stream_id: int, stream: _Stream) -> None:
        stream.local_open = False
        if not stream.remote_open:
            self._streams.pop(stream_id, None)
            self._forget_peer(stream_id)

    def _close_remote(self, stream_id: int, stream: _Stream) -> None:
        stream.remote_open = False
        if not stream.local_open:
            self._streams.pop(stream_id, None)
            self._forget_peer(stream_id)

    def _forget_peer(self, stream_id: int) -> None:
        if stream_id % 2 != self._parity:
            self._peer_streams -= 1

    def _known_closed(self, stream_id: int) -> bool:
        """A stream that existed and is gone (frames in flight for it are dropped)."""
        if stream_id % 2 == self._parity:
            return stream_id < self._next_id
        return stream_id <= self._last_peer_id

    def _stream_for(self, stream_id: int, what: str) -> _Stream | None:
        stream = self._streams.get(stream_id)
        if stream is None and not self._known_closed(stream_id):
            raise PortForwardProtocolError(f"{what} for stream {stream_id}, which was never opened")
        return stream

    def _on_data(self, chunk: DataChunk) -> None:
        stream = self._stream_for(chunk.stream_id, "DATA")
        if stream is None:
            return
        if not stream.remote_open:
            raise PortForwardProtocolError(f"DATA on stream {chunk.stream_id} after its FIN")
        if self.peer_flow_control:
            stream.receive_window -= len(chunk.data)
            if stream.receive_window < 0:
                raise PortForwardProtocolError(
                    f"the peer overran stream {chunk.stream_id}'s flow-control window"
                )
        if chunk.data or chunk.fin:
            self._events.append(DataReceived(chunk.stream_id, chunk.data, chunk.fin))
        if chunk.fin:
            self._close_remote(chunk.stream_id, stream)

    def _on_control(self, frame: ControlFrame) -> None:
        kind = frame.type
        if kind is FrameType.SYN_STREAM:
            self._on_syn_stream(frame)
        elif kind in (FrameType.SYN_REPLY, FrameType.HEADERS):
            # Inflate first, whatever the stream: the peer's zlib context moves on regardless.
            headers = self._decompressor.decompress(frame.header_block)
            stream = self._stream_for(frame.stream_id, kind.name)
            if stream is None:
                return
            if kind is FrameType.SYN_REPLY:
                if not stream.ours or stream.replied:
                    raise PortForwardProtocolError(f"an unexpected SYN_REPLY on {frame.stream_id}")
                stream.replied = True
                self._events.append(StreamReplied(frame.stream_id, headers, frame.fin))
            else:
                self._events.append(HeadersReceived(frame.stream_id, headers, frame.fin))
            if frame.fin:
                self._close_remote(frame.stream_id, stream)
        elif kind is FrameType.RST_STREAM:
            if self._stream_for(frame.stream_id, "RST_STREAM") is not None:
                del self._streams[frame.stream_id]
                self._forget_peer(frame.stream_id)
                self._events.append(StreamReset(frame.stream_id, frame.value))
        elif kind is FrameType.SETTINGS:
            for key, value in frame.settings:
                if key == _SETTINGS_INITIAL_WINDOW_SIZE:
                    if not 1 <= value <= _MAX_WINDOW:
                        raise PortForwardProtocolError(f"an initial window size of {value}")
                    delta = value - self._peer_initial_window
                    self._peer_initial_window = value
                    self.peer_flow_control = True
                    for stream in self._streams.values():
                        stream.send_window += delta
        elif kind is FrameType.PING:
            if frame.value % 2 == self._parity % 2:
                if frame.value in self._pings:
                    self._pings.discard(frame.value)
                    self._events.append(PingAnswered(frame.value))
            else:
                self._outgoing += ping_frame(frame.value)
        elif kind is FrameType.GOAWAY:
            self.peer_going_away = True
            self._events.append(GoAwayReceived(frame.stream_id, frame.value))
        else:  # WINDOW_UPDATE
            self._on_window_update(frame)

    def _on_syn_stream(self, frame: ControlFrame) -> None:
        headers = self._decompressor.decompress(frame.header_block)
        stream_id = frame.stream_id
        if stream_id % 2 == self._parity:
            raise PortForwardProtocolError(f"the peer opened stream {stream_id}, an id of ours")
        if stream_id <= self._last_peer_id:
            raise PortForwardProtocolError(f"the peer reused stream id {stream_id}")
        self._last_peer_id = stream_id
        if self.going_away or self._peer_streams >= self._max_peer_streams:
            self._outgoing += rst_stream_frame(stream_id, RstStatus.REFUSED_STREAM)
            return
        self._peer_streams += 1
        self._streams[stream_id] = _Stream(
            ours=False,
            send_window=self._peer_initial_window,
            receive_window=self._receive_window,
            remote_open=not frame.fin,
        )
        self._events.append(StreamOpened(stream_id, headers, frame.fin))

    def _on_window_update(self, frame: ControlFrame) -> None:
        self.peer_flow_control = True
        if frame.value == 0:
            raise PortForwardProtocolError("a WINDOW_UPDATE of 0")
        if frame.stream_id == 0:
            self._session_send_window += frame.value
            if self._session_send_window > _MAX_WINDOW:
                raise PortForwardProtocolError("the session's window grew past 2**31-1")
            self._events.append(WindowOpened(0))
            return
        stream = self._stream_for(frame.stream_id, "WINDOW_UPDATE")
        if stream is None:
            return
        stream.send_window += frame.value
        if stream.send_window > _MAX_WINDOW:
            raise PortForwardProtocolError(f"stream {frame.stream_id}'s window grew past 2**31-1")
        self._events.append(WindowOpened(frame.stream_id))
