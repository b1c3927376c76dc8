"""The streaming tar reader: archives written by Python's ``tarfile`` (ustar, GNU, pax) read back
under any chunking, the dialects' corners, and every malformed or truncated input ending in a
clear ``TarError``."""

from __future__ import annotations

import contextlib
import io
import re
import tarfile
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kuber_exec_core import NEED_DATA, ExecError, ExecErrorCode
from kuber_exec_core.tar import (
    MAX_DATA_EVENT_BYTES,
    ArchiveEnd,
    MemberData,
    MemberEnd,
    TarError,
    TarKind,
    TarLimits,
    TarMember,
    TarReader,
)

from .tar_support import (
    BLOCK,
    END,
    Spec,
    cuts_strategy,
    pax_member,
    raw_header,
    raw_member,
    read_archive,
    tarfile_archive,
    tarinfo,
)

FORMATS: dict[str, Literal[0, 1, 2]] = {
    "ustar": tarfile.USTAR_FORMAT,
    "gnu": tarfile.GNU_FORMAT,
    "pax": tarfile.PAX_FORMAT,
}

# -- strategies ------------------------------------------------------------------------------

_component = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_characters="/\0", categories=("L", "N", "P", "S", "Zs")
    ),
    min_size=1,
    max_size=40,
)
_names = st.one_of(
    st.lists(_component, min_size=1, max_size=4).map("/".join),
    # Long names: past ustar's 100 bytes, past its 256, in GNU long-name and pax records.
    st.lists(st.text("abcdefgh", min_size=30, max_size=90), min_size=2, max_size=6).map("/".join),
)
_kinds = st.sampled_from([TarKind.FILE, TarKind.FILE, TarKind.DIRECTORY, TarKind.SYMLINK,
                          TarKind.HARDLINK, TarKind.FIFO, TarKind.CHAR_DEVICE])  # fmt: skip


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    kind = draw(_kinds)
    return Spec(
        name=draw(_names),
        kind=kind,
        data=draw(st.binary(max_size=3000)) if kind is TarKind.FILE else b"",
        linkname=draw(_names) if kind in (TarKind.SYMLINK, TarKind.HARDLINK) else "",
        mode=draw(st.integers(0, 0o7777)),
        mtime=draw(st.one_of(st.integers(0, 2**33 - 1), st.integers(2**33, 2**40))),
        uid=draw(st.one_of(st.integers(0, 0o7777777), st.integers(0o10000000, 2**31))),
        gid=draw(st.integers(0, 0o7777777)),
        uname=draw(st.text("abcdefghij_", max_size=20)),
        gname=draw(st.text("abcdefghij_é", max_size=16)),  # 32 bytes: GNU has no pax
    )


def _written(member_specs: list[Spec], format_name: str) -> bytes:
    try:
        return tarfile_archive(member_specs, FORMATS[format_name])
    except ValueError:
        # The format cannot hold it (a ustar name over 256 bytes, an mtime past 8**11 …).
        from hypothesis import reject

        reject()


def _tarfile_view(raw: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:", encoding="utf-8") as archive:
        found = []
        for info in archive.getmembers():
            stream = archive.extractfile(info) if info.isreg() else None
            found.append((info, stream.read() if stream is not None else b""))
        return found


_TARFILE_KINDS = {
    tarfile.REGTYPE: TarKind.FILE,
    tarfile.AREGTYPE: TarKind.FILE,
    tarfile.DIRTYPE: TarKind.DIRECTORY,
    tarfile.SYMTYPE: TarKind.SYMLINK,
    tarfile.LNKTYPE: TarKind.HARDLINK,
    tarfile.FIFOTYPE: TarKind.FIFO,
    tarfile.CHRTYPE: TarKind.CHAR_DEVICE,
}


# -- round trips with tarfile ----------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(
    member_specs=st.lists(specs(), max_size=8),
    format_name=st.sampled_from(sorted(FORMATS)),
    cuts=cuts_strategy,
)
def test_reads_what_tarfile_writes_under_any_chunking(
    member_specs: list[Spec], format_name: str, cuts: list[int]
) -> None:
    raw = _written(member_specs, format_name)
    result = read_archive(raw, cuts)
    expected = _tarfile_view(raw)
    assert len(result.members) == len(expected) == len(member_specs)
    assert result.end == ArchiveEnd(members=len(expected), size=result.end.size)
    assert raw[result.end.size :].count(0) == len(raw) - result.end.size  # only padding after
    for read, (info, data), spec in zip(result.members, expected, member_specs, strict=True):
        got = read.member
        assert read.ended
        assert got.kind is _TARFILE_KINDS[info.type] is spec.kind
        name = got.name.rstrip("/") if got.kind is TarKind.DIRECTORY else got.name
        assert name == info.name == spec.name
        assert bytes(read.data) == data == spec.data
        assert got.size == len(spec.data)
        assert got.mode == info.mode == spec.mode
        assert got.mtime == int(info.mtime) == spec.mtime
        assert got.linkname == info.linkname == spec.linkname
        assert (got.uid, got.gid) == (info.uid, info.gid) == (spec.uid, spec.gid)
        assert (got.uname, got.gname) == (info.uname, info.gname) == (spec.uname, spec.gname)
    assert result.largest_event <= max(cuts)


