"""Shared sessions' pure rules: the ring, viewers' offsets and acks, roles, join tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kuber_exec_core import Close, ExecError, ExecErrorCode, Resize, Stdin
from kuber_exec_core.sharing import (
    Chunk,
    JoinSigner,
    Missed,
    OutputRing,
    Role,
    SharedOutput,
    SharingRefusal,
    _unb64,
    check_frame,
)

SECRET = b"s" * 32


@given(
    capacity=st.integers(1, 64),
    pieces=st.lists(st.binary(max_size=64), max_size=40),
    data=st.data(),
)
def test_the_ring_reads_back_the_stream_it_kept(
    capacity: int, pieces: list[bytes], data: st.DataObject
) -> None:
    ring = OutputRing(capacity)
    stream = b""
    for piece in pieces:
        piece = piece[:capacity]
        ring.append(piece)
        stream += piece
        assert ring.end == len(stream)
        assert len(ring) == min(capacity, len(stream))
        offset = data.draw(st.integers(ring.start, ring.end))
        size = data.draw(st.integers(0, capacity + 1))
        assert ring.read(offset, size) == stream[offset : offset + size]


def test_the_ring_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(ExecError):
        OutputRing(0)
    ring = OutputRing(4)
    with pytest.raises(ExecError):
        ring.append(b"12345")
    ring.append(b"1234")
    ring.append(b"5")
    with pytest.raises(ExecError):
        ring.read(0, 1)  # dropped


class Viewers(RuleBasedStateMachine):
    """Any interleaving of writes, reads, acks, drops and returns: each viewer sees exactly the
    stream's bytes in order, with every hole reported as Missed and counted exactly; a viewer
    that is never cut off misses nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.output = SharedOutput(capacity=32)
        self.stream = b""
        # viewer -> what it has received (its screen): offset it resumes from, holes, bytes.
        self.received: dict[str, int] = {}
        self.screen: dict[str, list[tuple[int, bytes]]] = {}
        self.holes: dict[str, int] = {}
        self.attached: set[str] = set()

    @rule(data=st.binary(min_size=1, max_size=48))
    def write(self, data: bytes) -> None:
        room_before = self.output.room()
        taken = self.output.write(data)
        assert 0 <= taken <= len(data)
        assert taken <= max(room_before, self.output.room() + taken)
        self.stream += data[:taken]
        assert self.output.end == len(self.stream)

    @rule(viewer=st.sampled_from(["a", "b", "c"]), fresh=st.booleans())
    def attach(self, viewer: str, fresh: bool) -> None:
        if viewer in self.received and not fresh:
            # Comes back where it was: from the last byte it received.
            self.output.attach(viewer, self.received[viewer])
        else:
            cursor = self.output.attach(viewer, None)
            self.received[viewer] = cursor.position
            self.screen[viewer] = []
            self.holes.setdefault(viewer, 0)
        self.attached.add(viewer)

    @precondition(lambda self: self.attached)
    @rule(data=st.data())
    def detach(self, data: st.DataObject) -> None:
        viewer = data.draw(st.sampled_from(sorted(self.attached)))
        self.output.detach(viewer)
        self.attached.discard(viewer)

    @precondition(lambda self: self.attached)
    @rule(data=st.data(), size=st.integers(1, 40))
    def read(self, data: st.DataObject, size: int) -> None:
        viewer = data.draw(st.sampled_from(sorted(self.attached)))
        answer = self.output.next_output(viewer, size)
        if answer is None:
            assert self.received[viewer] == self.output.end
        elif isinstance(answer, Missed):
            assert answer.count > 0
            assert answer.resumed_at == self.received[viewer] + answer.count
            assert answer.resumed_at == self.output.ring.start
            self.holes[viewer] += answer.count
            self.received[viewer] = answer.resumed_at
        else:
            assert isinstance(answer, Chunk)
            start = answer.end - len(answer.data)
            assert start == self.received[viewer], "a byte lost or shown twice"
            assert answer.data == self.stream[start : answer.end]
            self.screen[viewer].append((start, answer.data))
            self.received[viewer] = answer.end

    @precondition(lambda self: self.attached)
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        viewer = data.draw(st.sampled_from(sorted(self.attached)))
        cursor = self.output.cursors[viewer]
        self.output.acknowledge(viewer, data.draw(st.integers(0, cursor.position)))

    @invariant()
    def the_ring_is_bounded_and_a_lone_viewer_misses_nothing(self) -> None:
        ring = self.output.ring
        assert len(ring) <= ring.capacity
        if len(self.received) == 1:
            # Nobody else to wait for: its unacknowledged bytes are never dropped.
            assert sum(self.holes.values()) == 0

    @invariant()
    def missed_counts_match(self) -> None:
        for viewer, cursor in self.output.cursors.items():
            assert cursor.missed == self.holes[viewer]


TestViewers = Viewers.TestCase


def test_a_lone_viewer_that_drops_loses_nothing() -> None:
    output = SharedOutput(capacity=8)
    output.attach("v")
    assert output.write(b"0123456789") == 8  # full: the process waits
    output.detach("v")
    assert output.write(b"x") == 0
    output.attach("v", 0)
    answer = output.next_output("v", 100)
    assert answer == Chunk(b"01234567", 8)
    output.acknowledge("v", 8)
    assert output.write(b"89") == 2


