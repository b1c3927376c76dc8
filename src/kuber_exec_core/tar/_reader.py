"""The streaming tar reader: an archive's bytes in pieces of any size in, member events out.

Driven like every core object: :meth:`TarReader.feed` what arrived (``tar c``'s stdout, one
WebSocket message at a time), then call :meth:`TarReader.next_event` until it returns
``NEED_DATA``; :meth:`TarReader.end_of_input` when the stream has ended. The events:

- a :class:`TarMember` (the header: name, kind, size, mode, link target …),
- then :class:`MemberData` views of its data, each a slice of a fed piece (no copy),
- then :class:`MemberEnd`,
- and after the last member, :class:`ArchiveEnd` (the two zero blocks were read).

Theory of operation. The reader is a small state machine over the block structure: ``HEADER``
(a 512-byte header is awaited), ``METADATA`` (the data of a pax ``x``/``g`` or GNU ``L``/``K``
member, which describes the *next* member), ``DATA`` (the member's bytes pass through), ``SKIP``
(padding up to the next block), ``ZERO`` (one zero block was seen; a second ends the archive)
and ``END``. It holds the piece it was last fed as a ``memoryview`` and a position in it; only a
header or metadata record split across two pieces is copied, into a buffer of at most one block
or ``TarLimits.max_metadata_bytes``. File data is never buffered: a data event is a view of the
fed piece, valid as long as the caller keeps it.

Any malformed input ends the reader in an error state: the :class:`TarError` raised says what
was wrong and where (member and offset), and every later call raises it again.
"""

from __future__ import annotations

import enum
import re
import struct
import types
from collections.abc import Mapping
from typing import Literal

import attrs

from .._errors import ExecError, ExecErrorCode
from .._session import NEED_DATA, SessionSignal
from ._format import (
    BLOCK,
    ZERO_BLOCK,
    TarError,
    TarKind,
    TarLimits,
    TarMember,
    decode_name,
    kind_of,
    parse_number,
    parse_pax_records,
    signed_checksum,
    unsigned_checksum,
)

__all__ = ["MAX_DATA_EVENT_BYTES", "ArchiveEnd", "MemberData", "MemberEnd", "TarReader"]

#: The largest :class:`MemberData` slice: a caller that feeds a whole archive at once still
#: gets its data in bounded pieces.
MAX_DATA_EVENT_BYTES = 1024 * 1024

_EMPTY = memoryview(b"")
_NO_RECORDS: Mapping[str, str] = types.MappingProxyType({})
_METADATA_TYPES = frozenset({b"x", b"g", b"L", b"K"})
# The header's fields, in order; NUL padding is left for each field's own reading.
_HEADER = struct.Struct("100s8s8s8s12s12s8sc100s6s2s32s32s8s8s155s12x")
_USTAR_MAGIC = b"ustar\x00"
#: pax numbers: decimal, bounded in length (int() of a million digits is slow, and Python
#: refuses more than 4,300).
_PAX_INTEGER = re.compile(r"[0-9]{1,30}")
_PAX_TIME = re.compile(r"(-?)([0-9]{1,30})(?:\.([0-9]{0,30}))?")


@attrs.frozen
class MemberData:
    """Bytes of the current member's data, in order: a view of a piece given to ``feed``."""

    data: memoryview = attrs.field(repr=lambda data: f"<{len(data)} bytes>")


@attrs.frozen
class MemberEnd:
    """The member's data is complete."""

    member: TarMember


@attrs.frozen(kw_only=True)
class ArchiveEnd:
    """The end-of-archive blocks were read; anything fed afterwards is ignored."""

    #: How many members the archive held (pax and long-name records not counted).
    members: int
    #: The archive's length in bytes, up to and including its end-of-archive blocks.
    size: int


TarEvent = TarMember | MemberData | MemberEnd | ArchiveEnd
"""What :meth:`TarReader.next_event` returns when it is not ``NEED_DATA``."""


