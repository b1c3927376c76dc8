"""The streaming tar writer: an archive's bytes, member by member, for ``tar x`` in a pod.

Each method returns the bytes to send next; file data passes through unchanged (the writer
only counts it), so an upload streams a file of any size in pieces of the caller's choosing.
:meth:`TarWriter.add` takes a :class:`~kuber_exec_core.tar.TarMember`, the reader's header
event, so what the reader yields the writer writes back (``add_file`` and its siblings spell
the same call with keywords)::

    writer = TarWriter()
    out(writer.add_file("dir/name", size, mode=0o644, mtime=mtime))
    for piece in pieces:
        out(writer.write_data(piece))
    out(writer.end_file())
    out(writer.finish())

To know an archive's length before writing it (a v4 upload announces it), make the same calls
on a second writer with :meth:`TarWriter.skip_data` in place of the data and read its
``bytes_written``.

The format is ustar, with a pax ``x`` record before a member whose name, link target, user or
group name does not fit its field (or is not ASCII), or whose size, ids or mtime are out of the
octal fields' range; a size over 8 GiB is also written base-256 in the header, which GNU tar and
busybox read. The output depends only on the calls: no clock, no user database, no process id
(the pax record's header is named ``././@PaxHeader``, as Python's ``tarfile`` names it).
"""

from __future__ import annotations

import enum
import struct

from .._errors import ExecError, ExecErrorCode
from ._format import BLOCK, ZERO_BLOCK, TarKind, TarMember, encode_name

__all__ = ["TarWriter"]

_PAX_NAME = b"././@PaxHeader"
# The header's fields, in order: struct pads each text with NULs (and cuts what is too long, which
# only happens where a pax record holds the whole value).
_HEADER = struct.Struct("100s8s8s8s12s12s8sc100s8s32s32s8s8s155s12x")
_ZERO_8 = b"0000000\0"
_MAX_OCTAL_8 = 0o7777777  # 7 digits and a NUL
_MAX_OCTAL_12 = 0o77777777777  # 11 digits and a NUL: 8 GiB - 1


class _Phase(enum.Enum):
    READY = "READY"
    DATA = "DATA"
    FINISHED = "FINISHED"


def _invalid(message: str) -> ExecError:
    return ExecError(ExecErrorCode.INVALID, message)


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\0" % (width - 1, value)


def _pax_record(key: str, value: bytes) -> bytes:
    body = b" " + key.encode("ascii") + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode("ascii") + body