def test_data_events_are_views_of_the_fed_piece_and_bounded() -> None:
    data = bytes(range(256)) * (3 * MAX_DATA_EVENT_BYTES // 256 + 7)
    raw = tarfile_archive([Spec("big", TarKind.FILE, data)])
    reader = TarReader()
    piece = memoryview(raw)
    reader.feed(piece)
    reader.end_of_input()
    sizes = []
    while not isinstance(event := reader.next_event(), ArchiveEnd):
        if isinstance(event, MemberData):
            assert event.data.obj is raw  # no copy
            sizes.append(len(event.data))
    assert sum(sizes) == len(data)
    assert max(sizes) == MAX_DATA_EVENT_BYTES


@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_empty_archive_and_empty_files(format_name: str) -> None:
    assert read_archive(tarfile_archive([], FORMATS[format_name])).members == []
    raw = tarfile_archive([Spec("empty", TarKind.FILE), Spec("d", TarKind.DIRECTORY)])
    result = read_archive(raw, [1])
    assert [(m.member.name, m.member.size, bytes(m.data)) for m in result.members] == [
        ("empty", 0, b""),
        ("d/", 0, b""),
    ]


@pytest.mark.parametrize("format_name", ["gnu", "pax"])
def test_huge_sizes_are_read_from_pax_and_base_256(format_name: str) -> None:
    size = 12 * 1024**3  # past ustar's 8 GiB
    info = tarinfo(Spec("huge", TarKind.FILE))
    info.size = size
    header = info.tobuf(FORMATS[format_name], "utf-8", "surrogateescape")
    reader = TarReader()
    reader.feed(header + b"x" * 1000)
    member = reader.next_event()
    assert isinstance(member, TarMember)
    assert member.size == size
    data = reader.next_event()
    assert isinstance(data, MemberData)
    assert len(data.data) == 1000
    reader.end_of_input()
    with pytest.raises(TarError, match=f"{size - 1000} bytes short of the member's {size} bytes"):
        reader.next_event()


def test_pax_records_override_the_header_and_global_records_apply_to_every_member() -> None:
    raw = (
        pax_member({"uname": "everyone", "mtime": "-1.5", "comment": "x"}, typeflag=b"g")
        + pax_member({"path": "p" * 300, "linkpath": "t" * 200, "uid": "99999999", "mtime": "7.25"})
        + raw_member(b"short", typeflag=b"2", linkname=b"tiny")
        + raw_member(b"second", b"abc")
        + pax_member({"uname": ""}, typeflag=b"g")
        + raw_member(b"third")
        + END
    )
    first, second, third = (m.member for m in read_archive(raw, [100]).members)
    assert first.name == "p" * 300
    assert first.linkname == "t" * 200
    assert first.kind is TarKind.SYMLINK
    assert (first.uid, first.mtime, first.uname) == (99999999, 7, "everyone")
    assert first.pax_headers["comment"] == "x"
    assert (second.name, second.mtime, second.uname) == ("second", -2, "everyone")
    assert third.uname == ""


def test_gnu_long_names_and_long_links() -> None:
    long_name = b"n" * 700
    long_link = b"l" * 300
    raw = (
        raw_member(b"././@LongLink", long_name + b"\0", typeflag=b"L")
        + raw_member(b"././@LongLink", long_link + b"\0", typeflag=b"K")
        + raw_member(b"truncated", typeflag=b"1", linkname=b"trunc")
        + raw_member(b"plain", b"data")
        + END
    )
    first, second = read_archive(raw, [3]).members
    assert (first.member.name, first.member.linkname) == ("n" * 700, "l" * 300)
    assert first.member.kind is TarKind.HARDLINK
    assert (second.member.name, bytes(second.data)) == ("plain", b"data")
    assert first.member.offset == 0  # the member starts at its long-name record


def test_ustar_prefix_only_with_the_posix_magic() -> None:
    ustar = raw_member(b"name", prefix=b"some/dir")
    gnu = raw_member(b"name", prefix=b"atime-bytes", magic=b"ustar  \0")
    result = read_archive(ustar + gnu + END)
    assert [m.member.name for m in result.members] == ["some/dir/name", "name"]


def test_old_tar_shapes() -> None:
    v7_directory = raw_member(b"olddir/", typeflag=b"\0", magic=bytes(8))
    contiguous = raw_member(b"contig", b"c", typeflag=b"7")
    unknown = raw_member(b"vendor", b"12345", typeflag=b"Z")
    signed = bytearray(raw_header(b"\xe9t\xe9", size=0))  # a name with high bytes
    signed_sum = sum(b - 256 if b > 127 else b for b in signed[:148] + signed[156:]) + 256
    signed[148:156] = b"%06o\0 " % signed_sum
    base256 = raw_header(b"b256", size=b"\x80" + (2).to_bytes(11, "big")) + b"xy" + bytes(510)
    spaces = raw_header(b"spaced", size=b" 3 \0        ", mode=b" 644   \0") + b"abc" + bytes(509)
    raw = v7_directory + contiguous + unknown + bytes(signed) + base256 + spaces + END
    members = read_archive(raw, [50]).members
    assert [(m.member.kind, m.member.size, bytes(m.data)) for m in members] == [
        (TarKind.DIRECTORY, 0, b""),
        (TarKind.FILE, 1, b"c"),
        (TarKind.OTHER, 5, b"12345"),
        (TarKind.FILE, 0, b""),
        (TarKind.FILE, 2, b"xy"),
        (TarKind.FILE, 3, b"abc"),
    ]
    assert members[2].member.typeflag == "Z"
    assert members[3].member.name == "\udce9t\udce9"  # undecodable bytes survive
    assert members[5].member.mode == 0o644


def test_links_and_directories_carry_no_data_whatever_their_size_field_says() -> None:
    # As tarfile and GNU tar read them: the next header follows at once.
    raw = (
        raw_header(b"link", typeflag=b"2", size=5000, linkname=b"x") + raw_member(b"f", b"1") + END
    )
    members = read_archive(raw).members
    assert [(m.member.name, m.member.size) for m in members] == [("link", 0), ("f", 1)]


def test_sparse_members_are_marked_so() -> None:
    raw = pax_member({"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}) + raw_member(b"s", b"1")
    (member,) = read_archive(raw + END).members
    assert member.member.kind is TarKind.SPARSE


def test_one_zero_block_then_the_end_is_an_end_and_trailing_bytes_are_ignored() -> None:
    raw = raw_member(b"a", b"1") + bytes(BLOCK)
    assert read_archive(raw).end.members == 1
    reader = TarReader()
    reader.feed(raw_member(b"a", b"1") + END + b"anything after the end")
    while not isinstance(reader.next_event(), ArchiveEnd):
        pass
    reader.feed(b"more")  # ignored
    assert reader.next_event() == ArchiveEnd(members=1, size=4 * BLOCK)
    assert reader.bytes_read == 4 * BLOCK


# -- malformed and truncated input -----------------------------------------------------------


def _error(raw: bytes, cuts: list[int] | None = None, limits: TarLimits | None = None) -> TarError:
    with pytest.raises(TarError) as caught:
        read_archive(raw, cuts or [], TarReader(limits))
    assert caught.value.code is ExecErrorCode.FAILED
    assert str(caught.value).startswith("EXEC_FAILED: tar archive: ")
    return caught.value


@given(member_specs=st.lists(specs(), min_size=1, max_size=4), data=st.data())
@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
def test_every_truncation_is_an_error_or_a_clean_end(
    member_specs: list[Spec], data: st.DataObject
) -> None:
    raw = _written(member_specs, "gnu")
    full = read_archive(raw)
    end_of_last = full.end.size - 2 * BLOCK
    cut = data.draw(st.integers(0, full.end.size - 1), label="cut")
    cuts = data.draw(cuts_strategy, label="cuts")
    if cut >= end_of_last + BLOCK:
        # Cut after the first zero block: old tars end so.
        assert read_archive(raw[:cut], cuts).end.members == len(member_specs)
        return
    error = _error(raw[:cut], cuts)
    assert "truncated" in error.message or "empty" in error.message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "the input was empty"),
        (raw_member(b"a"), "ended after 1 members without the end-of-archive blocks"),
        (raw_member(b"a", b"12345")[: BLOCK + 3], "2 bytes short of the member's 5 bytes"),
        (raw_member(b"a", b"12345")[: BLOCK + 7], "inside the member's padding"),
        (raw_member(b"a")[:100], "inside a header \\(100 of 512 bytes\\)"),
        (pax_member({"path": "x"}), "after a pax or long-name record, before its member"),
        (pax_member({"path": "x"})[: BLOCK + 3], "inside a pax or long-name record"),
        (pax_member({"path": "x"}) + END, "followed by the end of the archive"),
        (raw_member(b"a") + bytes(BLOCK) + raw_member(b"b") + END, "a lone zero block"),
        (raw_header(b"a", checksum=b"0000001\0"), "bad checksum in the header of member #1"),
        (raw_header(b"a", checksum=b"garbage!"), "has no checksum: not a tar archive"),
        (b"PK\x03\x04" + bytes(508), "bad checksum .* sum to 418 \\(not a tar archive\\?\\)"),
        (raw_header(b"a", size=b"12345678901z"), "malformed size field"),
        (raw_header(b"a", size=b"\xff" * 12), "malformed size field"),
        (raw_header(b"a", mode=b"rw-r--r-"), "the header's mode field is malformed"),
        (raw_header(b"a", mtime=b"yesterday!!\0"), "mtime field is malformed"),
        (raw_header(b"sp", typeflag=b"S"), "old GNU sparse members are not supported"),
        (pax_member(b"garbage\n") + raw_member(b"a"), "a pax record without a length"),
        (pax_member(b"99 path=x\n") + raw_member(b"a"), "length 99 does not fit"),
        (pax_member(b"10 pathx\n\n") + raw_member(b"a"), "a pax record without a key"),
        (pax_member(b"6 p=x\n\0z") + raw_member(b"a"), "NUL bytes inside the pax records"),
        (pax_member({"size": "-5"}) + raw_member(b"a"), "size='-5' is not a non-negative"),
        (pax_member({"size": "9" * 5000}) + raw_member(b"a"), "is not a non-negative integer"),
        (pax_member({"uid": "root"}) + raw_member(b"a"), "uid='root'"),
        (pax_member({"mtime": "soon"}) + raw_member(b"a"), "mtime='soon' is not a time"),
    ],
)
def test_malformed_input_names_what_and_where(raw: bytes, message: str) -> None:
    for cuts in ([], [1], [511]):
        error = _error(raw, cuts)
        assert re.search(message, error.message), error