class _State(enum.Enum):
    HEADER = "HEADER"
    METADATA = "METADATA"
    DATA = "DATA"
    SKIP = "SKIP"
    ZERO = "ZERO"
    END = "END"


def _field(raw: bytes, start: int, stop: int) -> bytes:
    """A NUL-terminated text field."""
    return raw[start:stop].split(b"\0", 1)[0]


def _header_number(field: bytes, what: str, name: str, start: int) -> int:
    value = parse_number(field)
    if value is None:
        raise TarError(f"the header's {what} field is malformed", member=name, offset=start)
    return value


def _pax_integer(pax: Mapping[str, str], key: str, fallback: int, name: str, start: int) -> int:
    text = pax.get(key)
    if not text:
        return fallback
    if not _PAX_INTEGER.fullmatch(text):
        raise TarError(
            f"the pax record {key}={text[:40]!r} is not a non-negative integer",
            member=name,
            offset=start,
        )
    return int(text)


def _pax_time(text: str) -> int | None:
    """A pax time (decimal seconds, maybe negative, maybe with a fraction), rounded down."""
    match = _PAX_TIME.fullmatch(text)
    if match is None:
        return None
    sign, whole, fraction = match.groups()
    seconds = int(whole)
    if sign:
        return -seconds - (1 if fraction and fraction.strip("0") else 0)
    return seconds


