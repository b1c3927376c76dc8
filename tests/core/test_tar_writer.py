"""The streaming tar writer: what it writes Python's ``tarfile`` reads back (and so does the
reader), long names and large sizes go into pax records, the output is deterministic, and every
misuse is an ``EXEC_INVALID``."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.tar import TarKind, TarMember, TarReader, TarWriter

from .tar_support import BLOCK, cuts_strategy, pieces, read_archive


@attrs.frozen
class Entry:
    name: str
    kind: TarKind
    data: bytes = b""
    target: str = ""
    mode: int = 0o644
    mtime: int = 0
    uid: int = 0
    gid: int = 0
    uname: str = ""
    gname: str = ""


_letters = st.characters(
    codec="utf-8", exclude_characters="/\0", categories=("L", "N", "P", "S", "Zs")
)
# Bytes that are not UTF-8, as os.fsdecode gives them.
_undecodable = st.binary(min_size=1, max_size=8).map(
    lambda raw: raw.replace(b"/", b"_").replace(b"\0", b"_").decode("utf-8", "surrogateescape")
)
_component = st.one_of(
    st.text(alphabet=_letters, min_size=1, max_size=30),
    st.text("abcdefghijklmnop", min_size=60, max_size=120),
    _undecodable,
).filter(lambda part: part not in (".", ".."))
_names = st.lists(_component, min_size=1, max_size=4).map("/".join)


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    kind = draw(st.sampled_from([TarKind.FILE, TarKind.DIRECTORY, TarKind.SYMLINK,
                                 TarKind.HARDLINK]))  # fmt: skip
    return Entry(
        name=draw(_names),
        kind=kind,
        data=draw(st.binary(max_size=2000)) if kind is TarKind.FILE else b"",
        target=draw(_names) if kind in (TarKind.SYMLINK, TarKind.HARDLINK) else "",
        mode=draw(st.integers(0, 0o7777)),
        mtime=draw(st.one_of(st.integers(0, 2**33 - 1), st.integers(-(2**40), 2**40))),
        uid=draw(st.one_of(st.integers(0, 0o7777777), st.integers(0, 2**40))),
        gid=draw(st.integers(0, 2**32)),
        uname=draw(st.text("abcdé", max_size=40)),
        gname=draw(st.text("xyz", max_size=4)),
    )


def _drive(writer: TarWriter, items: list[Entry], cuts: list[int], skip: bool) -> list[bytes]:
    out: list[bytes] = []
    for item in items:
        common: dict[str, Any] = {
            "mode": item.mode,
            "mtime": item.mtime,
            "uid": item.uid,
            "gid": item.gid,
            "uname": item.uname,
            "gname": item.gname,
        }
        if item.kind is TarKind.FILE:
            out.append(writer.add_file(item.name, len(item.data), **common))
            if skip:
                writer.skip_data(len(item.data))
            else:
                out.extend(bytes(writer.write_data(piece)) for piece in pieces(item.data, cuts))
            out.append(writer.end_file())
        elif item.kind is TarKind.DIRECTORY:
            out.append(writer.add_directory(item.name, **common))
        elif item.kind is TarKind.SYMLINK:
            out.append(writer.add_symlink(item.name, item.target, **common))
        else:
            out.append(writer.add_hardlink(item.name, item.target, **common))
    out.append(writer.finish())
    return out


def write(items: list[Entry], cuts: list[int] | None = None) -> bytes:
    writer = TarWriter()
    raw = b"".join(_drive(writer, items, cuts or [1000], skip=False))
    assert writer.bytes_written == len(raw)
    assert len(raw) % BLOCK == 0
    return raw


def measure(items: list[Entry]) -> int:
    """The archive's length, from a writer given no data (``skip_data``)."""
    writer = TarWriter()
    _drive(writer, items, [], skip=True)
    return writer.bytes_written


@given(items=st.lists(entries(), max_size=6), cuts=cuts_strategy)
def test_tarfile_reads_what_the_writer_writes(items: list[Entry], cuts: list[int]) -> None:
    raw = write(items, cuts)
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:", encoding="utf-8") as archive:
        infos = archive.getmembers()
        assert len(infos) == len(items)
        for info, item in zip(infos, items, strict=True):
            assert info.name == item.name
            assert (
                info.type
                == {
                    TarKind.FILE: tarfile.REGTYPE,
                    TarKind.DIRECTORY: tarfile.DIRTYPE,
                    TarKind.SYMLINK: tarfile.SYMTYPE,
                    TarKind.HARDLINK: tarfile.LNKTYPE,
                }[item.kind]
            )
            assert info.linkname == item.target
            assert (info.mode, int(info.mtime)) == (item.mode, item.mtime)
            assert (info.uid, info.gid, info.uname, info.gname) == (
                item.uid, item.gid, item.uname, item.gname,
            )  # fmt: skip
            if item.kind is TarKind.FILE:
                stream = archive.extractfile(info)
                assert stream is not None
                assert stream.read() == item.data


