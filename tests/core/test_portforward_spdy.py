"""The SPDY/3.1 codec of port-forward's tunnel: frames, header blocks and the session's rules."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core import NEED_DATA, ExecError, ExecErrorCode
from kuber_exec_core.portforward import PortForwardProtocolError, Role, SpdySession
from kuber_exec_core.portforward._spdy_frames import (
    MAX_CONTROL_FRAME_BYTES,
    ControlFrame,
    DataChunk,
    FrameReader,
    FrameType,
    GoAwayStatus,
    RstStatus,
    data_frame,
    goaway_frame,
    headers_frame,
    ping_frame,
    rst_stream_frame,
    settings_frame,
    syn_reply_frame,
    syn_stream_frame,
    window_update_frame,
)
from kuber_exec_core.portforward._spdy_headers import (
    SPDY3_DICTIONARY,
    HeaderCompressor,
    HeaderDecompressor,
    decode_header_block,
    encode_header_block,
)
from kuber_exec_core.portforward._spdy_session import (
    DataReceived,
    GoAwayReceived,
    PingAnswered,
    SessionEvent,
    StreamOpened,
    StreamReplied,
    StreamReset,
    WindowOpened,
)

ids = st.integers(1, 2**31 - 1)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[last:point])
        last = point
    return pieces


def test_the_dictionary_is_the_spdy3_one() -> None:
    # The SPDY/3 draft's dictionary is 1423 bytes; its first entry is "options", its last text
    # "enq=0." (a wrong byte anywhere makes every header block unreadable to kubectl).
    assert len(SPDY3_DICTIONARY) == 1423
    assert SPDY3_DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert SPDY3_DICTIONARY.endswith(b"utf-,*,enq=0.")


frame_strategy = st.one_of(
    st.builds(
        lambda i, b, f: syn_stream_frame(i, b, fin=f), ids, st.binary(max_size=40), st.booleans()
    ),
    st.builds(
        lambda i, b, f: syn_reply_frame(i, b, fin=f), ids, st.binary(max_size=40), st.booleans()
    ),
    st.builds(lambda i, b: headers_frame(i, b), ids, st.binary(max_size=40)),
    st.builds(lambda i, s: rst_stream_frame(i, s), ids, st.sampled_from(RstStatus)),
    st.builds(
        lambda d: settings_frame(d),
        st.dictionaries(st.integers(0, 2**24 - 1), st.integers(0, 2**32 - 1), max_size=4),
    ),
    st.builds(ping_frame, st.integers(0, 2**32 - 1)),
    st.builds(lambda i, s: goaway_frame(i - 1, s), ids, st.sampled_from(GoAwayStatus)),
    st.builds(window_update_frame, st.integers(0, 2**31 - 1), ids),
    st.builds(lambda i, b, f: data_frame(i, b, fin=f), ids, st.binary(max_size=300), st.booleans()),
)


def parse_all(data: bytes, cuts: list[int]) -> list[ControlFrame | DataChunk]:
    reader = FrameReader()
    out: list[ControlFrame | DataChunk] = []
    for piece in chunks(data, cuts):
        out += reader.feed(piece)
    return out


def merge(items: list[ControlFrame | DataChunk]) -> list[object]:
    """DATA pieces joined back into one (stream, data, fin) per frame."""
    merged: list[object] = []
    for item in items:
        if isinstance(item, DataChunk):
            if item.frame_start:
                merged.append([item.stream_id, item.data, item.fin])
            else:
                last = merged[-1]
                assert isinstance(last, list)
                last[1] += item.data
                last[2] = item.fin
        else:
            merged.append(item)
    return merged


@settings(max_examples=200)
@given(st.lists(frame_strategy, max_size=12), st.lists(st.integers(0, 10**6), max_size=30))
def test_frames_read_the_same_however_the_bytes_are_cut(
    frames: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(frames)
    whole = merge(parse_all(stream, []))
    assert merge(parse_all(stream, cuts)) == whole
    assert len(whole) == len(frames)
    for raw, parsed in zip(frames, whole, strict=True):
        # Each frame re-parses alone to the same thing (the reader carries nothing over).
        assert merge(parse_all(raw, [])) == [parsed]


def test_a_data_frame_is_passed_on_in_pieces_never_buffered_whole() -> None:
    reader = FrameReader()
    header = data_frame(5, b"x" * 1000)[:8]
    assert reader.feed(header) == []
    assert reader.feed(b"x" * 10) == [DataChunk(5, b"x" * 10, fin=False, frame_start=True)]
    assert reader.feed(b"x" * 990 + ping_frame(2)) == [
        DataChunk(5, b"x" * 990, fin=False, frame_start=False),
        ControlFrame(FrameType.PING, 0, value=2),
    ]
    assert reader._buffer == b""


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (struct.pack(">HHI", 0x8002, 1, 10) + bytes(10), "version 2"),
        (struct.pack(">HHI", 0x8003, 5, 0), "unknown type 5"),
        (struct.pack(">HHI", 0x8003, 11, 0), "unknown type 11"),
        (struct.pack(">HHI", 0x8003, 1, MAX_CONTROL_FRAME_BYTES + 1), "limit"),
        (struct.pack(">HHI", 0x8003, 3, 4) + bytes(4), "RST_STREAM frame of 4 bytes"),
        (struct.pack(">HHI", 0x8003, 6, 8) + bytes(8), "PING frame of 8 bytes"),
        (struct.pack(">HHI", 0x8003, 9, 4) + bytes(4), "WINDOW_UPDATE frame of 4 bytes"),
        (struct.pack(">HHI", 0x8003, 4, 8) + struct.pack(">II", 5, 0), "SETTINGS frame of 8"),
        (struct.pack(">HHI", 0x8003, 1, 10) + bytes(10), "SYN_STREAM frame on stream 0"),
        (struct.pack(">II", 0, 3) + b"abc", "DATA frame on stream 0"),
    ],
)
def test_malformed_frames_are_protocol_errors(raw: bytes, words: str) -> None:
    reader = FrameReader()
    with pytest.raises(PortForwardProtocolError, match=words) as caught:
        reader.feed(raw)
    assert caught.value.code is ExecErrorCode.FAILED
    with pytest.raises(PortForwardProtocolError):
        reader.feed(b"")  # a broken reader stays broken


@given(
    st.lists(st.dictionaries(st.text(min_size=1).map(str.lower), st.text(), max_size=5), max_size=8)
)
def test_header_blocks_round_trip_through_one_context_per_direction(
    blocks: list[dict[str, str]],
) -> None:
    compressor, decompressor = HeaderCompressor(), HeaderDecompressor()
    for headers in blocks:
        expected = {k.lower(): v for k, v in headers.items()}
        if len(expected) != len(headers) or any(k != k.lower() for k in expected):
            continue
        assert decompressor.decompress(compressor.compress(headers)) == expected


def test_a_block_out_of_order_breaks_the_context() -> None:
    compressor, decompressor = HeaderCompressor(), HeaderDecompressor()
    compressor.compress({"a": "1" * 50})
    second = compressor.compress({"a": "1" * 50})
    with pytest.raises(PortForwardProtocolError):
        decompressor.decompress(second)


def test_a_header_block_that_inflates_past_the_budget_is_refused() -> None:
    bomb = zlib.compressobj(zdict=SPDY3_DICTIONARY)
    block = encode_header_block({"x": "a" * 1_000_000})
    compressed = bomb.compress(block) + bomb.flush(zlib.Z_SYNC_FLUSH)
    assert len(compressed) < 2000
    with pytest.raises(PortForwardProtocolError, match="inflates past 16384 bytes"):
        HeaderDecompressor().decompress(compressed)


@pytest.mark.parametrize(
    "block",
    [
        b"\x00\x00",
        struct.pack(">I", 1) + struct.pack(">I", 100) + b"x",
        struct.pack(">I", 10**6),
        struct.pack(">II", 1, 1) + b"A" + struct.pack(">I", 0),
        struct.pack(">II", 2, 1) + b"a" + struct.pack(">II", 0, 1) + b"a" + struct.pack(">I", 0),
        struct.pack(">II", 1, 1) + b"\xff" + struct.pack(">I", 0),
        struct.pack(">II", 0, 0),
    ],
)
def test_malformed_header_blocks_are_protocol_errors(block: bytes) -> None:
    with pytest.raises(PortForwardProtocolError):
        decode_header_block(block)


# -- the session -----------------------------------------------------------------------------


def events(session: SpdySession) -> list[SessionEvent]:
    """The session's events, without the window announcements (tested on their own)."""
    out: list[SessionEvent] = []
    while (event := session.next_event()) is not NEED_DATA:
        if not isinstance(event, WindowOpened):
            out.append(event)
    return out


