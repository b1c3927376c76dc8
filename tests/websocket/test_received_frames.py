"""The sans-IO core under both bindings' WebSocket transports: ``UpgradeAnswer``,
``ReceivedFrames`` and ``ClientConnection``, without a network or an event loop.

A real ``websockets`` handshake between an :func:`open_protocol` client and a ``ServerProtocol``
puts the client in OPEN state; the same ServerProtocol writes the frames a server sends, and
hand-crafted bytes are the frames no server should send. What the client writes back (pongs,
Close frames) is read by a ServerProtocol, and ``websockets``' own ClientProtocol is the
reference parser for valid streams.
"""

from __future__ import annotations

import itertools
import logging
import random
from dataclasses import dataclass

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.channels import Message
from kuber_exec_core.transport import MAX_SERVER_MESSAGE_BYTES, message_too_big
from kuber_exec_websocket import (
    ClientConnection,
    ConnectionEnded,
    ReceivedFrames,
    UpgradeAnswer,
    open_protocol,
)

V5 = "v5.channel.k8s.io"
URL = "ws://127.0.0.1:1/exec"
#: The subprotocols every upgrade here offers.
OFFERED = (V5,)
LIMIT = 4096
BROKE = "the server broke the WebSocket protocol"
INVALID_UTF8 = "the server sent invalid UTF-8"
#: Close codes a server may send (RFC 6455 7.4; what websockets accepts).
VALID_CODES = st.sampled_from([*range(1000, 1004), *range(1007, 1015)]) | st.integers(3000, 4999)
INVALID_CODES = st.sampled_from([1004, 1005, 1006, 1015]) | st.integers(0, 65535).filter(
    lambda code: not 1000 <= code <= 1015 and not 3000 <= code <= 4999
)
Reply = tuple[Opcode, bytes | int]


@dataclass
class Flag:
    """A ``Wakeable`` that counts how often it was set."""

    times: int = 0

    def set(self) -> None:
        self.times += 1


def handshake() -> tuple[ClientProtocol, ServerProtocol, Response]:
    """An ``open_protocol`` client whose request a ServerProtocol accepted (not yet sent)."""
    client, _ = open_protocol(
        URL, subprotocols=OFFERED, headers=(), logger=logging.getLogger("test")
    )
    server = ServerProtocol(subprotocols=[Subprotocol(V5)])
    server.receive_data(b"".join(client.data_to_send()))
    [request] = server.events_received()
    assert isinstance(request, Request)
    return client, server, server.accept(request)


def response_bytes(server: ServerProtocol, response: Response) -> bytes:
    server.send_response(response)
    return b"".join(server.data_to_send())


@dataclass
class Peer:
    """An OPEN client with its parser, and the server that answered its upgrade."""

    client: ClientProtocol
    server: ServerProtocol
    received: ReceivedFrames

    def written(self) -> bytes:
        """What the server queued since the last call."""
        return b"".join(self.server.data_to_send())

    def take(self) -> list[Message]:
        """Every message parsed and not yet taken."""
        messages = []
        while (message := self.received.next_message()) is not None:
            messages.append(message)
        return messages

    def replies(self) -> list[Reply]:
        """What the client wrote since the last call."""
        return replies(self.client)


def connect(limit: int = MAX_SERVER_MESSAGE_BYTES) -> Peer:
    client, server, response = handshake()
    # The 101 came alone, so no frame is behind it.
    assert UpgradeAnswer(client, OFFERED).receive_data(response_bytes(server, response)) == b""
    assert client.state is State.OPEN
    return Peer(client, server, ReceivedFrames(client, limit))


def sent(client: ClientProtocol) -> list[Frame]:
    """The frames the client wrote since the last call, as a server reads them."""
    reader = ServerProtocol(state=State.OPEN, max_size=None)
    reader.receive_data(b"".join(client.data_to_send()))
    return [event for event in reader.events_received() if isinstance(event, Frame)]


def replies(client: ClientProtocol) -> list[Reply]:
    """What the client wrote: a Close as its code (1005 when empty), others as their payload."""
    return [
        (
            frame.opcode,
            Close.parse(frame.data).code if frame.opcode is Opcode.CLOSE else bytes(frame.data),
        )
        for frame in sent(client)
    ]