def test_errors_name_the_member_and_offset() -> None:
    raw = raw_member(b"fine", b"x") + raw_member(b"short", b"1234567")[: BLOCK + 2]
    error = _error(raw)
    assert error.member == "short"
    assert error.offset == 2 * BLOCK
    assert "member 'short' at offset 1024" in error.message
    bad = raw_member(b"fine") + raw_header(b"evil", checksum=b"0000001\0")
    assert _error(bad).offset == BLOCK


def test_a_failed_reader_stays_failed() -> None:
    reader = TarReader()
    reader.feed(raw_header(b"a", checksum=b"0000001\0"))
    with pytest.raises(TarError) as first:
        reader.next_event()
    with pytest.raises(TarError) as again:
        reader.next_event()
    assert again.value is first.value
    with pytest.raises(TarError):
        reader.feed(b"more")


def test_metadata_budget_bounds_long_names_pax_records_and_endless_chains() -> None:
    limits = TarLimits(max_metadata_bytes=4096)
    long_name = raw_member(b"././@LongLink", b"n" * 5000 + b"\0", typeflag=b"L")
    assert (
        "exceed the 4096-byte budget (5001 bytes)" in _error(long_name + END, limits=limits).message
    )
    big_pax = pax_member({"path": "p" * 5000})
    assert (
        "before member #1 exceed the 4096-byte budget"
        in _error(big_pax + END, limits=limits).message
    )
    # Endless pax records, each small, never reaching a member.
    chain = pax_member({"comment": "c" * 100}) * 100
    error = _error(chain + END, limits=limits)
    assert "exceed the 4096-byte budget" in error.message
    assert error.offset == 0
    growing_global = b"".join(
        pax_member({f"key{i}": "v" * 200}, typeflag=b"g") + raw_member(b"m%d" % i)
        for i in range(40)
    )
    assert "global pax records exceed" in _error(growing_global + END, limits=limits).message


