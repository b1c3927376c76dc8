"""The tar format's shared parts: member metadata, budgets, the error, and the header fields.

A tar archive is a sequence of 512-byte blocks. Each member is a header block, then its data
rounded up to a whole block; two zero blocks end the archive. Three dialects extend the 1988
ustar header, and ``tar c`` in a pod emits all of them:

- **ustar** (POSIX.1-1988): a 100-byte name, a 155-byte prefix joined to it with ``/``, octal
  number fields (11 digits of size: at most 8 GiB - 1).
- **GNU**: a member named ``././@LongLink`` of type ``L`` (or ``K``) whose data is the next
  member's name (or link target); number fields too large for octal in base-256 (the first byte's
  high bit set). GNU tar and busybox write these.
- **pax** (POSIX.1-2001): a member of type ``x`` whose data is ``"<length> <key>=<value>\\n"``
  records overriding the next member's fields (``path``, ``linkpath``, ``size``, ``mtime``,
  ``uid`` …), and ``g`` records applying to every later member.

This module holds what the reader (``_reader``), the writer (``_writer``) and the
extraction policy (``_policy``) share. None of it does I/O.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping

import attrs

from .._errors import ExecError, ExecErrorCode
from .._limits import positive_int

__all__ = [
    "BLOCK",
    "DEFAULT_MAX_COMPONENT_BYTES",
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_MAX_METADATA_BYTES",
    "DEFAULT_MAX_PATH_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "ZERO_BLOCK",
    "TarError",
    "TarKind",
    "TarLimits",
    "TarMember",
    "decode_name",
    "encode_name",
    "kind_of",
    "parse_number",
    "parse_pax_records",
    "signed_checksum",
    "stored_checksum",
    "unsigned_checksum",
]

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)

# The budgets' defaults, each with its reason.
#: Members: a large source tree holds about 100,000 files; ten times that is still bounded (the
#: extraction policy remembers about 150 bytes per member).
DEFAULT_MAX_MEMBERS = 1_000_000
#: Bytes of file data: a stop against a hostile pod filling the local disk; a caller that knows
#: the size it expects should pass it.
DEFAULT_MAX_TOTAL_BYTES = 64 * 1024**3
#: A path: Linux's ``PATH_MAX``.
DEFAULT_MAX_PATH_BYTES = 4096
#: One path component: ``NAME_MAX`` on every common file system.
DEFAULT_MAX_COMPONENT_BYTES = 255
#: The pax and GNU long-name records before one member (or a global pax record): a long name is
#: at most ``PATH_MAX``; extended attributes and ACLs (``SCHILY.xattr.*``) take more, and 1 MiB
#: holds any real set while bounding what the reader buffers.
DEFAULT_MAX_METADATA_BYTES = 1024 * 1024

#: The standard typeflags and what they are.
_KINDS = {
    b"0": "FILE",
    b"\0": "FILE",
    b"7": "FILE",  # contiguous file: a regular file everywhere but on a few old Unixes
    b"1": "HARDLINK",
    b"2": "SYMLINK",
    b"3": "CHAR_DEVICE",
    b"4": "BLOCK_DEVICE",
    b"5": "DIRECTORY",
    b"6": "FIFO",
}


class TarKind(enum.Enum):
    """What a member is, from its typeflag."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"
    CHAR_DEVICE = "character device"
    BLOCK_DEVICE = "block device"
    FIFO = "fifo"
    #: A regular file stored sparse (pax ``GNU.sparse.*`` records): its data is not the file's
    #: bytes as they are, so it cannot be extracted as a plain file.
    SPARSE = "sparse file"
    #: Any other typeflag (GNU volume labels, dump directories, vendor extensions). Its data is
    #: framed by its size, as POSIX says to treat unknown types.
    OTHER = "other"

    @property
    def has_data(self) -> bool:
        """Whether members of this kind carry data blocks (the size field counts)."""
        return self in _DATA_KINDS


_DATA_KINDS = frozenset({TarKind.FILE, TarKind.SPARSE, TarKind.OTHER})


def kind_of(typeflag: bytes) -> TarKind:
    """The kind of a (non-metadata) typeflag; unknown ones are ``OTHER``."""
    name = _KINDS.get(typeflag)
    return TarKind.OTHER if name is None else TarKind[name]


@attrs.frozen(kw_only=True)
class TarMember:
    """One member's metadata, as the archive states it (the reader's header event).

    Attributes:
        name: the member's path as the archive spells it (pax ``path``, a GNU long name, or
            ``prefix/name``), decoded as UTF-8 with ``surrogateescape``, so that any bytes come
            back with ``os.fsencode``. Not checked: the extraction policy decides what is safe.
        kind: what the member is.
        typeflag: the header's raw typeflag (one character; ``"\\x00"`` for old regular files).
        size: the bytes of data that follow (0 for kinds without data, whatever the header
            says, as Python's ``tarfile`` and GNU tar read them).
        mode: the permission bits as stored (the policy strips setuid, setgid and sticky).
        mtime: seconds since the epoch (a pax fraction is rounded down; the exact value is in
            ``pax_headers["mtime"]``).
        linkname: a symlink's target or a hard link's earlier member; ``""`` otherwise.
        uid: the owner's numeric id.
        gid: the group's numeric id.
        uname: the owner's name, ``""`` if none.
        gname: the group's name, ``""`` if none.
        devmajor: a device node's major number (0 for other kinds).
        devminor: a device node's minor number.
        pax_headers: every pax record that applied to this member (global then its own).
        index: the member's position in the archive, from 0.
        offset: where the member's first header (its pax or long-name record, if any) begins.
    """

    name: str
    kind: TarKind
    typeflag: str
    size: int
    mode: int
    mtime: int
    linkname: str = ""
    uid: int = 0
    gid: int = 0
    uname: str = ""
    gname: str = ""
    devmajor: int = 0
    devminor: int = 0
    pax_headers: Mapping[str, str] = attrs.field(factory=dict, repr=False, hash=False)
    index: int = 0
    offset: int = 0