def raw(first: int, payload: bytes, *, mask: bool = False) -> bytes:
    """A frame with any first byte (FIN, RSV, opcode), unchecked, masked if asked."""
    size, bit = len(payload), 0x80 if mask else 0
    if size < 126:
        head = bytes([first, bit | size])
    else:
        wide = size >= 65536
        head = bytes([first, bit | (127 if wide else 126)]) + size.to_bytes(8 if wide else 2, "big")
    if mask:
        key = b"\x01\x02\x03\x04"
        payload = bytes(byte ^ key[index % 4] for index, byte in enumerate(payload))
        head += key
    return head + payload


def bytewise(data: bytes) -> list[bytes]:
    """data as one-byte reads."""
    return [data[index : index + 1] for index in range(len(data))]


def ended(peer: Peer) -> ConnectionEnded:
    """How the connection ended."""
    end = peer.received.end
    assert end is not None
    return end


# -- 1. any valid stream ---------------------------------------------------------------------


@dataclass(frozen=True)
class Msg:
    """A message the server sends, maybe in fragments, maybe with pings among them."""

    content: Message
    cuts: list[int]  # fragment boundaries in the encoded payload
    pings: list[bytes]  # pings sent after its fragments, each after one


#: Payload sizes in each of the three length forms (7-bit, 16-bit, 64-bit), evenly.
SIZES = st.sampled_from([(0, 125), (126, 65535), (65536, 70000)]).flatmap(
    lambda bounds: st.integers(*bounds)
)
BINARY = st.builds(lambda size, seed: random.Random(seed).randbytes(size), SIZES, st.integers())
#: Text of every length form too: non-ASCII characters repeated to a length.
TEXT = st.text() | st.builds(
    lambda chars, size: (chars * size)[:size], st.text(min_size=1, max_size=8), SIZES
)
PINGS = st.just(b"\x7e" * 125) | st.binary(max_size=125)  # 125 bytes: the most a ping holds
MESSAGES = st.builds(
    Msg, BINARY | TEXT, st.lists(st.integers(0, 70000), max_size=4), st.lists(PINGS)
)
PLANS = st.lists(MESSAGES, max_size=6)


def write(
    server: ServerProtocol, plan: list[Msg], code: int | None, reason: str
) -> tuple[bytes, list[int], list[Message], list[bytes]]:
    """The server's bytes for plan then a Close, where each frame starts, the messages and the
    ping payloads, in order."""
    stream, starts, messages, pings = bytearray(), [], [], []

    def emit() -> None:
        starts.append(len(stream))
        stream.extend(b"".join(server.data_to_send()))

    for item in plan:
        messages.append(item.content)
        data = item.content if isinstance(item.content, bytes) else item.content.encode()
        bounds = [0, *sorted(cut % (len(data) + 1) for cut in item.cuts), len(data)]
        parts = [data[start:end] for start, end in itertools.pairwise(bounds)]
        send = server.send_binary if isinstance(item.content, bytes) else server.send_text
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            (send if index == 0 else server.send_continuation)(part, fin=last)
            emit()
            if index < len(item.pings):
                # RFC 6455 5.4: control frames may come between a message's fragments too.
                server.send_ping(item.pings[index])
                pings.append(item.pings[index])
                emit()
    if code is None:
        server.send_close()
    else:
        server.send_close(code, reason)
    emit()
    return bytes(stream), starts, messages, pings


@st.composite
def cut_points(draw: st.DrawFn, size: int, starts: list[int]) -> list[int]:
    """Where to split the stream: anywhere, just inside frame headers, and byte by byte
    over a window."""
    anywhere = draw(st.lists(st.integers(0, size), max_size=20))
    inside_headers = [
        start + offset
        for start, offset in draw(
            st.lists(st.tuples(st.sampled_from(starts), st.integers(1, 10)), max_size=20)
        )
    ]
    window = draw(st.integers(0, size))
    byte_by_byte = range(window, window + draw(st.integers(0, 64)))
    return sorted({cut for cut in [*anywhere, *inside_headers, *byte_by_byte] if 0 < cut < size})


def reference(stream: bytes) -> tuple[list[Message], list[Reply]]:
    """The messages and replies websockets' own ClientProtocol makes of stream."""
    client = ClientProtocol(parse_uri(URL), state=State.OPEN, max_size=None)
    client.receive_data(stream)
    messages: list[Message] = []
    parts: list[bytes] = []
    for frame in client.events_received():
        assert isinstance(frame, Frame)
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            text, parts = frame.opcode is Opcode.TEXT, []
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            parts.append(bytes(frame.data))
            if frame.fin:
                messages.append(b"".join(parts).decode() if text else b"".join(parts))
    return messages, replies(client)


