"""Shared, resumable sessions without I/O: the output ring, viewers' offsets, roles, join tokens.

A shared session's output is one byte stream numbered from 0. :class:`SharedOutput` keeps its
last ``capacity`` bytes (:class:`OutputRing`) and one :class:`Cursor` per viewer: the offset
sent to it (``position``) and the offset it acknowledged having shown (``acked``). A viewer that
comes back after a drop resumes from its ``acked`` offset: it is sent the bytes from there on,
so nothing is lost or shown twice; when those bytes have left the ring, it is told how many it
missed (:class:`Missed`) and goes on from the oldest byte kept.

Retention (what keeps a drop lossless): a *retaining* cursor's unacknowledged bytes are never
overwritten; while the ring holds ``capacity`` bytes nobody may lose, :meth:`SharedOutput.room`
is 0 and the layer above stops reading the exec socket (the process waits, as on a terminal
that stopped reading). So a lone viewer whose network dropped loses nothing. One viewer cannot
hold the others hostage: when the ring is full and an attached viewer has acknowledged
everything (it waits for output), the retaining cursors at the lowest acknowledged offset (a
whole ring behind it) are *cut off*: they stop retaining, the session goes on, and they are
told what they missed when they read again. With no retaining cursor at all (before the first
viewer, or once every one was cut off), the ring keeps what it has and waits for one.

Roles (:class:`Role`): the owner sends input, resizes and ends the session; a peer sends input;
an observer only watches (:func:`check_frame`). A :class:`JoinSigner` issues and verifies join
tokens scoped to one session, one role and an expiry (HMAC-SHA256, compared in constant time;
the secret is never in a repr or a message).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import math
from collections import deque

import attrs

from ._errors import ExecError, ExecErrorCode, ExecRule
from ._frames import ClientFrame, Close, Resize, Stdin

__all__ = [
    "DEFAULT_RING_BYTES",
    "Chunk",
    "Cursor",
    "JoinClaims",
    "JoinSigner",
    "Missed",
    "OutputRing",
    "Role",
    "SharedOutput",
    "SharingRefusal",
    "check_frame",
]

#: The ring's default capacity: the output a viewer may be away for without losing a byte.
DEFAULT_RING_BYTES = 4 * 1024 * 1024
# The ring stores output as chunks; small frames are merged into a tail chunk up to this size,
# so that a stream of one-byte frames does not cost an object per byte.
_MERGE_BELOW = 4096
_URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
#: The shortest join-token secret accepted.
MIN_SECRET_BYTES = 32


class SharingRefusal(ExecRule):
    """Why a shared session refused a viewer or a frame (``ExecError.rule``)."""

    #: The role may not send this frame (an observer's input, a peer's resize or end).
    ROLE = "role"
    #: The join token is malformed or its signature does not match.
    TOKEN_INVALID = "token-invalid"
    #: The join token has expired.
    TOKEN_EXPIRED = "token-expired"
    #: The join token names another session.
    TOKEN_OTHER_SESSION = "token-other-session"
    #: A viewer asked to resume from an offset the session never reached.
    OFFSET = "offset"

    @classmethod
    def of(cls, error: BaseException) -> SharingRefusal | None:
        """The refusal ``error`` reports, or ``None``."""
        rule = getattr(error, "rule", None)
        return rule if isinstance(rule, SharingRefusal) else None


def _refuse(rule: SharingRefusal, message: str) -> ExecError:
    code = (
        ExecErrorCode.INVALID if rule is SharingRefusal.OFFSET else ExecErrorCode.TARGET_FORBIDDEN
    )
    return ExecError(code, message, rule=rule)


class Role(enum.StrEnum):
    """A viewer's role in a shared session."""

    OWNER = "owner"
    PEER = "peer"
    OBSERVER = "observer"

    @property
    def may_input(self) -> bool:
        """Whether it may send stdin."""
        return self is not Role.OBSERVER

    @property
    def may_resize(self) -> bool:
        """Whether it may resize the terminal (the terminal follows the owner's size)."""
        return self is Role.OWNER

    @property
    def may_end(self) -> bool:
        """Whether it may end the session for everyone."""
        return self is Role.OWNER