def test_the_reader_buffers_at_most_a_header_or_a_record() -> None:
    # A large member fed byte by byte: the buffer holds at most one block at any time.
    raw = tarfile_archive([Spec("f", TarKind.FILE, b"z" * 5000)])
    reader = TarReader()
    peak = 0
    for index in range(len(raw)):
        reader.feed(raw[index : index + 1])
        while (event := reader.next_event()) is not NEED_DATA and not isinstance(event, ArchiveEnd):
            peak = max(peak, len(reader._buffer))
        peak = max(peak, len(reader._buffer))
    assert isinstance(event, ArchiveEnd)
    assert peak <= BLOCK


def test_feeding_before_draining_keeps_every_byte() -> None:
    raw = tarfile_archive([Spec("f", TarKind.FILE, b"0123456789" * 100)])
    reader = TarReader()
    reader.feed(raw[:600])
    assert isinstance(reader.next_event(), TarMember)
    reader.feed(raw[600:])  # 88 bytes of the first piece not yet taken
    reader.end_of_input()
    data = bytearray()
    while not isinstance(event := reader.next_event(), ArchiveEnd):
        if isinstance(event, MemberData):
            data += event.data
    assert data == b"0123456789" * 100


@pytest.mark.parametrize("bad", ["text", 5, None, [1, 2]])
def test_feed_takes_bytes(bad: object) -> None:
    with pytest.raises(ExecError, match="feed\\(\\) takes bytes") as caught:
        TarReader().feed(bad)  # type: ignore[arg-type]
    assert caught.value.code is ExecErrorCode.INVALID


