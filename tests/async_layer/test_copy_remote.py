"""The pure parts of a copy's remote side: where a path's parent is, how a transfer's stderr
is read, which problem a tool's message names, and the archive's measured size."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_anyio import CopyProblem
from kuber_exec_anyio._copy._local import archive_pieces, archive_size, list_tree
from kuber_exec_core.copy import parse_summary, problem_of, remote_parent


@pytest.mark.parametrize(
    ("path", "parent"),
    [("/a/b", "/a"), ("/a/b/", "/a"), ("/a", "/"), ("/", "/"), ("b", "."), ("a/b", "a")],
)
def test_remote_parent(path: str, parent: str) -> None:
    assert remote_parent(path) == parent


def test_a_summary_is_split_from_the_tools_messages() -> None:
    summary = parse_summary(b"tar: warning\nkx-sum=abc123\nkx-size=42\nkx-tar=0\nmore\n")
    assert summary.checksum == "abc123"
    assert summary.size == 42
    assert summary.tar_status == 0
    assert summary.messages.split() == ["tar:", "warning", "more"]


@given(st.binary(max_size=200))
def test_any_stderr_parses(stderr: bytes) -> None:
    summary = parse_summary(stderr)
    assert summary.size is None or summary.size >= 0


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("head: write error: No space left on device", CopyProblem.NO_SPACE),
        ("sh: can't create /x/y: Permission denied", CopyProblem.PERMISSION_DENIED),
        ("tar: ./a: Cannot open: Read-only file system", CopyProblem.PERMISSION_DENIED),
        ("mkdir: cannot create directory 'f': Not a directory", CopyProblem.NOT_A_DIRECTORY),
        ("tail: cannot open 'x' for reading: No such file or directory", CopyProblem.NO_SUCH_PATH),
        ("something else", CopyProblem.REMOTE_FAILED),
    ],
)
def test_a_tools_message_names_its_problem(message: str, problem: CopyProblem) -> None:
    assert problem_of(message) is problem


def test_the_measured_size_is_the_size_sent_and_tarfile_reads_it(tmp_path: Path) -> None:
    (tmp_path / "t" / "d").mkdir(parents=True)
    for index in range(30):
        (tmp_path / "t" / "d" / f"f{index}").write_bytes(os.urandom(index * 37))
    (tmp_path / "t" / "l").symlink_to("d/f3")
    os.link(tmp_path / "t" / "d" / "f1", tmp_path / "t" / "h")
    entries, skipped = list_tree(str(tmp_path / "t"), "")
    archive = b"".join(archive_pieces(entries))
    assert skipped == []
    assert len(archive) == archive_size(entries)
    assert len(archive) % 10240 == 0
    with tarfile.open(fileobj=io.BytesIO(archive)) as read:
        names = {member.name: member for member in read.getmembers()}
    assert names["l"].issym()
    assert names["l"].linkname == "d/f3"
    assert names["h"].islnk()
    assert names["d/f5"].size == 5 * 37