def test_a_viewer_that_never_reads_is_cut_off_and_the_others_go_on() -> None:
    output = SharedOutput(capacity=8)
    output.attach("reader")
    output.attach("stuck")
    stream = b""
    for piece in (b"abcd", b"efgh", b"ijkl", b"mnop"):
        written = 0
        while written < len(piece):
            taken = output.write(piece[written:])
            assert taken > 0, "the reader was held by a viewer that does not read"
            written += taken
            while (answer := output.next_output("reader", 3)) is not None:
                assert isinstance(answer, Chunk)
                output.acknowledge("reader", answer.end)
        stream += piece
    assert output.cut_off() == ["stuck"]
    assert output.cursors["stuck"].acked == 0
    answer = output.next_output("stuck", 100)
    assert answer == Missed(8, 8)
    assert output.next_output("stuck", 100) == Chunk(stream[8:], 16)
    assert output.cut_off() == []  # told what it missed, it retains again
    # Memory stays the ring's: never more than its capacity kept.
    assert len(output.ring) <= 8


def test_resume_offsets_are_checked() -> None:
    output = SharedOutput(capacity=8)
    output.attach("v")
    output.write(b"abc")
    for bad in (-1, 4, True, "1"):
        with pytest.raises(ExecError) as caught:
            output.attach("w", bad)  # type: ignore[arg-type]
        assert SharingRefusal.of(caught.value) is SharingRefusal.OFFSET
        assert caught.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError):
        output.acknowledge("v", 1)  # never sent


@pytest.mark.parametrize(
    ("role", "frame", "allowed"),
    [
        (Role.OWNER, Stdin(b"x"), True),
        (Role.OWNER, Resize(80, 24), True),
        (Role.OWNER, Close(), True),
        (Role.PEER, Stdin(b"x"), True),
        (Role.PEER, Resize(80, 24), False),
        (Role.PEER, Close(), False),
        (Role.OBSERVER, Stdin(b"x"), False),
        (Role.OBSERVER, Resize(80, 24), False),
        (Role.OBSERVER, Close(), False),
    ],
)
def test_roles(role: Role, frame: object, allowed: bool) -> None:
    if allowed:
        check_frame(role, frame)  # type: ignore[arg-type]
        return
    with pytest.raises(ExecError) as caught:
        check_frame(role, frame)  # type: ignore[arg-type]
    assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN
    assert SharingRefusal.of(caught.value) is SharingRefusal.ROLE


@given(
    session=st.text(min_size=1, max_size=40),
    role=st.sampled_from(Role),
    expires=st.floats(1, 2e9),
)
def test_tokens_round_trip(session: str, role: Role, expires: float) -> None:
    signer = JoinSigner(SECRET)
    claims = signer.verify(signer.issue(session, role, expires), session, expires - 0.5)
    assert (claims.session, claims.role, claims.expires) == (session, role, expires)


@given(position=st.integers(0, 200), replacement=st.characters(codec="ascii"))
def test_a_changed_token_is_refused(position: int, replacement: str) -> None:
    signer = JoinSigner(SECRET)
    token = signer.issue("s1", Role.OBSERVER, 100.0)
    position %= len(token)
    forged = token[:position] + replacement + token[position + 1 :]
    if forged == token:
        return
    same = False
    try:
        head, _, tail = forged.partition(".")
        same = head == token.split(".")[0] and _unb64(tail) == _unb64(token.split(".")[1])
    except ValueError:
        pass
    if same:
        # base64's unused padding bits: the same signature bytes, so the same token.
        assert signer.verify(forged, "s1", 50.0).role is Role.OBSERVER
        return
    with pytest.raises(ExecError) as caught:
        signer.verify(forged, "s1", 50.0)
    assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN


def test_token_refusals_and_secrecy() -> None:
    signer = JoinSigner(SECRET)
    other = JoinSigner(b"o" * 32)
    token = signer.issue("s1", Role.OWNER, 100.0)
    cases = [
        (other.issue("s1", Role.OWNER, 100.0), "s1", 1.0, SharingRefusal.TOKEN_INVALID),
        (token, "s2", 1.0, SharingRefusal.TOKEN_OTHER_SESSION),
        (token, "s1", 100.0, SharingRefusal.TOKEN_EXPIRED),
        ("nodot", "s1", 1.0, SharingRefusal.TOKEN_INVALID),
        ("a.b.c", "s1", 1.0, SharingRefusal.TOKEN_INVALID),
        ("é.é", "s1", 1.0, SharingRefusal.TOKEN_INVALID),
        ("", "s1", 1.0, SharingRefusal.TOKEN_INVALID),
    ]
    for offered, session, now, refusal in cases:
        with pytest.raises(ExecError) as caught:
            signer.verify(offered, session, now)
        assert SharingRefusal.of(caught.value) is refusal
        assert offered not in str(caught.value) or not offered
        assert SECRET.decode() not in repr(caught.value)
    assert SECRET.decode() not in repr(signer)
    with pytest.raises(ExecError):
        JoinSigner(b"short")
    with pytest.raises(ExecError, match="no such role"):
        signer.issue("s1", "admin", 1.0)  # type: ignore[arg-type]


@given(
    nonce=st.text(alphabet="abcXYZ019-_", min_size=1, max_size=30),
    replica=st.text(min_size=1, max_size=60),
)
def test_session_ids_name_their_replica_and_cannot_be_forged(nonce: str, replica: str) -> None:
    signer = JoinSigner(SECRET)
    session_id = signer.session_id(nonce, replica)
    assert signer.holder_of(session_id) == replica
    assert JoinSigner(b"o" * 32).holder_of(session_id) is None
    head, _, mac = session_id.rpartition(".")
    other = signer.session_id(nonce, replica + "x")
    # Another replica's address under this id's mac: refused.
    assert signer.holder_of(other.rpartition(".")[0] + "." + mac) is None
    for bad in ("", "a.b", "a.zz.c", head + ".", 3):
        assert signer.holder_of(bad) is None  # type: ignore[arg-type]