def test_feed_after_end_of_input_and_bad_limits_are_invalid() -> None:
    reader = TarReader()
    reader.end_of_input()
    with pytest.raises(ExecError, match="after end_of_input") as caught:
        reader.feed(b"x")
    assert caught.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError, match="limits must be a TarLimits"):
        TarReader({"max_metadata_bytes": 1})  # type: ignore[arg-type]
    with pytest.raises(ExecError, match="max_metadata_bytes must be a positive integer"):
        TarLimits(max_metadata_bytes=0)


def test_feed_accepts_any_bytes_like_and_empty_pieces() -> None:
    raw = raw_member(b"a", b"hello") + END
    reader = TarReader()
    reader.feed(b"")
    reader.feed(bytearray(raw[:700]))
    reader.feed(b"")
    reader.feed(memoryview(raw)[700:])
    reader.end_of_input()
    events = []
    while not isinstance(event := reader.next_event(), ArchiveEnd):
        events.append(event)
    assert bytes(events[1].data) == b"hello"  # type: ignore[union-attr]


@given(garbage=st.binary(min_size=0, max_size=3 * BLOCK), cuts=cuts_strategy)
def test_arbitrary_bytes_end_in_events_or_a_tar_error(garbage: bytes, cuts: list[int]) -> None:
    with contextlib.suppress(TarError):
        read_archive(garbage, cuts)


@given(
    member_specs=st.lists(specs(), min_size=1, max_size=3),
    position=st.integers(0, 10**6),
    value=st.integers(0, 255),
    cuts=cuts_strategy,
)
@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
def test_corrupted_archives_end_in_events_or_a_tar_error(
    member_specs: list[Spec], position: int, value: int, cuts: list[int]
) -> None:
    raw = bytearray(_written(member_specs, "pax"))
    raw[position % len(raw)] = value
    with contextlib.suppress(TarError):
        read_archive(bytes(raw), cuts)


def test_members_are_hashable_and_share_no_mutable_state() -> None:
    raw = raw_member(b"a") + pax_member({"comment": "c"}) + raw_member(b"b") + END
    first, second = (read.member for read in read_archive(raw).members)
    assert len({first, second, MemberEnd(first)}) == 3
    assert dict(first.pax_headers) == {}
    with pytest.raises(TypeError):
        first.pax_headers["path"] = "x"  # type: ignore[index]
    assert second.pax_headers == {"comment": "c"}