def typed(messages: list[Message]) -> list[tuple[type, Message]]:
    return [(type(message), message) for message in messages]


@given(plan=PLANS, code=st.none() | VALID_CODES, reason=st.text(max_size=20), data=st.data())
def test_any_valid_stream_in_any_chunks(
    plan: list[Msg], code: int | None, reason: str, data: st.DataObject
) -> None:
    """Every message comes out once, whole, in order and typed, however the reads cut the
    stream; every ping gets its pong, in order; the Close is echoed with its code and the end
    is clean; reading the stream in one piece, or with websockets, gives the same."""
    peer = connect()
    # websockets sends a reason only with a code.
    stream, starts, messages, pings = write(peer.server, plan, code, reason if code else "")
    cuts = data.draw(cut_points(len(stream), starts))
    taken: list[Message] = []
    for start, stop in itertools.pairwise([0, *cuts, len(stream)]):
        assert peer.received.end is None  # the Close is the stream's last frame
        peer.received.receive_data(stream[start:stop])
        taken += peer.take()  # a binding takes messages between reads
    expected_replies: list[Reply] = [(Opcode.PONG, ping) for ping in pings]
    expected_replies.append((Opcode.CLOSE, 1005 if code is None else code))
    assert typed(taken) == typed(messages)
    assert peer.replies() == expected_replies
    end = ended(peer)
    assert end.clean
    assert end.reason == (message_too_big(MAX_SERVER_MESSAGE_BYTES) if code == 1009 else None)
    assert peer.received.close_seen
    assert peer.received.closing_handshake_done

    whole = connect()
    whole.received.receive_data(stream)
    assert typed(whole.take()) == typed(messages)
    assert whole.replies() == expected_replies
    assert ended(whole).clean
    assert whole.received.closing_handshake_done

    reference_messages, reference_replies = reference(stream)
    assert typed(reference_messages) == typed(messages)
    assert reference_replies == expected_replies


# -- 2. the end comes after the messages before it ----------------------------------------------


@pytest.mark.parametrize("reads", ["one read", "cut inside the Close", "byte by byte"])
def test_end_waits_until_every_earlier_message_is_taken(reads: str) -> None:
    """The server's Close is noted (and the waiter woken) at once, but ``end`` is set only
    once every message before it was taken; nothing behind the Close is parsed."""
    peer = connect()
    peer.server.send_binary(b"one")
    peer.server.send_text(b"two")
    before = peer.written()
    peer.server.send_close(1000)
    stream = before + peer.written() + raw(0x82, b"late")
    cut = len(before) + 1
    pieces = {
        "one read": [stream],
        "cut inside the Close": [stream[:cut], stream[cut:]],
        "byte by byte": bytewise(stream),
    }[reads]
    for piece in [*pieces, raw(0x82, b"later")]:
        peer.received.receive_data(piece)
    assert peer.received.close_seen
    assert peer.received.end is None
    assert peer.received.next_message() == b"one"
    assert peer.received.next_message() == "two"
    assert peer.received.end is None  # not yet asked for the message after "two"
    assert peer.received.next_message() is None
    assert ended(peer).clean
    assert peer.replies() == [(Opcode.CLOSE, 1000)]


# -- 3. and 4. a server that breaks the protocol ------------------------------------------------


def feed_violation(bad: bytes, *, byte_by_byte: bool) -> Peer:
    """A peer that read a message, then bad, then a message (in the same read or byte by
    byte), then that message again in a later read."""
    peer = connect()
    peer.server.send_binary(b"before")
    before = peer.written()
    peer.server.send_binary(b"after")
    after = peer.written()
    stream = before + bad + after
    for read in [*(bytewise(stream) if byte_by_byte else [stream]), after]:
        peer.received.receive_data(read)
    return peer


def assert_failed(peer: Peer, code: int, reason: str) -> None:
    """The message before the violation came out and nothing after it; our Close carries
    code; the end is unclean and says reason; the end of the stream changes nothing."""
    assert peer.received.end is None  # b"before" is still to be taken
    assert peer.take() == [b"before"]
    end = ended(peer)
    assert not end.clean
    assert end.reason is not None
    assert reason in end.reason
    assert peer.replies() == [(Opcode.CLOSE, code)]
    peer.received.receive_eof()
    peer.received.ended(ConnectionEnded(clean=True))
    assert peer.received.end is end  # the first reason stays
    assert not peer.received.closing_handshake_done