def check_frame(role: Role, frame: ClientFrame) -> None:
    """Refuse a frame ``role`` may not send: ``ExecError(EXEC_TARGET_FORBIDDEN)`` with rule
    :attr:`SharingRefusal.ROLE`. Anything else (a frame the session cannot carry at all) is
    left to the session's own checks."""
    if isinstance(frame, Stdin) and not role.may_input:
        raise _refuse(SharingRefusal.ROLE, f"an {role.value} may not send input")
    if isinstance(frame, Resize) and not role.may_resize:
        raise _refuse(SharingRefusal.ROLE, f"a {role.value} may not resize the terminal")
    if isinstance(frame, Close) and not role.may_end:
        raise _refuse(SharingRefusal.ROLE, f"a {role.value} may not end the session")


@attrs.frozen
class Chunk:
    """Output bytes for a viewer: ``data`` is the stream's bytes ``[end - len(data), end)``."""

    data: bytes
    end: int


@attrs.frozen
class Missed:
    """The viewer fell behind the ring: ``count`` bytes before ``resumed_at`` are lost to it."""

    count: int
    resumed_at: int


class OutputRing:
    """The last ``capacity`` bytes of a stream, addressed by absolute offsets.

    ``start`` is the oldest byte kept, ``end`` the number of bytes ever appended. Appending
    drops the oldest bytes past ``capacity``; whether that is allowed is the caller's
    (:class:`SharedOutput`) decision.
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ExecError(ExecErrorCode.INVALID, "the ring's capacity must be a positive integer")
        self.capacity = capacity
        self.start = 0
        self.end = 0
        # (offset of the chunk's first byte, bytes); the tail may be a bytearray being merged.
        self._chunks: deque[tuple[int, bytes | bytearray]] = deque()

    def __len__(self) -> int:
        return self.end - self.start

    def append(self, data: bytes) -> None:
        """Append ``data`` (at most ``capacity`` bytes), dropping the oldest bytes past it."""
        if len(data) > self.capacity:
            raise ExecError(ExecErrorCode.INVALID, "a chunk larger than the ring")
        if not data:
            return
        chunks = self._chunks
        if chunks and isinstance(tail := chunks[-1][1], bytearray) and len(tail) < _MERGE_BELOW:
            tail += data
        elif len(data) < _MERGE_BELOW:
            chunks.append((self.end, bytearray(data)))
        else:
            chunks.append((self.end, bytes(data)))
        self.end += len(data)
        self._trim()

    def _trim(self) -> None:
        keep_from = self.end - self.capacity
        chunks = self._chunks
        while keep_from > self.start:
            offset, data = chunks[0]
            if offset + len(data) <= keep_from:
                chunks.popleft()
                self.start = offset + len(data)
            else:
                chunks[0] = (keep_from, data[keep_from - offset :])
                self.start = keep_from

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` bytes from ``offset`` (``start <= offset <= end``)."""
        if not self.start <= offset <= self.end:
            raise ExecError(ExecErrorCode.INVALID, "offset outside the ring")
        stop = min(self.end, offset + max_bytes)
        if stop == offset:
            return b""
        parts: list[bytes] = []
        chunks = self._chunks
        # Viewers read near the end: find the first chunk from the right.
        index = len(chunks) - 1
        while chunks[index][0] > offset:
            index -= 1
        while offset < stop:
            chunk_start, data = chunks[index]
            piece = data[offset - chunk_start : stop - chunk_start]
            parts.append(bytes(piece))
            offset += len(piece)
            index += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)


@attrs.define
class Cursor:
    """One viewer's place in the stream: ``position`` sent, ``acked`` acknowledged.

    ``attached``: a connection reads it now; ``retaining``: its unacknowledged bytes are kept
    (false once it was cut off, until it attaches again).
    """

    viewer: str
    position: int
    acked: int
    attached: bool = True
    retaining: bool = True
    #: Bytes this viewer missed in all (fell behind the ring).
    missed: int = 0


