"""Every CVE shape of ``kubectl cp``, on a real file system: hostile archives read by the reader
(in pieces of any size), judged by the policy, and extracted by the most naive extractor there is
(``open``, ``os.makedirs``, ``os.symlink``, ``os.link``, following every symlink). Nothing outside
the destination changes, and each archive ends in a ``TarError`` naming the member.

The archives point at a directory of the test's own (``outside``), never at the machine's real
``/etc``: if the policy failed, the damage would stay in ``tmp_path``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from kuber_exec_core import NEED_DATA, ExecErrorCode
from kuber_exec_core.tar import (
    ArchiveEnd,
    Extraction,
    ExtractionPolicy,
    MemberData,
    MemberEnd,
    SymlinkRule,
    TarError,
    TarKind,
    TarMember,
    TarReader,
)

from .tar_support import END, Spec, pax_member, pieces, raw_header, raw_member, tarfile_archive

FILE, DIR, LINK, HARD = TarKind.FILE, TarKind.DIRECTORY, TarKind.SYMLINK, TarKind.HARDLINK


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``dest`` (empty) and ``outside`` (holding ``secret``), side by side; checks that nothing
    outside ``dest`` changed when the test ends."""
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("original")
    before = _snapshot(tmp_path, skip=dest)
    yield dest, outside
    assert _snapshot(tmp_path, skip=dest) == before, "something outside the destination changed"
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = Path(root, name)
            if path.is_symlink():
                assert Path(os.path.realpath(path)).is_relative_to(dest.resolve()), path


def _snapshot(top: Path, skip: Path) -> dict[str, tuple[int, bytes | str]]:
    found: dict[str, tuple[int, bytes | str]] = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if Path(root, d) != skip]
        for name in dirs + files:
            path = Path(root, name)
            info = path.lstat()
            content: bytes | str = (
                os.readlink(path)
                if path.is_symlink()
                else path.read_bytes()
                if path.is_file()
                else b""
            )
            found[str(path.relative_to(top))] = (info.st_mode, content)
    return found


def naive_extract(raw: bytes, dest: Path, cuts: list[int], policy: ExtractionPolicy) -> None:
    """Extract as the policy says, with the os module's plainest calls (symlinks followed)."""
    reader = TarReader()
    chunks = iter(pieces(raw, cuts))
    with contextlib.ExitStack() as stack:
        out = None
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                chunk = next(chunks, None)
                reader.feed(chunk) if chunk is not None else reader.end_of_input()
            elif isinstance(event, TarMember):
                decision = policy.decide(event)
                if isinstance(decision, Extraction):
                    out = _create(dest, decision, stack)
            elif isinstance(event, MemberData):
                assert out is not None
                out.write(event.data)
            elif isinstance(event, MemberEnd):
                if out is not None:
                    out.close()
                    out = None
            else:
                assert isinstance(event, ArchiveEnd)
                return


def _create(dest: Path, decision: Extraction, stack: contextlib.ExitStack) -> BinaryIO | None:
    for parent in decision.new_parents:
        os.makedirs(dest / parent, exist_ok=True)
    target = dest / decision.path
    if decision.kind is FILE:
        out = stack.enter_context(open(target, "wb"))  # noqa: SIM115 - the stack closes it
        os.chmod(target, decision.mode)
        return out
    if decision.kind is DIR:
        os.makedirs(target, exist_ok=True)
        os.chmod(target, decision.mode | 0o700)
    elif decision.kind is LINK:
        os.symlink(decision.link_target, target)
    else:
        os.link(dest / decision.link_target, target, follow_symlinks=False)
    return None


def _archive(*specs: Spec) -> bytes:
    return tarfile_archive(specs, tarfile.GNU_FORMAT)