@given(items=st.lists(entries(), max_size=6), cuts=cuts_strategy)
def test_the_reader_reads_what_the_writer_writes(items: list[Entry], cuts: list[int]) -> None:
    result = read_archive(write(items), cuts)
    assert len(result.members) == len(items)
    for read, item in zip(result.members, items, strict=True):
        got: TarMember = read.member
        assert got.name == (item.name + "/" if item.kind is TarKind.DIRECTORY else item.name)
        assert got.kind is item.kind
        assert bytes(read.data) == item.data
        assert (got.linkname, got.mode, got.mtime, got.uid, got.gid) == (
            item.target, item.mode, item.mtime, item.uid, item.gid,
        )  # fmt: skip
        assert (got.uname, got.gname) == (item.uname, item.gname)


@given(items=st.lists(entries(), max_size=4))
def test_the_output_is_deterministic_and_independent_of_the_pieces(items: list[Entry]) -> None:
    assert write(items, [1]) == write(items, [7, 3000]) == write(items)


def test_short_ascii_names_are_plain_ustar() -> None:
    writer = TarWriter()
    header = writer.add_file("dir/file.txt", 3, mtime=1_700_000_000)
    assert len(header) == BLOCK  # no pax record
    assert header[257:265] == b"ustar\x0000"
    assert header[0:12] == b"dir/file.txt"
    assert header[124:136] == b"00000000003\0"


def test_names_up_to_256_bytes_use_the_ustar_prefix() -> None:
    name = "p" * 150 + "/" + "n" * 100
    header = TarWriter().add_file(name, 0)
    assert len(header) == BLOCK
    assert header[345:495] == b"p" * 150
    assert header[0:100] == b"n" * 100
    assert len(TarWriter().add_file("p" * 160 + "/" + "n" * 10, 0)) > BLOCK  # prefix too long
    assert len(TarWriter().add_file("p" * 10 + "/" + "n" * 101, 0)) > BLOCK  # name too long
    assert len(TarWriter().add_directory("p" * 150 + "/" + "n" * 99)) == BLOCK  # "n…/" fits


@pytest.mark.parametrize(
    ("call", "record"),
    [
        (lambda w: w.add_file("é", 0), b"path=\xc3\xa9\n"),
        (lambda w: w.add_file("x" * 300, 0), b"path=" + b"x" * 300 + b"\n"),
        (lambda w: w.add_symlink("l", "t" * 101), b"linkpath=" + b"t" * 101 + b"\n"),
        (lambda w: w.add_file("f", 0, uid=2**21), b"uid=2097152\n"),
        (lambda w: w.add_file("f", 0, mtime=-1), b"mtime=-1\n"),
        (lambda w: w.add_file("f", 0, mtime=8**11), b"mtime=8589934592\n"),
        (lambda w: w.add_file("f", 0, uname="u" * 33), b"uname=" + b"u" * 33 + b"\n"),
        (lambda w: w.add_file("\udcff", 0), b"hdrcharset=BINARY\n"),
    ],
)
def test_fields_that_do_not_fit_go_into_a_pax_record(call: object, record: bytes) -> None:
    assert callable(call)
    header = call(TarWriter())
    assert header[156:157] == b"x"
    assert header[0:14] == b"././@PaxHeader"
    size = int(header[124:135], 8)
    assert record in header[BLOCK : BLOCK + size]


def test_a_size_past_8_gib_goes_into_pax_and_base_256() -> None:
    size = 10 * 1024**3
    header = TarWriter().add_file("big", size)
    assert b"size=10737418240\n" in header[BLOCK : 2 * BLOCK]
    member_header = header[-BLOCK:]
    assert member_header[124:136] == b"\x80" + size.to_bytes(11, "big")
    with tarfile.open(fileobj=io.BytesIO(header), mode="r:") as archive:
        assert archive.next().size == size  # type: ignore[union-attr]
    reader = TarReader()
    reader.feed(header)
    member = reader.next_event()
    assert isinstance(member, TarMember)
    assert member.size == size


def test_write_data_returns_the_piece_itself() -> None:
    writer = TarWriter()
    writer.add_file("f", 6)
    piece = memoryview(b"abcdef")
    assert writer.write_data(piece) is piece
    assert writer.end_file() == bytes(BLOCK - 6)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "non-empty relative path"),
        ("/etc/passwd", "non-empty relative path"),
        ("a/../b", "empty, '.' or '..' component"),
        ("..", "empty, '.' or '..' component"),
        ("./a", "empty, '.' or '..' component"),
        ("a//b", "empty, '.' or '..' component"),
        ("a\0b", "holds a NUL character"),
        ("\ud800", "cannot be encoded"),
    ],
)
def test_bad_names_are_refused(name: str, message: str) -> None:
    with pytest.raises(ExecError, match=message) as caught:
        TarWriter().add_file(name, 0)
    assert caught.value.code is ExecErrorCode.INVALID