def _checked_int(value: object, name: str, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _invalid(f"{name} must be an integer of at least {low}")
    return value


def _checked_text(value: object, name: str) -> str:
    if not isinstance(value, str) or "\0" in value:
        raise _invalid(f"{name} must be text without NUL")
    return value


class TarWriter:
    """Writes one tar archive member by member; see the module's description for the shape.

    Names are relative paths with ``/`` between components (a directory's trailing ``/`` is
    added); absolute names, ``.`` or ``..`` components, empty components and NUL are refused
    with ``EXEC_INVALID``, as are wrong types, negative numbers and calls out of order. Text is
    encoded as UTF-8 with ``surrogateescape`` (``os.fsdecode``'s names round-trip).
    """

    def __init__(self) -> None:
        self._phase = _Phase.READY
        self._remaining = 0
        self._size = 0
        self._name = ""
        self._bytes_written = 0

    @property
    def bytes_written(self) -> int:
        """Bytes of the archive produced so far (headers, data, padding)."""
        return self._bytes_written

    def add(self, member: TarMember) -> bytes:
        """The header(s) of ``member``: a file (its ``size`` bytes of data must follow, as
        after :meth:`add_file`), a directory, a symbolic link or a hard link to its
        ``linkname``.

        Written: ``name``, ``kind``, ``size``, ``mode``, ``mtime``, ``uid``, ``gid``,
        ``uname``, ``gname`` and ``linkname``; the rest of a member the reader produced
        (``typeflag``, ``pax_headers``, ``index``, ``offset``) is the reader's account of
        another archive and is not copied.

        Raises:
            ExecError: ``EXEC_INVALID`` for another kind, a bad field or a call out of order.
        """
        if not isinstance(member, TarMember):
            raise _invalid(f"add() takes a TarMember, not {type(member).__name__}")
        kind = member.kind
        if kind is TarKind.FILE:
            size = _checked_int(member.size, "size")
            header = self._header_of(member, b"0", size, "")
            self._phase = _Phase.DATA
            self._remaining = self._size = size
            self._name = member.name
            return header
        if kind is TarKind.DIRECTORY:
            return self._header_of(member, b"5", 0, "")
        target = member.linkname
        if kind is TarKind.SYMLINK:
            if not isinstance(target, str) or not target or "\0" in target:
                raise _invalid("a symlink's target must be non-empty text without NUL")
            return self._header_of(member, b"2", 0, target)
        if kind is TarKind.HARDLINK:
            self._check_name(target, "a hard link's target")
            return self._header_of(member, b"1", 0, target)
        raise _invalid(f"the writer writes files, directories and links, not a {kind.value}")

    def add_file(
        self,
        name: str,
        size: int,
        *,
        mode: int = 0o644,
        mtime: int = 0,
        uid: int = 0,
        gid: int = 0,
        uname: str = "",
        gname: str = "",
    ) -> bytes:
        """The header(s) of a regular file of ``size`` bytes; its data must follow.

        Pass the data to :meth:`write_data` (exactly ``size`` bytes, in any pieces), then call
        :meth:`end_file`, even for an empty file.
        """
        return self.add(
            TarMember(name=name, kind=TarKind.FILE, typeflag="0", size=size, mode=mode,
                      mtime=mtime, uid=uid, gid=gid, uname=uname, gname=gname)
        )  # fmt: skip

    def write_data(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """Count a piece of the open file's data and return it unchanged (send it as it is)."""
        if self._phase is not _Phase.DATA:
            raise _invalid("write_data() without an open file (call add_file() first)")
        if isinstance(data, str):
            raise _invalid("write_data() takes bytes, not str")
        try:
            length = memoryview(data).nbytes
        except TypeError:
            raise _invalid(f"write_data() takes bytes, not {type(data).__name__}") from None
        if length > self._remaining:
            raise _invalid(
                f"{self._name!r}: more data than the {self._size} bytes its header declared"
            )
        self._remaining -= length
        self._bytes_written += length
        return data

    def skip_data(self, count: int) -> int:
        """Count ``count`` bytes of the open file's data without them; returns ``count``.

        For a writer that only measures an archive: a v4 upload must announce its exact size
        before it starts (``head -c N | tar x``, since v4 cannot close stdin), so the size is
        summed by a first writer given the same calls with ``skip_data`` for the data, whose
        ``bytes_written`` after ``finish()`` is the real writer's final length.
        """
        if self._phase is not _Phase.DATA:
            raise _invalid("skip_data() without an open file (call add_file() first)")
        count = _checked_int(count, "count")
        if count > self._remaining:
            raise _invalid(
                f"{self._name!r}: more data than the {self._size} bytes its header declared"
            )
        self._remaining -= count
        self._bytes_written += count
        return count

    def end_file(self) -> bytes:
        """The padding that closes the open file, once all of its declared data was written."""
        if self._phase is not _Phase.DATA:
            raise _invalid("end_file() without an open file")
        if self._remaining:
            raise _invalid(
                f"{self._name!r}: {self._remaining} of the {self._size} bytes its header "
                "declared were not written"
            )
        self._phase = _Phase.READY
        padding = bytes(-self._size % BLOCK)
        self._bytes_written += len(padding)
        return padding

    def add_directory(
        self,
        name: str,
        *,
        mode: int = 0o755,
        mtime: int = 0,
        uid: int = 0,
        gid: int = 0,
        uname: str = "",
        gname: str = "",
    ) -> bytes:
        """The header of a directory (its contents are separate members)."""
        return self.add(
            TarMember(name=name, kind=TarKind.DIRECTORY, typeflag="5", size=0, mode=mode,
                      mtime=mtime, uid=uid, gid=gid, uname=uname, gname=gname)
        )  # fmt: skip

    def add_symlink(
        self,
        name: str,
        target: str,
        *,
        mode: int = 0o777,
        mtime: int = 0,
        uid: int = 0,
        gid: int = 0,
        uname: str = "",
        gname: str = "",
    ) -> bytes:
        """The header of a symbolic link to ``target`` (any non-empty text without NUL)."""
        return self.add(
            TarMember(name=name, kind=TarKind.SYMLINK, typeflag="2", size=0, mode=mode,
                      mtime=mtime, linkname=target, uid=uid, gid=gid, uname=uname,
                      gname=gname)
        )  # fmt: skip

    def add_hardlink(
        self,
        name: str,
        target: str,
        *,
        mode: int = 0o644,
        mtime: int = 0,
        uid: int = 0,
        gid: int = 0,
        uname: str = "",
        gname: str = "",
    ) -> bytes:
        """The header of a hard link to ``target``, an earlier member's name."""
        return self.add(
            TarMember(name=name, kind=TarKind.HARDLINK, typeflag="1", size=0, mode=mode,
                      mtime=mtime, linkname=target, uid=uid, gid=gid, uname=uname,
                      gname=gname)
        )  # fmt: skip

    def finish(self) -> bytes:
        """The end-of-archive blocks (two zero blocks); nothing may be added afterwards."""
        self._ready("finish()")
        self._phase = _Phase.FINISHED
        self._bytes_written += 2 * BLOCK
        return ZERO_BLOCK * 2

    # -- encoding ---------------------------------------------------------------------------

    def _ready(self, what: str) -> None:
        if self._phase is _Phase.DATA:
            raise _invalid(f"{what} while the file {self._name!r} is open (call end_file())")
        if self._phase is _Phase.FINISHED:
            raise _invalid(f"{what} after finish()")

    def _header_of(self, member: TarMember, typeflag: bytes, size: int, linkname: str) -> bytes:
        return self._member(
            member.name, typeflag, size, member.mode, member.mtime, member.uid, member.gid,
            member.uname, member.gname, linkname,
        )  # fmt: skip

    @staticmethod
    def _check_name(name: object, what: str) -> str:
        if not isinstance(name, str):
            raise _invalid(f"{what} must be text, not {type(name).__name__}")
        if "\0" in name:
            raise _invalid(f"{what} {name!r} holds a NUL character")
        if not name or name.startswith("/"):
            raise _invalid(f"{what} {name!r} must be a non-empty relative path")
        parts = name.removesuffix("/").split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise _invalid(f"{what} {name!r} has an empty, '.' or '..' component")
        return name

    def _member(
        self,
        name: str,
        typeflag: bytes,
        size: int,
        mode: object,
        mtime: object,
        uid: object,
        gid: object,
        uname: object,
        gname: object,
        linkname: str,
    ) -> bytes:
        self._ready("adding a member")
        self._check_name(name, "a member's name")
        mode = _checked_int(mode, "mode")
        if mode > 0o7777:
            raise _invalid("mode must be at most 0o7777 (permission bits only)")
        mtime = _checked_int(mtime, "mtime", low=-(2**63))
        uid = _checked_int(uid, "uid")
        gid = _checked_int(gid, "gid")
        uname = _checked_text(uname, "uname")
        gname = _checked_text(gname, "gname")
        if typeflag == b"5" and not name.endswith("/"):
            name += "/"

        pax: dict[str, bytes] = {}
        binary = False

        def text(value: str, key: str, width: int) -> bytes:
            nonlocal binary
            try:
                raw = value.encode("utf-8")
            except UnicodeEncodeError:
                try:
                    raw = encode_name(value)
                except UnicodeEncodeError:
                    raise _invalid(f"{key} {value!r} cannot be encoded") from None
                binary = True
            if len(raw) > width or not raw.isascii():
                pax[key] = raw
            return raw

        raw_name = text(name, "path", 100)
        prefix = b""
        if "path" in pax and raw_name.isascii():
            split = _split_ustar(raw_name)
            if split is not None:
                del pax["path"]
                prefix, raw_name = split
        raw_link = text(linkname, "linkpath", 100)
        raw_uname = text(uname, "uname", 32)
        raw_gname = text(gname, "gname", 32)

        if size > _MAX_OCTAL_12:
            pax["size"] = str(size).encode("ascii")
            size_field = b"\x80" + size.to_bytes(11, "big") if size < 256**11 else bytes(12)
        else:
            size_field = _octal(size, 12)
        if 0 <= mtime <= _MAX_OCTAL_12:
            mtime_field = _octal(mtime, 12)
        else:
            pax["mtime"] = str(mtime).encode("ascii")
            mtime_field = _octal(0, 12)
        id_fields = []
        for value, key in ((uid, "uid"), (gid, "gid")):
            if value > _MAX_OCTAL_8:
                pax[key] = str(value).encode("ascii")
                value = 0
            id_fields.append(_octal(value, 8))

        header = _header(
            name=raw_name,
            mode=_octal(mode, 8),
            uid=id_fields[0],
            gid=id_fields[1],
            size=size_field,
            mtime=mtime_field,
            typeflag=typeflag,
            linkname=raw_link,
            uname=raw_uname,
            gname=raw_gname,
            prefix=prefix,
        )
        if pax:
            if binary:
                pax["hdrcharset"] = b"BINARY"
            records = b"".join(_pax_record(key, pax[key]) for key in sorted(pax))
            pax_header = _header(
                name=_PAX_NAME,
                mode=_octal(0, 8),
                uid=_octal(0, 8),
                gid=_octal(0, 8),
                size=_octal(len(records), 12),
                mtime=_octal(0, 12),
                typeflag=b"x",
                linkname=b"",
                uname=b"",
                gname=b"",
                prefix=b"",
            )
            header = pax_header + records + bytes(-len(records) % BLOCK) + header
        self._bytes_written += len(header)
        return header


def _split_ustar(name: bytes) -> tuple[bytes, bytes] | None:
    """ustar's ``prefix`` and ``name`` fields for a path, if one of its ``/`` allows it.

    The prefix holds at most 155 bytes and the name at most 100; the last ``/`` within reach
    leaves the shortest name, so it is the only one worth trying. A directory's trailing ``/``
    stays in the name.
    """
    cut = name.rfind(b"/", 0, min(156, len(name) - 1))
    if cut <= 0 or len(name) - cut - 1 > 100:
        return None
    return name[:cut], name[cut + 1 :]


def _header(
    *,
    name: bytes,
    mode: bytes,
    uid: bytes,
    gid: bytes,
    size: bytes,
    mtime: bytes,
    typeflag: bytes,
    linkname: bytes,
    uname: bytes,
    gname: bytes,
    prefix: bytes,
) -> bytes:
    block = bytearray(
        _HEADER.pack(
            name,
            mode,
            uid,
            gid,
            size,
            mtime,
            b" " * 8,
            typeflag,
            linkname,
            b"ustar\x0000",
            uname,
            gname,
            _ZERO_8,
            _ZERO_8,
            prefix,
        )
    )
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)