PROTOCOL_VIOLATIONS = {
    "masked": (raw(0x82, b"x", mask=True), "a masked frame"),
    "rsv1": (raw(0x80 | 0x40 | 0x2, b"x"), "reserved bits"),
    "rsv2": (raw(0x80 | 0x20 | 0x1, b"x"), "reserved bits"),
    "rsv3": (raw(0x80 | 0x10 | 0x9, b"x"), "reserved bits"),
    "fragmented ping": (raw(0x09, b"p"), "a fragmented control frame"),
    "fragmented close": (raw(0x08, (1000).to_bytes(2, "big")), "a fragmented control frame"),
    "long ping": (raw(0x89, b"p" * 126), "a control frame over 125 bytes"),
    "long pong": (raw(0x8A, b"p" * 65536), "a control frame over 125 bytes"),
    "stray continuation": (raw(0x80, b"x"), "a continuation frame outside a message"),
    "data in fragments": (raw(0x02, b"a") + raw(0x81, b"b"), "a new message inside a fragmented"),
    "one-byte close": (raw(0x88, b"\x03"), "a Close frame with a one-byte payload"),
    "close in fragments": (
        raw(0x02, b"a") + raw(0x88, (1000).to_bytes(2, "big")),
        "a Close frame inside a fragmented message",
    ),
}


@pytest.mark.parametrize("byte_by_byte", [False, True])
@pytest.mark.parametrize("case", PROTOCOL_VIOLATIONS)
def test_protocol_violation_fails_with_1002(case: str, byte_by_byte: bool) -> None:
    """A frame no server may send fails the connection with 1002, after the messages
    before it and before anything behind it."""
    bad, what = PROTOCOL_VIOLATIONS[case]
    peer = feed_violation(bad, byte_by_byte=byte_by_byte)
    assert_failed(peer, 1002, f"{BROKE}: {what}")


@pytest.mark.parametrize("byte_by_byte", [False, True])
@pytest.mark.parametrize("fin", [0x80, 0])
@pytest.mark.parametrize("opcode", [3, 4, 5, 6, 7, 11, 12, 13, 14, 15])
def test_unknown_opcode_fails_with_1002(opcode: int, fin: int, byte_by_byte: bool) -> None:
    """Opcodes 3-7 and 11-15 are reserved (every one of them, final or not): 1002."""
    peer = feed_violation(raw(fin | opcode, b"?"), byte_by_byte=byte_by_byte)
    assert_failed(peer, 1002, f"{BROKE}: unknown opcode {opcode}")


@given(code=INVALID_CODES, byte_by_byte=st.booleans())
@example(code=1005, byte_by_byte=False)
@example(code=1006, byte_by_byte=True)
@example(code=999, byte_by_byte=False)
@example(code=2000, byte_by_byte=True)
@example(code=5000, byte_by_byte=False)
def test_invalid_close_code_fails_with_1002(code: int, byte_by_byte: bool) -> None:
    """A Close whose code no endpoint may send: 1002, not a clean close."""
    peer = feed_violation(raw(0x88, code.to_bytes(2, "big")), byte_by_byte=byte_by_byte)
    assert_failed(peer, 1002, f"{BROKE}: close code {code}")
    assert not peer.received.close_seen


INVALID_UTF8_CASES = {
    "text": raw(0x81, b"caf\xc3"),
    "fragmented text": raw(0x01, b"ok \xe2\x82") + raw(0x00, b"\x28") + raw(0x80, b"!"),
    "overlong": raw(0x81, b"\xc0\xaf"),
    "surrogate": raw(0x81, "\ud800".encode("utf-8", "surrogatepass")),
    "close reason": raw(0x88, (1000).to_bytes(2, "big") + b"bye \xff"),
}


@pytest.mark.parametrize("byte_by_byte", [False, True])
@pytest.mark.parametrize("case", INVALID_UTF8_CASES)
def test_invalid_utf8_fails_with_1007(case: str, byte_by_byte: bool) -> None:
    """Text, whole or fragmented, and a Close reason must be UTF-8: 1007."""
    peer = feed_violation(INVALID_UTF8_CASES[case], byte_by_byte=byte_by_byte)
    assert_failed(peer, 1007, INVALID_UTF8)
    assert ended(peer).reason == INVALID_UTF8