def test_misuse_is_invalid() -> None:
    cases: list[tuple[Callable[[Any], object], str]] = [
        (lambda w: w.write_data(b"x"), "without an open file"),
        (lambda w: w.end_file(), "without an open file"),
        (lambda w: (w.add_file("f", 1), w.add_directory("d")), "while the file 'f' is open"),
        (lambda w: (w.add_file("f", 1), w.finish()), "while the file 'f' is open"),
        (lambda w: (w.add_file("f", 1), w.write_data(b"xy")), "more data than the 1 bytes"),
        (lambda w: (w.add_file("f", 2), w.write_data(b"x"), w.end_file()), "1 of the 2 bytes"),
        (lambda w: (w.add_file("f", 1), w.write_data("x")), "takes bytes, not str"),
        (lambda w: (w.add_file("f", 1), w.write_data(5)), "takes bytes, not int"),
        (lambda w: (w.finish(), w.add_directory("d")), "after finish"),
        (lambda w: w.add_file("f", -1), "size must be an integer of at least 0"),
        (lambda w: w.add_file("f", True), "size must be an integer"),
        (lambda w: w.add_file("f", 0, mode=0o10000), "mode must be at most 0o7777"),
        (lambda w: w.add_file("f", 0, mode="644"), "mode must be an integer"),
        (lambda w: w.add_file("f", 0, uid=-1), "uid must be an integer of at least 0"),
        (lambda w: w.add_file("f", 0, uname="a\0"), "uname must be text without NUL"),
        (lambda w: w.add_file(b"f", 0), "must be text, not bytes"),
        (lambda w: w.add_symlink("l", ""), "target must be non-empty"),
        (lambda w: w.add_hardlink("h", "../x"), "hard link's target '../x'"),
    ]
    for call, message in cases:
        with pytest.raises(ExecError, match=message) as caught:
            call(TarWriter())
        assert caught.value.code is ExecErrorCode.INVALID, message


def test_pax_record_lengths_count_their_own_digits() -> None:
    # A record whose length crosses a power of ten when its own digits are counted.
    for length in range(85, 110):
        header = TarWriter().add_file("é" + "n" * (length - 2), 0)  # not ASCII: always pax
        size = int(header[124:135], 8)
        records = header[BLOCK : BLOCK + size]
        declared, _, _ = records.partition(b" ")
        assert int(declared) == len(records)


@given(items=st.lists(entries(), max_size=6))
def test_a_measuring_writer_knows_the_archive_length_before_it_is_written(
    items: list[Entry],
) -> None:
    assert measure(items) == len(write(items))


def test_skip_data_is_checked_like_data() -> None:
    writer = TarWriter()
    with pytest.raises(ExecError, match="skip_data\\(\\) without an open file"):
        writer.skip_data(1)
    writer.add_file("f", 3)
    with pytest.raises(ExecError, match="more data than the 3 bytes"):
        writer.skip_data(4)
    with pytest.raises(ExecError, match="count must be an integer of at least 0"):
        writer.skip_data(-1)
    writer.skip_data(3)
    assert writer.end_file() == bytes(BLOCK - 3)


@given(items=st.lists(entries(), max_size=6), cuts=cuts_strategy)
def test_add_writes_back_what_the_reader_read(items: list[Entry], cuts: list[int]) -> None:
    # The writer's add() mirrors the reader: each TarMember read, added with its data, gives
    # the archive it came from, byte for byte.
    raw = write(items, cuts)
    writer = TarWriter()
    again: list[bytes] = []
    for read in read_archive(raw, cuts).members:
        again.append(writer.add(read.member))
        if read.member.kind is TarKind.FILE:
            again.append(bytes(writer.write_data(read.data)))
            again.append(writer.end_file())
    again.append(writer.finish())
    assert b"".join(again) == raw


@pytest.mark.parametrize("kind", [TarKind.FIFO, TarKind.CHAR_DEVICE, TarKind.SPARSE])
def test_add_refuses_what_it_cannot_write(kind: TarKind) -> None:
    member = TarMember(name="x", kind=kind, typeflag="6", size=0, mode=0o644, mtime=0)
    with pytest.raises(ExecError) as caught:
        TarWriter().add(member)
    assert caught.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError):
        TarWriter().add("x")  # type: ignore[arg-type]