class TarError(ExecError):
    """An archive that cannot be read, or a member the extraction policy refuses.

    Always ``EXEC_FAILED``: the archive came from the remote side (``tar c`` in the pod) and is
    wrong or hostile. ``member`` names the member concerned (``None`` before the first one) and
    ``offset`` is where its header begins in the archive (``None`` when unknown).
    """

    member: str | None
    offset: int | None

    def __init__(self, message: str, *, member: str | None = None, offset: int | None = None):
        where = []
        if member is not None:
            where.append(f"member {member!r}")
        if offset is not None:
            where.append(f"at offset {offset}")
        suffix = f" ({' '.join(where)})" if where else ""
        super().__init__(ExecErrorCode.FAILED, f"tar archive: {message}{suffix}")
        self.member = member
        self.offset = offset


def _positive(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    positive_int(value, attribute.name)


@attrs.frozen(kw_only=True)
class TarLimits:
    """The budgets of reading and extracting one archive; each a positive ``int``.

    The reader uses ``max_metadata_bytes``; the extraction policy the others. A member past a
    budget ends the extraction with a :class:`TarError` naming it.

    Raises:
        ExecError: ``EXEC_INVALID`` when a value is not a positive ``int``.
    """

    #: Members (of every kind, skipped ones included).
    max_members: int = attrs.field(default=DEFAULT_MAX_MEMBERS, validator=_positive)
    #: Bytes of file data, summed over the archive; a member's declared size counts at its header.
    max_total_bytes: int = attrs.field(default=DEFAULT_MAX_TOTAL_BYTES, validator=_positive)
    #: A member's path (after normalisation), in UTF-8 bytes.
    max_path_bytes: int = attrs.field(default=DEFAULT_MAX_PATH_BYTES, validator=_positive)
    #: One component of a path, in UTF-8 bytes.
    max_component_bytes: int = attrs.field(default=DEFAULT_MAX_COMPONENT_BYTES, validator=_positive)
    #: The pax and long-name records the reader buffers before one member (global ones included).
    max_metadata_bytes: int = attrs.field(default=DEFAULT_MAX_METADATA_BYTES, validator=_positive)


def decode_name(raw: bytes) -> str:
    """Archive bytes as text: UTF-8, undecodable bytes kept as lone surrogates."""
    return raw.decode("utf-8", "surrogateescape")


def encode_name(text: str) -> bytes:
    """The inverse of :func:`decode_name`; raises ``UnicodeEncodeError`` on a stray surrogate."""
    return text.encode("utf-8", "surrogateescape")


def parse_number(field: bytes | memoryview) -> int | None:
    """A header's number field: octal text, or GNU base-256. ``None`` if it is neither.

    Octal is read up to the first NUL with surrounding spaces ignored (an empty field is 0), as
    every tar writes it. Base-256 starts with ``0x80`` (positive) or ``0xff`` (negative, two's
    complement over the whole field).
    """
    raw = field if isinstance(field, bytes) else bytes(field)
    first = raw[0]
    if first == 0x80:
        return int.from_bytes(raw[1:], "big")
    if first == 0xFF:
        return int.from_bytes(raw, "big", signed=True)
    text = raw.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not text.isdigit():  # int() would take signs, underscores and inner spaces
        return None
    try:
        return int(text, 8)
    except ValueError:  # an 8 or a 9
        return None


_SIGNED = struct.Struct("148b8x356b")
# The checksum field counts as eight spaces.
_SPACES = 8 * ord(" ")


def unsigned_checksum(block: bytes) -> int:
    """A header's checksum as POSIX defines it: its bytes summed unsigned."""
    return sum(block) - sum(block[148:156]) + _SPACES


def signed_checksum(block: bytes) -> int:
    """The checksum summed over signed bytes, as some old tars (Sun, early GNU) wrote it."""
    return int(sum(_SIGNED.unpack(block))) + _SPACES


def stored_checksum(block: bytes | memoryview) -> int | None:
    """The checksum the header states, or ``None`` if the field is not a number."""
    return parse_number(block[148:156])


def parse_pax_records(data: bytes) -> dict[str, str] | str:
    """pax extended-header records as a dict (in order; a repeated key's last value wins).

    Returns a string saying what is wrong when ``data`` is not a sequence of
    ``"<length> <key>=<value>\\n"`` records whose decimal length counts the whole record.
    An empty value is kept (it means "unset" to the reader).
    """
    records: dict[str, str] = {}
    position = 0
    end = len(data)
    while position < end:
        # GNU tar pads the block after the last record with NULs; some writers leave the rest
        # of the record data so.
        if data[position] == 0:
            if data.count(0, position) != end - position:
                return f"NUL bytes inside the pax records at byte {position}"
            break
        space = data.find(b" ", position, min(end, position + 21))
        digits = data[position:space] if space > position else b""
        if not digits or digits.translate(None, b"0123456789"):
            return f"a pax record without a length at byte {position}"
        length = int(digits)
        stop = position + length
        if length < len(digits) + 4 or stop > end or data[stop - 1] != 0x0A:
            return f"a pax record whose length {length} does not fit at byte {position}"
        key, equals, value = data[space + 1 : stop - 1].partition(b"=")
        if not equals or not key:
            return f"a pax record without a key at byte {position}"
        records[decode_name(key)] = decode_name(value)
        position = stop
    return records