# -- 5. the message size limit -----------------------------------------------------------------


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("size", [LIMIT + 1, 5000, 70000])
@pytest.mark.parametrize("first", [0x82, 0x81, 0x02, 0x01], ids=["binary", "text", "bin-", "txt-"])
def test_frame_over_the_limit_is_refused_at_its_header(first: int, size: int, split: bool) -> None:
    """A frame whose header says it is over the limit fails the connection with 1009 before
    its payload arrives (the header alone, whole or cut in two reads)."""
    peer = connect(LIMIT)
    frame = raw(first, bytes(size))
    header = frame[: len(frame) - size]
    for read in [header[:1], header[1:]] if split else [header]:
        peer.received.receive_data(read)
    assert peer.take() == []
    end = ended(peer)
    assert not end.clean
    assert end.reason == message_too_big(LIMIT)
    assert "4096 bytes message limit" in end.reason
    assert peer.replies() == [(Opcode.CLOSE, 1009)]


@pytest.mark.parametrize(("extra", "refused"), [(0, False), (1, True)])
@pytest.mark.parametrize("opcode", [Opcode.BINARY, Opcode.TEXT])
def test_fragmented_message_limit(opcode: Opcode, extra: int, refused: bool) -> None:
    """Fragments count together: exactly the limit is a message, one byte more is 1009."""
    peer = connect(LIMIT)
    send = peer.server.send_binary if opcode is Opcode.BINARY else peer.server.send_text
    for _ in range(2):  # the second message counts from zero again
        send(b"a" * 3000, fin=False)
        peer.server.send_ping(b"between")
        peer.server.send_continuation(b"b" * 1000, fin=False)
        peer.server.send_continuation(b"c" * (96 + extra), fin=True)
    peer.received.receive_data(peer.written())
    data = b"a" * 3000 + b"b" * 1000 + b"c" * (96 + extra)
    messages = peer.take()
    if refused:
        assert messages == []
        assert ended(peer).reason == message_too_big(LIMIT)
        assert peer.replies() == [(Opcode.PONG, b"between"), (Opcode.CLOSE, 1009)]
    else:
        assert messages == [data if opcode is Opcode.BINARY else data.decode()] * 2
        assert peer.received.end is None
        assert peer.replies() == [(Opcode.PONG, b"between")] * 2


@pytest.mark.parametrize("byte_by_byte", [False, True])
@pytest.mark.parametrize("opcode", [Opcode.BINARY, Opcode.TEXT])
def test_message_exactly_at_the_limit_is_accepted(opcode: Opcode, byte_by_byte: bool) -> None:
    """``max_message_bytes`` is the largest message accepted, not the first refused."""
    peer = connect(LIMIT)
    (peer.server.send_binary if opcode is Opcode.BINARY else peer.server.send_text)(b"z" * LIMIT)
    written = peer.written()
    # Whole, a frame is checked in line; cut, once its header is complete.
    for read in bytewise(written) if byte_by_byte else [written]:
        peer.received.receive_data(read)
    assert typed(peer.take()) == typed([b"z" * LIMIT if opcode is Opcode.BINARY else "z" * LIMIT])
    assert peer.received.end is None
    assert peer.replies() == []


# -- 6. the server's Close ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "echo", "reason"),
    [
        (b"", b"", None),
        (b"\x03\xf1too big", b"\x03\xf1", message_too_big(LIMIT)),  # 1009: ours was too big
        (b"\x0f\xa0" + b"r" * 123, b"\x0f\xa0", None),  # 4000, 125 bytes: the most allowed
    ],
    ids=["empty", "1009", "longest"],
)
def test_server_close_is_echoed_and_clean(payload: bytes, echo: bytes, reason: str | None) -> None:
    """A Close is answered with its code, or none when it had none (RFC 6455 5.5.1); the end
    is clean, and a 1009 names our message limit."""
    peer = connect(LIMIT)
    peer.received.receive_data(raw(0x88, payload))
    end = ended(peer)
    assert (end.clean, end.reason) == (True, reason)
    assert [(frame.opcode, frame.data) for frame in sent(peer.client)] == [(Opcode.CLOSE, echo)]
    assert peer.received.closing_handshake_done