class SharedOutput:
    """The ring and the viewers' cursors of one shared session (see the module's docstring)."""

    def __init__(self, capacity: int = DEFAULT_RING_BYTES) -> None:
        self.ring = OutputRing(capacity)
        self.cursors: dict[str, Cursor] = {}

    @property
    def end(self) -> int:
        """The bytes written so far (the offset of the next one)."""
        return self.ring.end

    def attach(self, viewer: str, resume_from: int | None = None) -> Cursor:
        """A viewer (new, or coming back) attaches, to be sent the stream from ``resume_from``
        (its last acknowledged offset; ``None``: everything the ring still holds). It retains
        again. Raises ``ExecError(EXEC_INVALID)`` (:attr:`SharingRefusal.OFFSET`) for an offset
        that is negative, not an integer, or past the end."""
        ring = self.ring
        if resume_from is None:
            resume_from = ring.start
        elif isinstance(resume_from, bool) or not isinstance(resume_from, int):
            raise _refuse(SharingRefusal.OFFSET, "the resume offset must be an integer")
        elif not 0 <= resume_from <= ring.end:
            raise _refuse(
                SharingRefusal.OFFSET,
                f"cannot resume from byte {resume_from}: the session has sent {ring.end}",
            )
        cursor = self.cursors.get(viewer)
        if cursor is None:
            cursor = self.cursors[viewer] = Cursor(viewer, resume_from, resume_from)
        else:
            cursor.position = cursor.acked = resume_from
            cursor.attached = cursor.retaining = True
        return cursor

    def detach(self, viewer: str) -> None:
        """The viewer's connection went away; its cursor stays (and retains) for a return."""
        if (cursor := self.cursors.get(viewer)) is not None:
            cursor.attached = False

    def forget(self, viewer: str) -> None:
        """The viewer left for good: its cursor is dropped (it retains nothing)."""
        self.cursors.pop(viewer, None)

    def acknowledge(self, viewer: str, offset: int) -> None:
        """The viewer has shown the stream up to ``offset``. An offset behind its last one is
        ignored (acknowledgements may cross); one past what it was sent is EXEC_INVALID."""
        cursor = self.cursors[viewer]
        if isinstance(offset, bool) or not isinstance(offset, int) or offset > cursor.position:
            raise _refuse(SharingRefusal.OFFSET, "acknowledged bytes that were never sent")
        cursor.acked = max(cursor.acked, offset)
        # A viewer that was cut off and reads again retains again.
        cursor.retaining = True

    def next_output(self, viewer: str, max_bytes: int) -> Chunk | Missed | None:
        """What the viewer is sent next: a :class:`Missed` when it fell behind the ring (then
        the bytes from the oldest kept), a :class:`Chunk` of up to ``max_bytes``, or ``None``
        when it has everything written so far."""
        cursor = self.cursors[viewer]
        ring = self.ring
        if cursor.position < ring.start:
            missed = ring.start - cursor.position
            cursor.missed += missed
            cursor.position = cursor.acked = ring.start
            cursor.retaining = True
            return Missed(missed, ring.start)
        data = ring.read(cursor.position, max_bytes)
        if not data:
            return None
        cursor.position += len(data)
        return Chunk(data, cursor.position)

    def _floor(self) -> int | None:
        # A cursor behind the ring (it resumed from a lost offset) holds nothing: what it
        # missed is gone already.
        start = self.ring.start
        acks = [max(cursor.acked, start) for cursor in self.cursors.values() if cursor.retaining]
        return min(acks) if acks else None

    def room(self) -> int:
        """How many bytes may be written now without dropping one a retaining viewer has not
        acknowledged; cuts off the lowest retaining viewers when the ring is full and an
        attached viewer has acknowledged everything (see the module's docstring)."""
        ring = self.ring
        floor = self._floor()
        if floor is None:
            return ring.capacity - len(ring)
        room = ring.capacity - (ring.end - floor)
        if room > 0:
            return room
        waiting = any(
            cursor.attached and cursor.acked == ring.end for cursor in self.cursors.values()
        )
        if not waiting:
            return 0
        for cursor in self.cursors.values():
            if cursor.retaining and max(cursor.acked, ring.start) == floor:
                cursor.retaining = False
        floor = self._floor()
        # The waiting viewer retains at the end, above the old floor: there is room now.
        assert floor is not None
        assert floor > ring.end - ring.capacity
        return ring.capacity - (ring.end - floor)

    def write(self, data: bytes) -> int:
        """Append as much of ``data`` as :meth:`room` allows; returns how many bytes."""
        taken = min(len(data), self.room())
        if taken > 0:
            self.ring.append(data[:taken])
        return taken

    def cut_off(self) -> list[str]:
        """The viewers no longer retaining (cut off, until they attach again)."""
        return [cursor.viewer for cursor in self.cursors.values() if not cursor.retaining]


