"""What the tar tests share: archives built with ``tarfile``, chunked reading, raw headers, and
an in-memory file system that resolves paths the way the kernel does.

The model file system (:class:`ModelFS`) stands for the most naive extractor there is: one that
does exactly what the policy's decisions say with ``open``/``mkdir``/``symlink``/``link``,
*following* every symlink it meets, as the vulnerable ``kubectl cp`` did. If even that extractor
writes nothing outside the destination, the policy alone is what keeps the archive in.
"""

from __future__ import annotations

import io
import re
import tarfile
import unicodedata
from collections.abc import Iterable, Sequence

import attrs
from hypothesis import strategies as st

from kuber_exec_core import NEED_DATA
from kuber_exec_core.tar import (
    ArchiveEnd,
    Extraction,
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


# -- the model file system -------------------------------------------------------------------

DEST = ("dest",)
_SEPARATORS = re.compile(r"[/\\]")
_DRIVE = re.compile(r"[A-Za-z]:")


class Escape(AssertionError):
    """The naive extractor touched something outside the destination."""


class Inconsistent(AssertionError):
    """A decision cannot be carried out as it stands: the policy's view is not the disk."""


@attrs.define
class ModelFS:
    """A tree of directories, files and symlinks under a world root, ``dest`` one directory.

    ``fold`` compares names as a case-insensitive file system does; ``windows`` splits on ``\\``
    too and takes a drive letter as the root.
    """

    fold: bool = False
    windows: bool = False
    nodes: dict[tuple[str, ...], str] = attrs.field(
        factory=lambda: {(): "dir", DEST: "dir", ("etc",): "dir"}
    )
    links: dict[tuple[str, ...], str] = attrs.field(factory=dict)
    writes: list[tuple[str, ...]] = attrs.field(factory=list)

    def key(self, path: tuple[str, ...]) -> tuple[str, ...]:
        if not self.fold:
            return path
        return tuple(
            unicodedata.normalize("NFC", unicodedata.normalize("NFC", p).casefold()) for p in path
        )

    def split(self, text: str) -> tuple[bool, list[str]]:
        absolute = text.startswith("/") or (
            self.windows and (text.startswith("\\") or bool(_DRIVE.match(text)))
        )
        if self.windows and _DRIVE.match(text):
            text = text[2:]
        parts = _SEPARATORS.split(text) if self.windows else text.split("/")
        return absolute, parts

    def resolve(
        self, start: tuple[str, ...], text: str, *, follow_last: bool, missing_ok: bool = False
    ) -> tuple[str, ...] | None:
        """Where ``text`` leads from ``start``, as the kernel resolves it (``None``: an error).

        ``missing_ok`` walks through a missing directory as if it existed (where a link would
        lead once it did).
        """
        absolute, parts = self.split(text)
        current = () if absolute else start
        todo = list(reversed(parts))
        hops = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                current = current[:-1]
                continue
            following = (*current, part)
            kind = self.nodes.get(self.key(following))
            more = any(p not in ("", ".") for p in todo)
            if kind == "link" and (more or follow_last):
                hops += 1
                if hops > 40:
                    return None
                link_absolute, link_parts = self.split(self.links[self.key(following)])
                if link_absolute:
                    current = ()
                todo.extend(reversed(link_parts))
                continue
            if kind == "file" and more:
                return None
            if kind is None and more and not missing_ok:
                return None
            current = following
        return current

    def _inside(self, path: tuple[str, ...] | None, what: str) -> tuple[str, ...] | None:
        if path is not None:
            if self.key(path[:1]) != self.key(DEST):
                raise Escape(f"{what} reached {'/'.join(path) or '/'}")
            self.writes.append(path)
        return path

    def apply(self, decision: Extraction) -> None:
        """Do what ``decision`` says, following every symlink (a naive ``os`` extractor).

        The model starts empty, so every decision must be doable as it stands: a parent the
        policy takes for an existing directory that is not one, or a "new" parent that exists,
        means its view and the disk have come apart, which raises :class:`Inconsistent`.
        """
        for new_parent in decision.new_parents:
            made = self._inside(self.resolve(DEST, new_parent, follow_last=True), "a parent")
            if made is None:
                raise Inconsistent(
                    f"the new parent {new_parent!r} of {decision.path!r} is unreachable"
                )
            if self.key(made) in self.nodes:
                raise Inconsistent(f"the new parent {new_parent!r} of {decision.path!r} exists")
            self.nodes[self.key(made)] = "dir"
        path = decision.path
        head, _, leaf = path.rpartition("/")
        directory = self._inside(
            self.resolve(DEST, head, follow_last=True), f"the parent of {path!r}"
        )
        if directory is None or self.nodes.get(self.key(directory)) != "dir":
            raise Inconsistent(f"the parent of {path!r} is not a directory")
        created = (*directory, leaf)
        existing = self.nodes.get(self.key(created))
        if decision.kind is TarKind.DIRECTORY:
            if existing not in (None, "dir"):
                raise Inconsistent(f"the directory {path!r} is already a {existing}")
            self.nodes[self.key(created)] = "dir"
            self._inside(created, f"directory {path!r}")
            return
        if existing is not None:
            raise Inconsistent(f"{path!r} already exists as a {existing}")
        if decision.kind is TarKind.FILE:
            # A naive open() follows a final symlink; there is none (checked above).
            self.nodes[self.key(created)] = "file"
            self._inside(created, f"file {path!r}")
        elif decision.kind is TarKind.SYMLINK:
            self.nodes[self.key(created)] = "link"
            self.links[self.key(created)] = decision.link_target
        else:
            source = self._inside(
                self.resolve(DEST, decision.link_target, follow_last=False),
                f"the hard link target of {path!r}",
            )
            if source is None or self.nodes.get(self.key(source)) != "file":
                raise Inconsistent(f"the hard link target of {path!r} is not a file")
            self.nodes[self.key(created)] = "file"

    def check_links_stay_inside(self) -> None:
        """Every symlink under the destination, followed, stays inside (or fails to resolve)."""
        for place in list(self.links):
            if place[:1] == self.key(DEST):
                resolved = self.resolve(
                    DEST, "/".join(place[1:]), follow_last=True, missing_ok=True
                )
                if resolved is not None and self.key(resolved[:1]) != self.key(DEST):
                    raise Escape(
                        f"the symlink {'/'.join(place)} leads to {'/'.join(resolved) or '/'}"
                    )


# -- hostile member sequences ----------------------------------------------------------------

# Weighted by repetition: mostly plain names (so members build on each other), some of the
# shapes that matter.
_component = st.sampled_from(["a", "a", "x", "x", "l", "A", "a", "x", "..", ".", ""])
_lead = st.sampled_from(["", "", "", "", "", "", "", "/", "./", "\\", "C:"])
_separator = st.sampled_from(["/"] * 9 + ["\\"])
hostile_kinds = st.sampled_from(
    [TarKind.SYMLINK] * 8 + [TarKind.FILE] * 5 + [TarKind.DIRECTORY] * 3 + [TarKind.HARDLINK] * 3
    + [TarKind.FIFO, TarKind.CHAR_DEVICE]
)  # fmt: skip


@st.composite
def _random_members(draw: st.DrawFn, earlier: list[str]) -> list[tuple[TarKind, str, str]]:
    """Members that build on each other: a name often extends an earlier one (a file under a
    symlink made before it); a target is often a run of ``..`` about as deep as the link, an
    earlier member's name, or a sibling and back up (``x/../..``)."""
    items: list[tuple[TarKind, str, str]] = []
    for _ in range(draw(st.integers(0, 10))):
        separator = draw(_separator)
        base = draw(st.sampled_from(earlier)) if draw(st.integers(0, 3)) else ""
        tail = draw(st.lists(_component, min_size=1, max_size=2))
        name = draw(_lead) + separator.join([part for part in [base] if part] + tail)
        choice = draw(st.integers(0, 3))
        if choice == 0:
            depth = name.count("/") + name.count("\\")
            climbs = "/".join([".."] * max(0, depth + draw(st.integers(-1, 2))))
            rest = draw(st.lists(_component, max_size=2)) if draw(st.booleans()) else []
            target = "/".join([climbs, *rest]) if climbs else "/".join(rest) or "."
        elif choice == 1:
            target = draw(st.sampled_from(earlier))
        elif choice == 2:
            sibling = draw(st.sampled_from(earlier)).rpartition("/")[2] or "x"
            target = sibling + "/.." * draw(st.integers(1, 4))
        else:
            target = draw(_lead) + "/".join(draw(st.lists(_component, min_size=1, max_size=4)))
        items.append((draw(hostile_kinds), name, target.replace("/", separator)))
        earlier.append(name)
    return items


def _up(count: int) -> str:
    return "/".join([".."] * count) or "."


@st.composite
def _attack(draw: st.DrawFn) -> list[tuple[TarKind, str, str]]:
    """One of the known escapes, at a random depth and off by up to one level.

    Each needs two or three members to line up, which random members rarely do: a link that
    resolves shallower than it stands, then a link beneath it (written through it) or beside it
    (``x/../..``) climbing by the lexical depth; the same through a case alias (``A`` then
    ``a/l``) or after a directory re-declared over the link; an absolute link then a file
    through it; a hard link out.
    """
    prefix = draw(st.lists(st.sampled_from(["a", "x", "A"]), max_size=2))
    depth = len(prefix)
    off = draw(st.integers(-1, 1))
    kind = draw(st.sampled_from([TarKind.SYMLINK, TarKind.SYMLINK, TarKind.FILE,
                                 TarKind.DIRECTORY, TarKind.HARDLINK]))  # fmt: skip
    link = TarKind.SYMLINK

    def at(*parts: str) -> str:
        return "/".join([*prefix, *parts])

    shallow = (link, at("x"), _up(depth))
    climb = _up(depth + 1 + off)
    template = draw(st.integers(0, 5))
    if template == 0:
        attack = [shallow, (kind, at("x", "l"), climb)]
    elif template == 1:
        attack = [shallow, (link, at("l"), "x/" + climb)]
    elif template == 2:
        attack = [(link, at("A"), _up(depth)), (kind, at("a", "l"), climb)]
    elif template == 3:
        attack = [shallow, (TarKind.DIRECTORY, at("x"), ""), (kind, at("x", "l"), climb)]
    elif template == 4:
        attack = [(link, at("x"), "/"), (kind, at("x", "etc", "passwd"), "/etc/passwd")]
    else:
        attack = [(TarKind.HARDLINK, at("h"), climb + "/etc/passwd"), (kind, at("h"), "")]
    # Windows separators, in names and targets alike.
    separator = draw(_separator)
    return [
        (member_kind, name.replace("/", separator), target.replace("/", separator))
        for member_kind, name, target in attack
    ]


@st.composite
def hostile_members(draw: st.DrawFn) -> list[tuple[TarKind, str, str]]:
    """(kind, name, link target) triples of a hostile archive: random members that build on
    each other, often around one of the known escapes."""
    earlier: list[str] = [""]
    before = draw(_random_members(earlier))
    attack = draw(_attack()) if draw(st.integers(0, 2)) else []
    earlier.extend(name for _, name, _ in attack)
    after = draw(_random_members(earlier))
    items = before + attack + after
    return items or [(TarKind.FILE, "f", "")]