# -- 7. the end of the stream ------------------------------------------------------------------


EOF_CASES = {
    "mid-header": raw(0x82, bytes(300))[:3],
    "mid-payload": raw(0x82, b"payload")[:5],
    "mid-control-frame": raw(0x89, b"ping")[:4],
    "mid-fragmented-message": raw(0x02, b"first part"),
}


@pytest.mark.parametrize("case", EOF_CASES)
def test_eof_before_a_close_is_unclean(case: str) -> None:
    """The stream ending inside a frame or a fragmented message: an unclean end, after the
    whole messages before it; nothing is written."""
    peer = connect()
    peer.server.send_text(b"whole")
    peer.received.receive_data(peer.written() + EOF_CASES[case])
    peer.received.receive_eof()
    assert peer.received.end is None
    assert peer.take() == ["whole"]
    end = ended(peer)
    assert (end.clean, end.reason) == (False, None)
    assert peer.replies() == []


def test_eof_after_the_close_stays_clean() -> None:
    """The server drops TCP after its Close: still a clean end."""
    peer = connect()
    peer.server.send_close(1000)
    peer.received.receive_data(peer.written())
    peer.received.receive_eof()
    peer.received.ended(ConnectionEnded(clean=False, reason="dropped"))
    end = ended(peer)
    assert (end.clean, end.reason) == (True, None)


# -- 8. and 9. pings ---------------------------------------------------------------------------


@given(count=st.integers(1, 300), answered=st.data())
def test_pong_answers_its_ping_and_every_earlier_one(count: int, answered: st.DataObject) -> None:
    """Each ping has its own payload; the pong to one answers it and every earlier ping,
    and no later one."""
    peer = connect()
    flags = [Flag() for _ in range(count)]
    payloads = [peer.received.ping(flag) for flag in flags]
    assert len(set(payloads)) == count
    index = answered.draw(st.integers(0, count - 1))
    peer.server.send_pong(payloads[index])
    peer.received.receive_data(peer.written())
    assert [flag.times for flag in flags] == [1] * (index + 1) + [0] * (count - index - 1)
    assert all(peer.received.pong_arrived(payload) for payload in payloads[: index + 1])
    assert peer.received.end is None


@given(payload=st.binary(max_size=125))
def test_an_unsolicited_pong_answers_no_ping(payload: bytes) -> None:
    """A pong whose payload is no waiting ping's (a server's heartbeat, RFC 6455 5.5.3) wakes
    nothing and ends nothing."""
    peer = connect()
    flags = [Flag() for _ in range(3)]
    payloads = [peer.received.ping(flag) for flag in flags]
    assume(payload not in payloads)
    peer.server.send_pong(payload)
    peer.received.receive_data(peer.written())
    assert [flag.times for flag in flags] == [0, 0, 0]
    assert peer.received.end is None
    assert not peer.received.close_seen


def test_end_wakes_waiting_pings_and_they_report_no_pong() -> None:
    """When the connection ends, every waiting ping wakes and learns its pong never came."""
    peer = connect()
    answered, waiting = Flag(), Flag()
    first = peer.received.ping(answered)
    second = peer.received.ping(waiting)
    peer.server.send_pong(first)
    peer.received.receive_data(peer.written())
    assert (answered.times, waiting.times) == (1, 0)
    peer.received.ended(ConnectionEnded(clean=False, reason="aborted"))
    assert waiting.times >= 1
    assert peer.received.pong_arrived(first)
    assert not peer.received.pong_arrived(second)
    assert (ended(peer).clean, ended(peer).reason) == (False, "aborted")


def test_ping_after_our_close_is_not_answered() -> None:
    """Once our Close went out, a ping gets no pong; the server's Close then completes the
    closing handshake without an echo."""
    peer = connect()
    peer.client.send_close(1000)
    assert peer.replies() == [(Opcode.CLOSE, 1000)]
    peer.server.send_ping(b"late")
    peer.received.receive_data(peer.written())
    assert peer.replies() == []
    assert not peer.received.closing_handshake_done
    peer.server.send_close(1000)
    peer.received.receive_data(peer.written())
    assert peer.replies() == []
    assert peer.received.closing_handshake_done
    assert ended(peer).clean


# -- 10. the upgrade's answer ------------------------------------------------------------------