@attrs.frozen
class JoinClaims:
    """What a verified join token grants: ``role`` in session ``session`` until ``expires``
    (seconds since the epoch)."""

    session: str
    role: Role
    expires: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class JoinSigner:
    """Issues and verifies join tokens: ``<payload>.<signature>``, both base64url, the payload
    JSON ``{"s": session, "r": role, "e": expiry}``, the signature HMAC-SHA256 of the payload
    under ``secret`` (at least 32 bytes; never shown)."""

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"a join-token secret must be at least {MIN_SECRET_BYTES} bytes",
            )
        self._secret = secret

    def __repr__(self) -> str:
        return "JoinSigner(<secret>)"

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()

    def issue(self, session: str, role: Role, expires: float) -> str:
        """A token granting ``role`` in ``session`` until ``expires`` (epoch seconds)."""
        try:
            role = Role(role)
        except ValueError:
            raise ExecError(ExecErrorCode.INVALID, f"no such role: {role!r}") from None
        if not isinstance(session, str) or not session:
            raise ExecError(ExecErrorCode.INVALID, "a join token needs a session id")
        if not math.isfinite(expires):
            raise ExecError(ExecErrorCode.INVALID, "a join token needs a finite expiry")
        payload = json.dumps(
            {"s": session, "r": role.value, "e": expires}, separators=(",", ":")
        ).encode()
        encoded = _b64(payload).encode("ascii")
        return f"{encoded.decode('ascii')}.{_b64(self._sign(encoded))}"

    def session_id(self, nonce: str, replica: str) -> str:
        """A session id naming the replica that holds it: ``<nonce>.<replica, hex>.<mac>``,
        so that any replica sharing the secret can find the holder, and nobody can make a
        replica connect to an address of their choosing (:meth:`holder_of` checks the mac)."""
        if not nonce or not set(nonce) <= _URL_SAFE:
            raise ExecError(ExecErrorCode.INVALID, "a session nonce must be URL-safe")
        body = f"{nonce}.{replica.encode('utf-8').hex()}"
        return f"{body}.{_b64(self._sign(b'session:' + body.encode('ascii'))[:16])}"

    def holder_of(self, session_id: str) -> str | None:
        """The replica a :meth:`session_id` names, or ``None`` for an id without one or with
        a mac that does not match (never an error: the session is then simply not found)."""
        if not isinstance(session_id, str) or session_id.count(".") != 2 or len(session_id) > 600:
            return None
        nonce, replica_hex, mac = session_id.split(".")
        body = f"{nonce}.{replica_hex}"
        try:
            expected = _b64(self._sign(b"session:" + body.encode("ascii"))[:16])
            if not hmac.compare_digest(mac.encode("ascii"), expected.encode("ascii")):
                return None
            return bytes.fromhex(replica_hex).decode("utf-8")
        except (UnicodeError, ValueError):
            return None

    def verify(self, token: str, session: str, now: float) -> JoinClaims:
        """The claims of ``token`` for ``session`` at time ``now``; raises
        ``ExecError(EXEC_TARGET_FORBIDDEN)`` (:class:`SharingRefusal`) for a malformed or forged
        token, one for another session, or an expired one. The message never repeats it."""
        if not isinstance(token, str) or token.count(".") != 1 or len(token) > 4096:
            raise _refuse(SharingRefusal.TOKEN_INVALID, "the join token is not valid")
        payload_text, _, signature_text = token.partition(".")
        try:
            signature = _unb64(signature_text)
            encoded = payload_text.encode("ascii")
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise _refuse(SharingRefusal.TOKEN_INVALID, "the join token is not valid") from None
        if not hmac.compare_digest(signature, self._sign(encoded)):
            raise _refuse(SharingRefusal.TOKEN_INVALID, "the join token is not valid")
        try:
            claims = json.loads(_unb64(payload_text))
            claimed = JoinClaims(str(claims["s"]), Role(claims["r"]), float(claims["e"]))
        except (binascii.Error, ValueError, TypeError, KeyError):
            # Signed by us, so never in practice; refused the same way.
            raise _refuse(SharingRefusal.TOKEN_INVALID, "the join token is not valid") from None
        if not hmac.compare_digest(claimed.session.encode(), session.encode()):
            raise _refuse(
                SharingRefusal.TOKEN_OTHER_SESSION, "the join token is for another session"
            )
        if not now < claimed.expires:
            raise _refuse(SharingRefusal.TOKEN_EXPIRED, "the join token has expired")
        return claimed