def pipe(a: SpdySession, b: SpdySession) -> None:
    """Deliver everything queued each way until both are quiet."""
    while True:
        ab, ba = a.data_to_send(), b.data_to_send()
        if not ab and not ba:
            return
        b.receive_data(ab)
        a.receive_data(ba)


def test_a_stream_opens_replies_and_half_closes_each_way() -> None:
    client, server = SpdySession(Role.CLIENT), SpdySession(Role.SERVER)
    stream = client.open_stream({"streamType": "data", "port": "80"})
    assert stream == 1
    pipe(client, server)
    assert events(server) == [StreamOpened(1, {"streamtype": "data", "port": "80"}, fin=False)]
    server.reply(1, {})
    pipe(client, server)
    assert events(client) == [StreamReplied(1, {}, fin=False)]
    assert client.send_data(1, b"hello", fin=True) == 5
    server.send_data(1, b"world")
    pipe(client, server)
    assert events(server) == [DataReceived(1, b"hello", fin=True)]
    assert [e for e in events(client) if isinstance(e, DataReceived)] == [
        DataReceived(1, b"world", fin=False)
    ]
    server.send_data(1, b"", fin=True)
    pipe(client, server)
    assert events(client) == [DataReceived(1, b"", fin=True)]
    assert not client.is_open(1)
    assert not server.is_open(1)