def test_101_read_byte_by_byte_hands_back_the_frames_behind_it() -> None:
    """A 101 cut into single bytes is whole only at its blank line; the frames that came in
    the same read are handed back, for ``ReceivedFrames``."""
    client, server, response = handshake()
    head = response_bytes(server, response)
    server.send_binary(b"first")
    server.send_text(b"second")
    frames = b"".join(server.data_to_send())
    answer = UpgradeAnswer(client, OFFERED)
    for read in bytewise(head[:-1]):
        assert answer.receive_data(read) is None
    assert answer.receive_data(head[-1:] + frames) == frames
    assert client.state is State.OPEN
    received = ReceivedFrames(client)
    received.receive_data(frames)
    assert [received.next_message(), received.next_message()] == [b"first", "second"]


STATUS_403 = (
    b'{"kind":"Status","apiVersion":"v1","status":"Failure",'
    b'"message":"pods \\"web\\" is forbidden","reason":"Forbidden","code":403}'
)


def refusal(status: int, body: bytes, *, length: bool) -> bytes:
    """An HTTP refusal of the upgrade, with or without Content-Length."""
    head = f"HTTP/1.1 {status} Refused\r\nContent-Type: application/json\r\n"
    if length:
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


@pytest.mark.parametrize("reads", ["one read", "head then body", "byte by byte"])
@pytest.mark.parametrize(("status", "body"), [(403, STATUS_403), (404, b"404 page not found")])
def test_refusal_with_a_length_raises_once_its_body_is_read(
    status: int, body: bytes, reads: str
) -> None:
    """A refusal with Content-Length is the seed's error (with the HTTP status and the
    Status's reason) as soon as its body is whole."""
    client, _, _ = handshake()
    answer = UpgradeAnswer(client, OFFERED)
    data = refusal(status, body, length=True)
    head = data.index(b"\r\n\r\n") + 4
    pieces = {
        "one read": [data],
        "head then body": [data[:head], data[head:]],
        "byte by byte": bytewise(data),
    }[reads]
    for piece in pieces[:-1]:
        assert answer.receive_data(piece) is None
    with pytest.raises(ExecError) as raised:
        answer.receive_data(pieces[-1])
    assert raised.value.http_status == status
    assert raised.value.status_reason == ("Forbidden" if status == 403 else None)
    # An RBAC 403 (a Forbidden Status) is the server refusing the requester.
    forbidden = ExecErrorCode.TARGET_FORBIDDEN if status == 403 else ExecErrorCode.FAILED
    assert raised.value.code is forbidden


def test_refusal_without_a_length_raises_at_the_end_of_the_stream() -> None:
    """Without Content-Length the body runs to the end of the stream: only then the error."""
    client, _, _ = handshake()
    answer = UpgradeAnswer(client, OFFERED)
    data = refusal(403, STATUS_403, length=False)
    assert answer.receive_data(data[:40]) is None
    assert answer.receive_data(data[40:]) is None
    assert answer.receive_data(b"") is None
    with pytest.raises(ExecError) as raised:
        answer.receive_eof()
    assert (raised.value.http_status, raised.value.status_reason) == (403, "Forbidden")


@pytest.mark.parametrize("before", [b"", b"HTTP/1.1 101 Switching"], ids=["nothing", "half"])
def test_eof_before_an_answer_fails(before: bytes) -> None:
    """The server closed before a whole answer: ``EXEC_FAILED``, no HTTP status."""
    client, _, _ = handshake()
    answer = UpgradeAnswer(client, OFFERED)
    if before:
        assert answer.receive_data(before) is None
    with pytest.raises(ExecError) as raised:
        answer.receive_eof()
    assert (raised.value.code, raised.value.http_status) == (ExecErrorCode.FAILED, None)


def test_head_over_64_kib_fails() -> None:
    """A head that runs past 64 KiB without its blank line is no API server's answer."""
    client, _, _ = handshake()
    answer = UpgradeAnswer(client, OFFERED)
    assert answer.receive_data(b"HTTP/1.1 101 Switching Protocols\r\n") is None
    line = b"X-Padding: " + b"a" * 1000 + b"\r\n"
    for _ in range(64):  # 64 such lines and the status line: just under 64 KiB
        assert answer.receive_data(line) is None
    with pytest.raises(ExecError) as raised:
        answer.receive_data(line)
    assert raised.value.code is ExecErrorCode.FAILED
    assert "64 KiB" in raised.value.message