class TarReader:
    """Reads one tar archive (ustar, GNU and pax) from pieces of any size.

    Args:
        limits: the budgets; the reader uses ``max_metadata_bytes`` (pax and long-name records
            before one member, and the global pax records).

    Raises:
        ExecError: ``EXEC_INVALID`` when ``limits`` is not a :class:`TarLimits`.
    """

    def __init__(self, limits: TarLimits | None = None) -> None:
        if limits is None:
            limits = TarLimits()
        elif not isinstance(limits, TarLimits):
            raise ExecError(
                ExecErrorCode.INVALID, f"limits must be a TarLimits, not {type(limits).__name__}"
            )
        self._max_metadata = limits.max_metadata_bytes
        self._state = _State.HEADER
        self._piece = _EMPTY
        self._pos = 0
        # A header or record split across pieces.
        self._buffer = bytearray()
        self._offset = 0  # bytes of the archive consumed
        self._input_ended = False
        self._error: TarError | None = None
        self._end: ArchiveEnd | None = None
        self._members = 0
        self._member: TarMember | None = None
        self._remaining = 0  # data bytes of the current member still to pass
        self._skip = 0  # padding bytes still to skip
        # What the pax and long-name records said about the next member.
        self._metadata_type = b""
        self._metadata_size = 0
        self._metadata_bytes = 0
        self._metadata_offset: int | None = None
        self._pax: dict[str, str] = {}
        self._global: dict[str, str] = {}
        self._long_name: bytes | None = None
        self._long_link: bytes | None = None

    @property
    def bytes_read(self) -> int:
        """Bytes of the archive consumed so far (past the end, trailing bytes are not counted)."""
        return self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add the next piece of the archive.

        The reader keeps a view of ``data`` (no copy) until :meth:`next_event` has returned
        ``NEED_DATA``: do not modify a ``bytearray`` before then. Bytes fed after the end of
        the archive are ignored (``tar c`` pads its output to a 10 KiB record).

        Raises:
            ExecError: ``EXEC_INVALID`` if ``data`` is not bytes-like or the input has ended;
                the reader's :class:`TarError` if it has failed.
        """
        if self._error is not None:
            raise self._error
        if self._input_ended:
            raise ExecError(ExecErrorCode.INVALID, "feed() after end_of_input()")
        if isinstance(data, str):
            raise ExecError(ExecErrorCode.INVALID, "feed() takes bytes, not str")
        try:
            view = memoryview(data).cast("B")
        except TypeError:
            raise ExecError(
                ExecErrorCode.INVALID, f"feed() takes bytes, not {type(data).__name__}"
            ) from None
        if self._state is _State.END:
            return
        if self._pos < len(self._piece):
            # Fed again before the last piece was drained: join the rest to the new piece.
            view = memoryview(bytes(self._piece[self._pos :]) + bytes(view))
        self._piece = view
        self._pos = 0

    def end_of_input(self) -> None:
        """The stream has ended: what is missing now is missing for good (idempotent)."""
        self._input_ended = True

    def next_event(self) -> TarEvent | Literal[SessionSignal.NEED_DATA]:
        """The next event, or ``NEED_DATA`` when the fed bytes are used up.

        After :class:`ArchiveEnd`, every call returns that same event.

        Raises:
            TarError: the archive is malformed or truncated (``EXEC_FAILED``); raised again by
                every later call.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next_event()
        except TarError as error:
            self._error = error
            self._piece = _EMPTY
            self._buffer = bytearray()
            raise

    # -- the state machine ------------------------------------------------------------------

    def _next_event(self) -> TarEvent | Literal[SessionSignal.NEED_DATA]:
        while True:
            state = self._state
            if state is _State.DATA:
                remaining = self._remaining
                if not remaining:
                    self._state = _State.SKIP
                    assert self._member is not None
                    return MemberEnd(self._member)
                pos = self._pos
                count = min(len(self._piece) - pos, remaining, MAX_DATA_EVENT_BYTES)
                if count <= 0:
                    return self._need_data()
                self._pos = pos + count
                self._remaining = remaining - count
                self._offset += count
                return MemberData(self._piece[pos : pos + count])
            if state is _State.SKIP:
                count = min(len(self._piece) - self._pos, self._skip)
                self._pos += count
                self._offset += count
                self._skip -= count
                if self._skip:
                    return self._need_data()
                self._state = _State.HEADER
            elif state is _State.HEADER:
                block = self._take(BLOCK)
                if block is None:
                    return self._need_data()
                member = self._header(block)
                if member is not None:
                    return member
            elif state is _State.METADATA:
                record = self._take(self._metadata_size)
                if record is None:
                    return self._need_data()
                self._metadata(bytes(record))
            elif state is _State.ZERO:
                block = self._take(BLOCK)
                if block is None:
                    if self._input_ended and not self._buffer.strip(b"\0"):
                        # One zero block (and maybe part of another), then the end: old tars
                        # wrote only one.
                        return self._finish()
                    return self._need_data()
                if block != ZERO_BLOCK:
                    raise TarError(
                        f"a lone zero block followed by more data after {self._members} members",
                        offset=self._offset - 2 * BLOCK,
                    )
                return self._finish()
            else:
                assert self._end is not None
                return self._end

    def _take(self, size: int) -> memoryview | bytes | None:
        """``size`` bytes from the input, or ``None`` (what there was is kept for next time)."""
        buffer = self._buffer
        pos = self._pos
        available = len(self._piece) - pos
        if not buffer and available >= size:
            self._pos = pos + size
            self._offset += size
            return self._piece[pos : pos + size]
        count = min(size - len(buffer), available)
        buffer += self._piece[pos : pos + count]
        self._pos = pos + count
        self._offset += count
        if len(buffer) < size:
            return None
        taken = bytes(buffer)
        buffer.clear()
        return taken

    def _need_data(self) -> Literal[SessionSignal.NEED_DATA]:
        if not self._input_ended:
            # The piece is used up: drop the view, so the caller may reuse its buffer.
            self._piece = _EMPTY
            self._pos = 0
            return NEED_DATA
        raise self._truncated()

    def _truncated(self) -> TarError:
        state = self._state
        member = self._member
        if state is _State.DATA:
            assert member is not None
            missing = self._remaining
            return TarError(
                f"truncated: the input ended {missing} bytes short of the member's "
                f"{member.size} bytes of data",
                member=member.name,
                offset=member.offset,
            )
        if state is _State.SKIP and member is not None:
            return TarError(
                "truncated: the input ended inside the member's padding",
                member=member.name,
                offset=member.offset,
            )
        if state is _State.METADATA or (state is _State.SKIP and member is None):
            return TarError(
                "truncated: the input ended inside a pax or long-name record",
                offset=self._metadata_offset,
            )
        if self._buffer:
            return TarError(
                f"truncated: the input ended inside a header ({len(self._buffer)} of "
                f"{BLOCK} bytes)",
                offset=self._offset - len(self._buffer),
            )
        if self._offset == 0:
            return TarError("the input was empty: no tar archive")
        if self._metadata_offset is not None:
            return TarError(
                "truncated: the input ended after a pax or long-name record, before its member",
                offset=self._metadata_offset,
            )
        return TarError(
            f"truncated: the input ended after {self._members} members without the "
            "end-of-archive blocks",
            offset=self._offset,
        )

    def _finish(self) -> ArchiveEnd:
        self._state = _State.END
        self._piece = _EMPTY
        self._pos = 0
        self._end = ArchiveEnd(members=self._members, size=self._offset)
        return self._end

    # -- headers ----------------------------------------------------------------------------

    def _header(self, block: memoryview | bytes) -> TarMember | None:
        offset = self._offset - BLOCK
        if block == ZERO_BLOCK:
            if self._metadata_offset is not None:
                raise TarError(
                    "a pax or long-name record is followed by the end of the archive, "
                    "not by its member",
                    offset=self._metadata_offset,
                )
            self._state = _State.ZERO
            return None
        raw = bytes(block)
        stored = parse_number(raw[148:156])
        if stored is None:
            raise TarError(
                f"the header of member #{self._members + 1} has no checksum: not a tar archive?",
                offset=offset,
            )
        actual = unsigned_checksum(raw)
        if stored != actual and stored != signed_checksum(raw):
            hint = " (not a tar archive?)" if offset == 0 else ""
            raise TarError(
                f"bad checksum in the header of member #{self._members + 1}: it states "
                f"{stored}, its bytes sum to {actual}{hint}",
                offset=offset,
            )
        typeflag = raw[156:157]
        size = parse_number(raw[124:136])
        if size is None or size < 0:
            raise TarError(
                f"the header of member #{self._members + 1} has a malformed size field",
                offset=offset,
            )
        if typeflag in _METADATA_TYPES:
            self._start_metadata(typeflag, size, offset)
            return None
        if typeflag == b"S":
            raise TarError(
                "old GNU sparse members are not supported",
                member=decode_name(_field(raw, 0, 100)),
                offset=offset,
            )
        return self._member_from(raw, typeflag, size, offset)

    def _start_metadata(self, typeflag: bytes, size: int, offset: int) -> None:
        if self._metadata_offset is None:
            self._metadata_offset = offset
        self._metadata_bytes += size
        if self._metadata_bytes > self._max_metadata:
            raise TarError(
                f"the pax and long-name records before member #{self._members + 1} exceed "
                f"the {self._max_metadata}-byte budget ({self._metadata_bytes} bytes)",
                offset=self._metadata_offset,
            )
        self._metadata_type = typeflag
        self._metadata_size = size
        self._skip = -size % BLOCK
        self._state = _State.METADATA

    def _metadata(self, record: bytes) -> None:
        kind = self._metadata_type
        self._state = _State.SKIP
        if kind == b"L":
            self._long_name = record.split(b"\0", 1)[0]
            return
        if kind == b"K":
            self._long_link = record.split(b"\0", 1)[0]
            return
        parsed = parse_pax_records(record)
        if isinstance(parsed, str):
            raise TarError(f"malformed pax header: {parsed}", offset=self._metadata_offset)
        if kind == b"x":
            self._pax.update(parsed)
            return
        for key, value in parsed.items():
            if value:
                self._global[key] = value
            else:
                self._global.pop(key, None)
        held = sum(len(key) + len(value) for key, value in self._global.items())
        if held > self._max_metadata:
            raise TarError(
                f"the global pax records exceed the {self._max_metadata}-byte budget",
                offset=self._metadata_offset,
            )

    def _member_from(self, raw: bytes, typeflag: bytes, size: int, offset: int) -> TarMember:
        (
            name_field,
            mode_field,
            uid_field,
            gid_field,
            _,  # size: read by _header
            mtime_field,
            _,  # checksum: checked by _header
            _,  # typeflag
            link_field,
            magic,
            _,  # version
            uname_field,
            gname_field,
            major_field,
            minor_field,
            prefix_field,
        ) = _HEADER.unpack(raw)
        # Usually neither is set: share one empty mapping rather than copy per member.
        pax: Mapping[str, str] = (
            {**self._global, **self._pax} if self._global else self._pax or _NO_RECORDS
        )
        start = offset if self._metadata_offset is None else self._metadata_offset
        if pax.get("path"):
            name = pax["path"]
        elif self._long_name is not None:
            name = decode_name(self._long_name)
        else:
            base = name_field.split(b"\0", 1)[0]
            prefix = prefix_field.split(b"\0", 1)[0] if magic == _USTAR_MAGIC else b""
            name = decode_name(prefix + b"/" + base if prefix else base)
        if pax.get("linkpath"):
            linkname = pax["linkpath"]
        elif self._long_link is not None:
            linkname = decode_name(self._long_link)
        else:
            linkname = decode_name(link_field.split(b"\0", 1)[0])

        mode = _header_number(mode_field, "mode", name, start)
        uid = _header_number(uid_field, "uid", name, start)
        gid = _header_number(gid_field, "gid", name, start)
        mtime = _header_number(mtime_field, "mtime", name, start)
        kind = kind_of(typeflag)
        if kind is TarKind.FILE and typeflag == b"\0" and name.endswith("/"):
            kind = TarKind.DIRECTORY  # old (V7) tars mark a directory only by its slash
        uname = gname = ""
        if pax:
            if kind is TarKind.FILE and any(key.startswith("GNU.sparse.") for key in pax):
                kind = TarKind.SPARSE
            uid = _pax_integer(pax, "uid", uid, name, start)
            gid = _pax_integer(pax, "gid", gid, name, start)
            size = _pax_integer(pax, "size", size, name, start)
            if pax.get("mtime"):
                pax_mtime = _pax_time(pax["mtime"])
                if pax_mtime is None:
                    raise TarError(
                        f"the pax record mtime={pax['mtime'][:40]!r} is not a time",
                        member=name,
                        offset=start,
                    )
                mtime = pax_mtime
            uname = pax.get("uname", "")
            gname = pax.get("gname", "")
        devmajor = devminor = 0
        if kind is TarKind.CHAR_DEVICE or kind is TarKind.BLOCK_DEVICE:
            major = parse_number(major_field)
            minor = parse_number(minor_field)
            if major is None or minor is None:
                raise TarError(
                    "the header's device fields are malformed", member=name, offset=start
                )
            devmajor, devminor = major, minor
        uname = uname or decode_name(uname_field.split(b"\0", 1)[0])
        gname = gname or decode_name(gname_field.split(b"\0", 1)[0])
        mode &= 0o7777
        data_size = size if kind.has_data else 0
        member = TarMember(
            name=name,
            kind=kind,
            typeflag=typeflag.decode("latin-1"),
            size=data_size,
            mode=mode,
            mtime=mtime,
            linkname=linkname,
            uid=uid,
            gid=gid,
            uname=uname,
            gname=gname,
            devmajor=devmajor,
            devminor=devminor,
            pax_headers=pax,
            index=self._members,
            offset=start,
        )
        self._members += 1
        self._member = member
        self._pax = {}
        self._long_name = self._long_link = None
        self._metadata_bytes = 0
        self._metadata_offset = None
        self._remaining = data_size
        self._skip = -data_size % BLOCK
        self._state = _State.DATA
        return member