def test_pings_are_echoed_and_answered() -> None:
    client, server = SpdySession(Role.CLIENT), SpdySession(Role.SERVER)
    ping_id = client.ping()
    assert ping_id % 2 == 1
    pipe(client, server)
    assert events(client) == [PingAnswered(ping_id)]
    assert all(not isinstance(e, PingAnswered) for e in events(server))


def test_flow_control_holds_a_sender_to_the_window_until_the_reader_consumes() -> None:
    client = SpdySession(Role.CLIENT, receive_window=1000)
    server = SpdySession(Role.SERVER, receive_window=1000)
    client.open_stream({})
    pipe(client, server)
    server.reply(1, {})
    pipe(client, server)
    events(server), events(client)
    assert client.peer_flow_control
    assert client.send_window(1) == 1000
    assert client.send_data(1, b"x" * 5000) == 1000
    assert client.send_window(1) == 0
    pipe(client, server)
    received = sum(len(e.data) for e in events(server) if isinstance(e, DataReceived))
    assert received == 1000
    server.consumed(1, 600)
    pipe(client, server)
    assert client.send_window(1) == 600


def test_a_peer_without_flow_control_is_neither_held_nor_checked() -> None:
    # client-go's spdystream sends no SETTINGS and no WINDOW_UPDATE, and ignores ours.
    client = SpdySession(Role.CLIENT)
    client.data_to_send()
    compressor = HeaderCompressor()
    stream = client.open_stream({})
    client.receive_data(syn_reply_frame(stream, compressor.compress({})))
    assert client.send_window(stream) is None
    assert client.send_data(stream, b"x" * 1_000_000) == 1_000_000
    client.receive_data(data_frame(stream, b"y" * 1_000_000))
    assert sum(len(e.data) for e in events(client) if isinstance(e, DataReceived)) == 1_000_000


def peer_opening(session: SpdySession, *frames: bytes) -> None:
    session.receive_data(b"".join(frames))


def test_a_window_overrun_ends_the_session() -> None:
    server = SpdySession(Role.SERVER, receive_window=100)
    compressor = HeaderCompressor()
    with pytest.raises(PortForwardProtocolError, match="overran") as caught:
        peer_opening(
            server,
            settings_frame({7: 65536}),
            syn_stream_frame(1, compressor.compress({})),
            data_frame(1, b"x" * 101),
        )
    assert isinstance(caught.value, ExecError)
    # The session told the peer why (GOAWAY PROTOCOL_ERROR) and stays broken.
    assert server.data_to_send().endswith(goaway_frame(1, GoAwayStatus.PROTOCOL_ERROR))
    with pytest.raises(PortForwardProtocolError):
        server.receive_data(b"")
    with pytest.raises(PortForwardProtocolError):
        server.open_stream({})


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (
            lambda c: syn_stream_frame(1, c.compress({})) + syn_stream_frame(1, c.compress({})),
            "reused",
        ),
        (
            lambda c: syn_stream_frame(3, c.compress({})) + syn_stream_frame(1, c.compress({})),
            "reused",
        ),
        (lambda c: syn_stream_frame(2, c.compress({})), "an id of ours"),
        (lambda c: data_frame(7, b"x"), "never opened"),
        (lambda c: syn_reply_frame(9, c.compress({})), "never opened"),
        (lambda c: window_update_frame(1, 5), "never opened"),
        (
            lambda c: (
                syn_stream_frame(1, c.compress({}))
                + data_frame(1, b"", fin=True)
                + data_frame(1, b"x")
            ),
            "after its FIN",
        ),
        (
            lambda c: syn_stream_frame(1, c.compress({})) + window_update_frame(1, 2**31 - 1),
            "grew past",
        ),
        (lambda c: syn_stream_frame(1, b"not zlib at all"), "not valid zlib"),
        (lambda c: settings_frame({7: 0}), "initial window size of 0"),
    ],
)
def test_hostile_peers_end_the_session_with_a_clear_error(build, words: str) -> None:  # type: ignore[no-untyped-def]
    server = SpdySession(Role.SERVER)
    with pytest.raises(PortForwardProtocolError, match=words):
        server.receive_data(build(HeaderCompressor()))