def _hostile(outside: Path) -> dict[str, tuple[bytes, str]]:
    """Each hostile archive, with the refusal it must end in."""
    secret = str(outside / "secret")
    return {
        "CVE-2018-1002100 '..'": (
            _archive(Spec("../outside/evil", FILE, b"pwned")),
            "'..' component",
        ),
        "'..' deeper in the name": (
            _archive(Spec("a/b/../../../outside/evil", FILE, b"pwned")),
            "'..' component",
        ),
        "an absolute name": (_archive(Spec(str(outside / "evil"), FILE, b"pwned")), "absolute"),
        "'..' in a pax path": (
            pax_member({"path": "../outside/evil"}) + raw_member(b"innocent", b"pwned") + END,
            "member '../outside/evil'.*|'..' component",
        ),
        "'..' in a GNU long name": (
            raw_member(b"././@LongLink", b"../" * 40 + b"outside/evil\0", typeflag=b"L")
            + raw_member(b"innocent", b"pwned")
            + END,
            "'..' component",
        ),
        "CVE-2019-1002101 symlink out, then a file through it": (
            _archive(Spec("l", LINK, linkname=str(outside)), Spec("l/evil", FILE, b"pwned")),
            "a symlink to .*: the target is absolute",
        ),
        "CVE-2019-11246 relative symlink out, then a file through it": (
            _archive(Spec("d/l", LINK, linkname="../../outside"), Spec("d/l/evil", FILE, b"x")),
            "the target points outside the destination",
        ),
        "a contained symlink, then a file through it": (
            _archive(Spec("l", LINK, linkname="."), Spec("l/evil", FILE, b"pwned")),
            "its parent 'l' is a symlink: nothing is written through a symlink",
        ),
        "CVE-2019-11249 climbing back out through a sibling link": (
            _archive(
                Spec("a/b/x", LINK, linkname="../.."),
                Spec("a/b/l", LINK, linkname="x/../../outside"),
                Spec("a/b/l/evil", FILE, b"pwned"),
            ),
            "climbs back out of a directory it named",
        ),
        "a link beneath a shallower link": (
            _archive(
                Spec("a/x", LINK, linkname=".."),
                Spec("a/x/l", LINK, linkname="../outside"),
                Spec("a/x/l/evil", FILE, b"pwned"),
            ),
            "its parent 'a/x' is a symlink",
        ),
        "a hard link out (absolute)": (
            _archive(Spec("h", HARD, linkname=secret), Spec("h", FILE, b"pwned")),
            "the hard link's target is an absolute path",
        ),
        "a hard link out ('..')": (
            _archive(Spec("h", HARD, linkname="../outside/secret"), Spec("h", FILE, b"pwned")),
            "the hard link's target has a '..' component",
        ),
        "a hard link through a symlink": (
            _archive(Spec("l", LINK, linkname="."), Spec("h", HARD, linkname="l/x")),
            "'l/x', which was not extracted before it",
        ),
        "a hard link to a file not yet extracted": (
            _archive(Spec("h", HARD, linkname="later"), Spec("later", FILE, b"x")),
            "'later', which was not extracted before it",
        ),
        "a hard link, then writing through it": (
            _archive(Spec("f", FILE, b"1"), Spec("h", HARD, linkname="f"), Spec("h", FILE, b"2")),
            "'h' was already extracted",
        ),
        "a device node": (_archive(Spec("null", TarKind.CHAR_DEVICE)), "device nodes"),
        "a FIFO": (_archive(Spec("pipe", TarKind.FIFO)), "FIFOs are never extracted"),
        "truncated in the data": (
            _archive(Spec("f", FILE, b"x" * 5000))[:3000],
            "truncated: the input ended 2512 bytes short",
        ),
        "a bad checksum": (raw_header(b"f", checksum=b"0000001\0") + END, "bad checksum"),
        "a huge declared size": (
            pax_member({"size": str(10**15)}) + raw_member(b"huge", b"small") + END,
            "would take the archive past the 68719476736-byte budget",
        ),
        "endless pax records": (
            pax_member({"comment": "c" * 1000}) * 2000 + END,
            "exceed the 1048576-byte budget",
        ),
    }


CASES = sorted(_hostile(Path("/x")))


@pytest.mark.parametrize("cuts", [[1], [100, 7], [65536]], ids=["1", "mixed", "64KiB"])
@pytest.mark.parametrize("case", CASES)
def test_hostile_archives_write_nothing_outside(
    world: tuple[Path, Path], case: str, cuts: list[int]
) -> None:
    dest, outside = world
    raw, message = _hostile(outside)[case]
    with pytest.raises(TarError, match=message) as caught:
        naive_extract(raw, dest, cuts, ExtractionPolicy())
    assert caught.value.code is ExecErrorCode.FAILED


@pytest.mark.parametrize("rule", [SymlinkRule.SKIP_ALL, SymlinkRule.SKIP_ESCAPING])
def test_skipped_symlinks_are_not_written_through_either(
    world: tuple[Path, Path], rule: SymlinkRule
) -> None:
    dest, outside = world
    raw = _archive(Spec("l", LINK, linkname=str(outside)), Spec("l/evil", FILE, b"pwned"))
    with pytest.raises(TarError, match="its parent 'l' is a symlink that was not extracted"):
        naive_extract(raw, dest, [512], ExtractionPolicy(symlink_rule=rule))
    assert not (dest / "l").exists()


def test_a_benign_tree_is_extracted_whole_with_setuid_stripped(world: tuple[Path, Path]) -> None:
    dest, _ = world
    raw = _archive(
        Spec("tree", DIR, mode=0o755),
        Spec("tree/bin/tool", FILE, b"#!/bin/sh\n", mode=0o4755),
        Spec("tree/shared", DIR, mode=0o3777),
        Spec("tree/lib/libx.so.1", FILE, b"\x7fELF"),
        Spec("tree/lib/libx.so", LINK, linkname="libx.so.1"),
        Spec("tree/up", LINK, linkname="../tree/lib"),
        Spec("tree/copy", HARD, linkname="tree/bin/tool"),
        Spec("tree/empty", FILE),
        Spec("tree/" + "long" * 60, FILE, b"long name"),
    )
    naive_extract(raw, dest, [333], ExtractionPolicy())
    tool = dest / "tree/bin/tool"
    assert tool.read_bytes() == b"#!/bin/sh\n"
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "tree/shared").stat().st_mode) == 0o777
    assert (dest / "tree/lib/libx.so").read_bytes() == b"\x7fELF"
    assert (dest / "tree/up/libx.so.1").read_bytes() == b"\x7fELF"
    assert (dest / "tree/copy").stat().st_ino == tool.stat().st_ino
    assert (dest / "tree/empty").read_bytes() == b""
    assert (dest / ("tree/" + "long" * 60)).read_bytes() == b"long name"
