"""The local side of a copy: a tree as a tar stream, and a tar stream into a new directory.

:func:`list_tree` walks a local file or directory once (never following a symlink) into a list
of :class:`LocalEntry`; :func:`archive_size` measures the archive those entries make and
:func:`archive_pieces` produces it in bounded pieces. The list is kept between the two so the
measured size (which a v4 upload announces before it starts: ``head -c N``) is the size sent,
and it costs one entry per member, never the files' contents.

:class:`LocalExtractor` extracts an untrusted archive into a directory it creates, doing what
the core's :class:`~kuber_exec_core.tar.ExtractionPolicy` allows and nothing else: parents made
or checked with ``lstat`` (a symlink there is refused), files created with ``O_EXCL |
O_NOFOLLOW``, directory modes applied last.

The file I/O here is synchronous, in bounded pieces (at most :data:`PIECE` bytes): local disk
writes of that size return from the page cache in microseconds, far below one WebSocket
message's cost, and a thread hop per piece would halve the throughput.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Iterator

import attrs

from kuber_exec_core.copy import CopyError, CopyProblem
from kuber_exec_core.tar import (
    Extraction,
    ExtractionPolicy,
    Skipped,
    TarError,
    TarKind,
    TarMember,
    TarWriter,
)

__all__ = [
    "PIECE",
    "EntryKind",
    "LocalEntry",
    "LocalExtractor",
    "archive_pieces",
    "archive_size",
    "list_tree",
]

#: The largest piece read from or written to a local file at once.
PIECE = 64 * 1024
#: Opening a new file: never an existing one, never through a symlink.
EXCLUSIVE_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0)
#: tar's record: archives are padded to a multiple of it, as ``tar c`` writes them, so that a
#: ``tar x`` reading whole records never stops short of the end (and ``tee`` before it is not
#: cut off by SIGPIPE).
RECORD = 10240


class EntryKind(enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"


@attrs.frozen(kw_only=True)
class LocalEntry:
    """One member to send: its archive name, local path, kind, and what ``lstat`` said."""

    name: str
    path: str
    kind: EntryKind
    size: int = 0
    mode: int = 0o644
    mtime: int = 0
    target: str = ""


def list_tree(root: str, top: str) -> tuple[list[LocalEntry], list[str]]:
    """The entries of ``root`` (a file or a directory) named under ``top`` in the archive
    (``top`` empty: the directory's contents at the archive's root), and the local paths left
    out (sockets, FIFOs, devices), in a stable order (names sorted).

    Raises:
        CopyError: ``LOCAL_PATH`` when ``root`` does not exist or cannot be read.
    """
    entries: list[LocalEntry] = []
    skipped: list[str] = []
    seen: dict[tuple[int, int], str] = {}

    def add(path: str, name: str, info: os.stat_result) -> bool:
        mode, mtime = stat.S_IMODE(info.st_mode), max(int(info.st_mtime), 0)
        if stat.S_ISDIR(info.st_mode):
            if name:
                entries.append(
                    LocalEntry(name=name, path=path, kind=EntryKind.DIRECTORY, mode=mode)
                )
            return True
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            entries.append(LocalEntry(name=name, path=path, kind=EntryKind.SYMLINK, target=target))
        elif stat.S_ISREG(info.st_mode):
            key = (info.st_dev, info.st_ino)
            if info.st_nlink > 1 and key in seen:
                entries.append(
                    LocalEntry(name=name, path=path, kind=EntryKind.HARDLINK, target=seen[key])
                )
            else:
                seen[key] = name
                entries.append(
                    LocalEntry(
                        name=name,
                        path=path,
                        kind=EntryKind.FILE,
                        size=info.st_size,
                        mode=mode,
                        mtime=mtime,
                    )
                )
        else:
            skipped.append(path)
        return False

    def walk(path: str, name: str) -> None:
        try:
            with os.scandir(path) as listing:
                children = sorted(listing, key=lambda entry: entry.name)
        except OSError as error:
            raise _local_error(path, error) from None
        for child in children:
            child_name = f"{name}/{child.name}" if name else child.name
            if add(child.path, child_name, child.stat(follow_symlinks=False)):
                walk(child.path, child_name)

    try:
        info = os.lstat(root)
    except OSError as error:
        raise _local_error(root, error) from None
    if add(root, top, info):
        walk(root, top)
    return entries, skipped


def _local_error(path: str, error: OSError) -> CopyError:
    return CopyError(CopyProblem.LOCAL_PATH, f"cannot read {path!r}: {error.strerror}")


def _headers(writer: TarWriter, entry: LocalEntry) -> bytes:
    if entry.kind is EntryKind.DIRECTORY:
        return writer.add_directory(entry.name, mode=entry.mode, mtime=entry.mtime)
    if entry.kind is EntryKind.SYMLINK:
        return writer.add_symlink(entry.name, entry.target)
    if entry.kind is EntryKind.HARDLINK:
        return writer.add_hardlink(entry.name, entry.target)
    return writer.add_file(entry.name, entry.size, mode=entry.mode, mtime=entry.mtime)


def archive_size(entries: list[LocalEntry]) -> int:
    """The exact length of :func:`archive_pieces` for ``entries``, padding included."""
    writer = TarWriter()
    for entry in entries:
        _headers(writer, entry)
        if entry.kind is EntryKind.FILE:
            writer.skip_data(entry.size)
            writer.end_file()
    writer.finish()
    return writer.bytes_written + (-writer.bytes_written % RECORD)


def archive_pieces(entries: list[LocalEntry]) -> Iterator[bytes]:
    """The archive of ``entries`` in pieces of at most :data:`PIECE` bytes of file data.

    Each file is read for the size :func:`list_tree` found: a file that shrank since raises
    ``CopyError`` (``LOCAL_PATH``), a file that grew is sent as it was listed.
    """
    writer = TarWriter()
    for entry in entries:
        header = _headers(writer, entry)
        if entry.kind is not EntryKind.FILE:
            yield header
            continue
        yield header
        try:
            with open(entry.path, "rb", buffering=0) as file:
                remaining = entry.size
                while remaining:
                    piece = file.read(min(PIECE, remaining))
                    if not piece:
                        raise CopyError(
                            CopyProblem.LOCAL_PATH,
                            f"{entry.path!r} shrank while it was being copied",
                        )
                    remaining -= len(piece)
                    writer.write_data(piece)
                    yield piece
        except OSError as error:
            raise _local_error(entry.path, error) from None
        yield writer.end_file()
    end = writer.finish()
    yield end + bytes(-writer.bytes_written % RECORD)


class LocalExtractor:
    """Extracts one untrusted archive into ``root``, which it creates (it must not exist).

    Feed it the reader's events: :meth:`member`, :meth:`data`, :meth:`end_member`, then
    :meth:`finish`. On any error call :meth:`abort`, which closes the open file; what was
    extracted stays for the caller to remove.

    Raises (from each method):
        TarError: the policy refused a member (``EXEC_FAILED``).
        CopyError: ``LOCAL_PATH`` when the file system refuses something (or ``root``
            exists).
    """

    def __init__(self, root: str, policy: ExtractionPolicy) -> None:
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            raise CopyError(CopyProblem.LOCAL_PATH, f"{root!r} already exists") from None
        except OSError as error:
            raise CopyError(
                CopyProblem.LOCAL_PATH, f"cannot create {root!r}: {error.strerror}"
            ) from None
        self.root = root
        self._policy = policy
        self._fd: int | None = None
        self._open: Extraction | None = None
        self._directory_modes: list[tuple[str, int]] = [(root, 0o755)]
        self.skipped: list[Skipped] = []
        self.files = 0

    def _local(self, path: str) -> str:
        return os.path.join(self.root, *path.split("/"))

    def member(self, member: TarMember) -> None:
        decision = self._policy.decide(member)
        if isinstance(decision, Skipped):
            if member.kind is not TarKind.DIRECTORY:  # not ``./``, the destination itself
                self.skipped.append(decision)
            return
        try:
            self._create(decision)
        except OSError as error:
            raise CopyError(
                CopyProblem.LOCAL_PATH, f"cannot create {decision.path!r}: {error.strerror}"
            ) from None

    def _create(self, decision: Extraction) -> None:
        for parent in decision.new_parents:
            local = self._local(parent)
            try:
                os.mkdir(local, 0o700)
                self._directory_modes.append((local, 0o755))
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(local).st_mode):
                    raise TarError(
                        "a parent is not a directory", member=decision.member.name
                    ) from None
        local = self._local(decision.path)
        if decision.kind is TarKind.DIRECTORY:
            try:
                os.mkdir(local, 0o700)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(local).st_mode):
                    raise
            self._directory_modes.append((local, decision.mode))
        elif decision.kind is TarKind.SYMLINK:
            os.symlink(decision.link_target, local)
        elif decision.kind is TarKind.HARDLINK:
            os.link(self._local(decision.link_target), local, follow_symlinks=False)
            self.files += 1
        else:
            flags = (
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0)
            )
            self._fd = os.open(local, flags, 0o600)
            self._open = decision
            self.files += 1

    def data(self, data: memoryview) -> None:
        if self._fd is None:
            return  # a skipped member's data
        view = data
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as error:
            raise CopyError(
                CopyProblem.LOCAL_PATH, f"cannot write {self._open_path()!r}: {error.strerror}"
            ) from None

    def _open_path(self) -> str:
        return "" if self._open is None else self._open.path

    def end_member(self) -> None:
        if self._fd is None or self._open is None:
            return
        fd, decision = self._fd, self._open
        self._fd = self._open = None
        try:
            os.fchmod(fd, decision.mode)
            mtime = decision.member.mtime
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)

    def finish(self) -> None:
        """Apply the directories' modes, deepest first (a read-only one would refuse the
        rest)."""
        for path, mode in reversed(self._directory_modes):
            os.chmod(path, mode)

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = self._open = None