def test_streams_past_the_limit_are_refused_and_the_session_lives_on() -> None:
    server = SpdySession(Role.SERVER, max_peer_streams=2)
    server.data_to_send()
    compressor = HeaderCompressor()
    server.receive_data(b"".join(syn_stream_frame(i, compressor.compress({})) for i in (1, 3, 5)))
    assert [e.stream_id for e in events(server) if isinstance(e, StreamOpened)] == [1, 3]
    assert server.data_to_send() == rst_stream_frame(5, RstStatus.REFUSED_STREAM)
    server.receive_data(rst_stream_frame(1, RstStatus.CANCEL))
    assert events(server) == [StreamReset(1, RstStatus.CANCEL)]
    server.receive_data(syn_stream_frame(7, compressor.compress({})))
    assert [e.stream_id for e in events(server) if isinstance(e, StreamOpened)] == [7]


def test_goaway_stops_new_streams() -> None:
    client = SpdySession(Role.CLIENT)
    client.receive_data(goaway_frame(0))
    assert events(client) == [GoAwayReceived(0, 0)]
    with pytest.raises(ExecError, match="going away"):
        client.open_stream({})


@settings(max_examples=300)
@given(st.binary(max_size=400), st.lists(st.integers(0, 1000), max_size=10))
def test_random_bytes_never_escape_as_anything_but_a_protocol_error(
    data: bytes, cuts: list[int]
) -> None:
    for role in Role:
        session = SpdySession(role, header_budget=1024)
        try:
            for piece in chunks(data, cuts):
                session.receive_data(piece)
                events(session)
        except PortForwardProtocolError:
            continue
        # Whatever was accepted left bounded state: at most one control frame buffered.
        assert len(session._reader._buffer) <= 8 + MAX_CONTROL_FRAME_BYTES


@settings(max_examples=100)
@given(
    st.lists(st.binary(max_size=3000), min_size=1, max_size=6),
    st.lists(st.integers(0, 10**5), max_size=20),
    st.integers(200, 5000),
)
def test_bytes_arrive_whole_and_in_order_under_flow_control_and_any_cuts(
    payloads: list[bytes], cuts: list[int], window: int
) -> None:
    client = SpdySession(Role.CLIENT, receive_window=window)
    server = SpdySession(Role.SERVER, receive_window=window)
    streams = [client.open_stream({"n": str(i)}) for i in range(len(payloads))]
    pending = dict(zip(streams, payloads, strict=True))
    received: dict[int, bytearray] = {s: bytearray() for s in streams}
    finished: set[int] = set()
    replied = False
    for _ in range(10_000):
        wire = client.data_to_send()
        for piece in chunks(wire, cuts):
            server.receive_data(piece)
        for event in events(server):
            if isinstance(event, StreamOpened):
                server.reply(event.stream_id, {})
            elif isinstance(event, DataReceived):
                received[event.stream_id] += event.data
                server.consumed(event.stream_id, len(event.data))
                if event.fin:
                    finished.add(event.stream_id)
        client.receive_data(server.data_to_send())
        for event in events(client):
            replied = replied or isinstance(event, StreamReplied)
        if replied:
            for stream_id, rest in list(pending.items()):
                taken = (
                    client.send_data(stream_id, rest, fin=True)
                    if client.send_window(stream_id) or not rest
                    else 0
                )
                if taken == len(rest):
                    del pending[stream_id]
                else:
                    pending[stream_id] = rest[taken:]
        if finished == set(streams):
            break
    assert {s: bytes(b) for s, b in received.items()} == dict(zip(streams, payloads, strict=True))
