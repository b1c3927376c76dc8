"""The benchmark server's pure parts: client frames, server output frames, request heads."""

from __future__ import annotations

import struct

import pytest
from fast_programs import MAX_MESSAGE_BYTES, stdout_frames
from fast_wire import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_TEXT,
    ClientFrame,
    FrameDecoder,
    WireError,
    mask_frame,
    parse_head,
)
from hypothesis import given
from hypothesis import strategies as st

frames = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([OP_BINARY, OP_TEXT]), st.binary(max_size=70_000)),
        st.tuples(st.sampled_from([OP_PING, OP_CLOSE]), st.binary(max_size=125)),
    ),
    max_size=6,
)


@given(frames, st.binary(min_size=4, max_size=4), st.lists(st.integers(1, 9000), max_size=20))
def test_masked_client_frames_decode_whatever_the_reads(
    sent: list[tuple[int, bytes]], mask: bytes, cuts: list[int]
) -> None:
    wire = b"".join(mask_frame(payload, opcode, mask) for opcode, payload in sent)
    decoder = FrameDecoder()
    received: list[ClientFrame] = []
    offset = 0
    for cut in [*cuts, len(wire)]:
        decoder.feed(wire[offset : offset + cut])
        offset += cut
        received += decoder.frames()
    assert received == [ClientFrame(opcode, payload) for opcode, payload in sent]


def test_an_unmasked_client_frame_is_refused() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x82\x01\x01")
    with pytest.raises(WireError, match="not masked"):
        decoder.frames()


def _server_messages(wire: bytes) -> list[bytes]:
    """Split unmasked server frames (every one FIN + binary) into their payloads."""
    messages = []
    offset = 0
    while offset < len(wire):
        assert wire[offset] == 0x82
        length = wire[offset + 1]
        offset += 2
        if length == 126:
            (length,) = struct.unpack_from("!H", wire, offset)
            offset += 2
        elif length == 127:
            (length,) = struct.unpack_from("!Q", wire, offset)
            offset += 8
        messages.append(wire[offset : offset + length])
        offset += length
    return messages


@given(st.integers(0, 2_500_000), st.integers(512, 100_000) | st.integers(1, 8))
def test_stdout_frames_carry_exactly_the_bytes_asked_for(total: int, message_bytes: int) -> None:
    total = min(total, 4_000 * message_bytes)  # tiny messages: a few thousand are enough
    messages = _server_messages(b"".join(stdout_frames(total, message_bytes)))
    assert all(message[:1] == b"\x01" for message in messages)
    assert all(len(message) - 1 <= message_bytes for message in messages)
    assert all(len(message) - 1 == message_bytes for message in messages[:-1])
    assert b"".join(message[1:] for message in messages) == bytes(total)


def test_the_largest_message_size_is_served() -> None:
    messages = _server_messages(b"".join(stdout_frames(MAX_MESSAGE_BYTES + 5, MAX_MESSAGE_BYTES)))
    assert [len(message) for message in messages] == [MAX_MESSAGE_BYTES + 1, 6]


def test_pipelined_request_heads_parse_one_at_a_time() -> None:
    buffer = bytearray(
        b"GET /api/v1/namespaces/demo/pods?labelSelector=a%3Db HTTP/1.1\r\nHost: x\r\n"
        b"Accept: application/json\r\nAccept: */*\r\n\r\n"
        b"HEAD /version HTTP/1.1\r\nConnection: close\r\n\r\nGET /partial"
    )
    parsed = parse_head(buffer)
    assert parsed is not None
    first, length = parsed
    assert (first.method, first.path, first.query) == (
        "GET",
        "/api/v1/namespaces/demo/pods",
        [("labelSelector", "a=b")],
    )
    assert first.header("accept") == "application/json,*/*"
    del buffer[:length]
    parsed = parse_head(buffer)
    assert parsed is not None
    second, length = parsed
    assert (second.method, second.wants_close) == ("HEAD", True)
    del buffer[:length]
    assert parse_head(buffer) is None


def test_an_oversized_head_is_refused_with_431() -> None:
    with pytest.raises(WireError) as refused:
        parse_head(b"GET / HTTP/1.1\r\nX: " + b"y" * 70_000)
    assert refused.value.status == 431