def test_101_with_a_wrong_accept_key_fails() -> None:
    """A 101 whose Sec-WebSocket-Accept does not answer our key is refused (``EXEC_FAILED``)."""
    client, server, response = handshake()
    del response.headers["Sec-WebSocket-Accept"]
    response.headers["Sec-WebSocket-Accept"] = "AAAAAAAAAAAAAAAAAAAAAAAAAAA="
    with pytest.raises(ExecError) as raised:
        UpgradeAnswer(client, OFFERED).receive_data(response_bytes(server, response))
    assert (raised.value.code, raised.value.http_status) == (ExecErrorCode.FAILED, None)
    assert "Sec-WebSocket-Accept" in raised.value.message


# -- 11. what a send, a ping and a close may queue ---------------------------------------------


def open_connection() -> tuple[ClientConnection, Peer]:
    """A ``ClientConnection`` on an OPEN client, and the peer whose parser it holds."""
    peer = connect()
    connection = ClientConnection(peer.client)
    return connection, Peer(peer.client, peer.server, connection.received)


def test_a_message_is_queued_as_one_frame_of_its_type() -> None:
    connection, _ = open_connection()
    assert connection.subprotocol == V5
    assert connection.queue_message(b"\x00stdin")
    assert connection.queue_message("text")
    frames = sent(connection.protocol)
    assert [(f.opcode, f.fin, bytes(f.data)) for f in frames] == [
        (Opcode.BINARY, True, b"\x00stdin"),
        (Opcode.TEXT, True, b"text"),
    ]


@pytest.mark.parametrize("how", ["server close", "our close", "protocol failure", "dropped"])
def test_nothing_is_queued_after_the_end(how: str) -> None:
    """Once the connection has ended (or a Close went either way), a message, a ping and our
    Close are refused and queue nothing; the binding reports the end its own way."""
    connection, peer = open_connection()
    if how == "server close":
        peer.server.send_close(1000)
        connection.received.receive_data(peer.written())
    elif how == "our close":
        assert connection.queue_close()
    elif how == "protocol failure":
        connection.received.receive_data(raw(0x83, b""))  # unknown opcode 3
    else:
        connection.received.ended(ConnectionEnded(clean=False))
    assert connection.received.next_message() is None  # the end, once every message is taken
    connection.protocol.data_to_send()  # the echo, our Close or the failure's Close
    assert not connection.open
    assert not connection.queue_message(b"\x00late")
    assert connection.queue_ping(Flag()) is None
    assert not connection.queue_close()
    assert connection.protocol.data_to_send() == []


def test_a_message_before_the_end_is_taken_is_still_sent() -> None:
    """The end is the end of the messages: until every earlier one is taken, a send (an
    answer to them) still goes out, as long as no Close went either way."""
    connection, peer = open_connection()
    peer.server.send_binary(b"\x01out")
    connection.received.receive_data(peer.written())
    connection.received.ended(ConnectionEnded(clean=False))
    assert connection.received.end is None
    assert connection.queue_message(b"\x00answer")
    assert connection.received.next_message() == b"\x01out"
    assert connection.received.next_message() is None
    assert not connection.queue_message(b"\x00late")


def test_a_ping_is_answered_by_its_pong_or_ended_by_the_end() -> None:
    connection, peer = open_connection()
    answered, waiting = Flag(), Flag()
    first = connection.queue_ping(answered)
    second = connection.queue_ping(waiting)
    assert first is not None
    assert second is not None
    assert [opcode for opcode, _ in replies(connection.protocol)] == [Opcode.PING, Opcode.PING]
    peer.server.send_pong(first)
    connection.received.receive_data(peer.written())
    assert (answered.times, waiting.times) == (1, 0)
    assert connection.ping_answered(first)
    connection.received.ended(ConnectionEnded(clean=False))
    assert waiting.times == 1
    assert not connection.ping_answered(second)


def test_our_close_is_queued_once_and_the_servers_reply_ends_the_messages() -> None:
    connection, peer = open_connection()
    assert connection.queue_close()
    assert replies(connection.protocol) == [(Opcode.CLOSE, 1000)]
    assert not connection.queue_close()  # already closing: nothing more to wait for
    assert replies(connection.protocol) == []
    peer.server.send_close(1000)
    connection.received.receive_data(peer.written())
    assert connection.received.closing_handshake_done
    assert ended(peer).clean
