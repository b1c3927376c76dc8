"""What the tar tests share: archives built with ``tarfile``, chunked reading, raw headers, and
an in-memory file system that resolves paths the way the kernel does.

The model file system (:class:`ModelFS`) stands for the most naive extractor there is: one that
does exactly what the policy's decisions say with ``open``/``mkdir``/``symlink``/``link``,
*following* every symlink it meets, as the vulnerable ``kubectl cp`` did. If even that extractor
writes nothing outside the destination, the policy alone is what keeps the archive in.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Sequence

import attrs
from hypothesis import strategies as st

from kuber_exec_core import NEED_DATA
from kuber_exec_core.tar import (
    ArchiveEnd,
    MemberData,
    MemberEnd,
    TarKind,
    TarMember,
    TarReader,
)

BLOCK = 512


# -- reading ---------------------------------------------------------------------------------


@attrs.define
class ReadMember:
    member: TarMember
    data: bytearray = attrs.field(factory=bytearray)
    ended: bool = False


@attrs.define
class ReadArchive:
    members: list[ReadMember]
    end: ArchiveEnd
    largest_event: int


def pieces(raw: bytes, cuts: Sequence[int]) -> Iterable[bytes]:
    """``raw`` cut into pieces of the sizes in ``cuts`` (each at least 1), cycled."""
    position = 0
    index = 0
    while position < len(raw):
        size = cuts[index % len(cuts)] if cuts else len(raw)
        index += 1
        yield raw[position : position + size]
        position += size


def read_archive(
    raw: bytes, cuts: Sequence[int] = (), reader: TarReader | None = None
) -> ReadArchive:
    """Every event of ``raw`` fed in the given pieces; raises what the reader raises."""
    reader = reader or TarReader()
    members: list[ReadMember] = []
    largest = 0
    chunks = iter(pieces(raw, cuts))
    while True:
        event = reader.next_event()
        if event is NEED_DATA:
            chunk = next(chunks, None)
            if chunk is None:
                reader.end_of_input()
            else:
                reader.feed(chunk)
        elif isinstance(event, TarMember):
            members.append(ReadMember(event))
        elif isinstance(event, MemberData):
            assert members
            assert not members[-1].ended
            largest = max(largest, len(event.data))
            members[-1].data += event.data
        elif isinstance(event, MemberEnd):
            assert event.member is members[-1].member
            members[-1].ended = True
        else:
            assert isinstance(event, ArchiveEnd)
            return ReadArchive(members, event, largest)


cuts_strategy = st.lists(st.integers(min_value=1, max_value=1500), min_size=1, max_size=12)


# -- writing with tarfile --------------------------------------------------------------------


@attrs.frozen
class Spec:
    """One member to write with ``tarfile``."""

    name: str
    kind: TarKind
    data: bytes = b""
    linkname: str = ""
    mode: int = 0o644
    mtime: int = 0
    uid: int = 0
    gid: int = 0
    uname: str = ""
    gname: str = ""


_TYPES = {
    TarKind.FILE: tarfile.REGTYPE,
    TarKind.DIRECTORY: tarfile.DIRTYPE,
    TarKind.SYMLINK: tarfile.SYMTYPE,
    TarKind.HARDLINK: tarfile.LNKTYPE,
    TarKind.FIFO: tarfile.FIFOTYPE,
    TarKind.CHAR_DEVICE: tarfile.CHRTYPE,
    TarKind.BLOCK_DEVICE: tarfile.BLKTYPE,
}


def tarinfo(spec: Spec) -> tarfile.TarInfo:
    info = tarfile.TarInfo(spec.name)
    info.type = _TYPES[spec.kind]
    info.size = len(spec.data) if spec.kind is TarKind.FILE else 0
    info.linkname = spec.linkname
    info.mode = spec.mode
    info.mtime = spec.mtime
    info.uid, info.gid = spec.uid, spec.gid
    info.uname, info.gname = spec.uname, spec.gname
    return info


def tarfile_archive(specs: Iterable[Spec], format: int = tarfile.GNU_FORMAT) -> bytes:
    """The archive ``tarfile`` writes for ``specs`` (``ValueError`` if the format cannot)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format, encoding="utf-8") as archive:
        for spec in specs:
            archive.addfile(tarinfo(spec), io.BytesIO(spec.data) if spec.data else None)
    return buffer.getvalue()


_TYPEFLAGS = {
    TarKind.FILE: "0",
    TarKind.DIRECTORY: "5",
    TarKind.SYMLINK: "2",
    TarKind.HARDLINK: "1",
    TarKind.FIFO: "6",
    TarKind.CHAR_DEVICE: "3",
    TarKind.BLOCK_DEVICE: "4",
}


def member(
    name: str,
    kind: TarKind = TarKind.FILE,
    *,
    linkname: str = "",
    size: int = 0,
    mode: int = 0o644,
    index: int = 0,
) -> TarMember:
    """A member as the reader would give it."""
    return TarMember(
        name=name,
        kind=kind,
        typeflag=_TYPEFLAGS.get(kind, "Z"),
        size=size,
        mode=mode,
        mtime=0,
        linkname=linkname,
        index=index,
        offset=index * BLOCK,
    )


# -- raw headers -----------------------------------------------------------------------------


def raw_header(
    name: bytes,
    *,
    typeflag: bytes = b"0",
    size: int | bytes = 0,
    mode: bytes = b"0000644\0",
    linkname: bytes = b"",
    magic: bytes = b"ustar\x0000",
    prefix: bytes = b"",
    mtime: bytes = b"00000000000\0",
    checksum: bytes | None = None,
) -> bytes:
    """One header block built by hand (for shapes no writer produces), checksummed."""
    size_field = size if isinstance(size, bytes) else b"%011o\0" % size
    block = bytearray(BLOCK)
    block[0:100] = name[:100].ljust(100, b"\0")
    block[100:108] = mode
    block[108:116] = b"0000000\0"
    block[116:124] = b"0000000\0"
    block[124:136] = size_field
    block[136:148] = mtime
    block[148:156] = b" " * 8
    block[156:157] = typeflag
    block[157:257] = linkname[:100].ljust(100, b"\0")
    block[257:265] = magic
    block[345:500] = prefix.ljust(155, b"\0")
    block[148:156] = checksum if checksum is not None else b"%06o\0 " % sum(block)
    return bytes(block)


def raw_member(name: bytes, data: bytes = b"", **fields: object) -> bytes:
    return raw_header(name, size=len(data), **fields) + data + bytes(-len(data) % BLOCK)  # type: ignore[arg-type]


def pax_member(records: dict[str, str] | bytes, typeflag: bytes = b"x") -> bytes:
    if isinstance(records, dict):
        body = b""
        for key, value in records.items():
            text = f" {key}={value}\n".encode()
            length = len(text) + len(str(len(text)))
            length = len(text) + len(str(length))
            body += str(length).encode() + text
    else:
        body = records
    return raw_member(b"././@PaxHeader", body, typeflag=typeflag)


END = bytes(2 * BLOCK)
