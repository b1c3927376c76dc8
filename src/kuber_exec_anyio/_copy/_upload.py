"""Files into a workspace's pods: ``copy_to_pod`` (a file or a directory, as ``dd`` or
``head -c`` of N bytes into a file, or ``tar x`` of a measured archive) and ``upload_stream``
(bytes from an async iterable into a file), each a probe and one transfer through the
:class:`ExecService`."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import AsyncIterable, Iterator

import attrs

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
)
from kuber_exec_core.copy import (
    CopyError,
    CopyProblem,
    Probe,
    check_remote_path,
    check_summary,
    parse_summary,
    upload_destination,
    upload_file_command,
    upload_tree_command,
)

from .._audit._record import CopyPaths
from .._service import ExecService
from ._common import (
    CopyProgress,
    CopyResult,
    CopyTarget,
    Moved,
    copy_audit,
    probe_path,
    transfer_failure,
)
from ._local import (
    PIECE,
    archive_pieces,
    archive_size,
    list_tree,
)
from ._transfer import run_transfer

__all__ = [
    "copy_to_pod",
    "upload_stream",
]


async def copy_to_pod(
    service: ExecService,
    target: CopyTarget,
    local: str | os.PathLike[str],
    remote: str,
    *,
    progress: CopyProgress | None = None,
) -> CopyResult:
    """Copy a local file or directory into the container, as ``kubectl cp`` does.

    When ``remote`` is an existing directory the copy goes inside it under the local name;
    otherwise ``remote`` is the new name (its parent must exist). A file is written with
    ``dd`` (``head -c`` where dd lacks ``count_bytes``; no ``tar`` needed) and takes the local
    permission bits; a directory is sent as a tar stream into ``tar x`` (the remote directory
    is made if missing, merged if it exists).
    Symlinks are copied as symlinks; local sockets, FIFOs and devices are skipped.

    Raises:
        CopyError: ``LOCAL_PATH`` (the local path is missing or unreadable), ``NO_SUCH_PATH``
            (the remote parent is missing), ``NOT_A_DIRECTORY``, ``UNSUPPORTED``,
            ``PERMISSION_DENIED``, ``NO_SPACE``, ``NO_TAR`` (a directory, without tar),
            ``SIZE_MISMATCH``, ``CHECKSUM_MISMATCH``, ``CONNECTION_LOST``, ``REMOTE_FAILED``.
        ExecError: as ``ExecService.execute`` (targeting, ownership, limits).
    """
    local_path = os.fspath(local)
    remote = check_remote_path(remote)
    paths = CopyPaths(direction="upload", local_path=local_path, remote_path=remote)
    audit = copy_audit(service, target, paths)
    state = Moved()
    try:
        try:
            info = os.stat(local_path)
        except OSError as error:
            raise CopyError(
                CopyProblem.LOCAL_PATH, f"cannot read {local_path!r}: {error.strerror}"
            ) from None
        probe = await probe_path(service, target, remote, audit)
        name = _local_name(local_path)
        destination = upload_destination(probe, remote, name, directory=stat.S_ISDIR(info.st_mode))
        paths.remote_path = destination
        if stat.S_ISDIR(info.st_mode):
            if not probe.tar:
                raise CopyError(
                    CopyProblem.NO_TAR,
                    f"copying the directory {local_path!r} needs tar in the container, which "
                    "has none (single files copy without it)",
                )
            entries, skipped = list_tree(local_path, "")
            size = archive_size(entries)
            command = upload_tree_command(destination, size, sha256=probe.sha256sum)
            pieces: Iterator[bytes] = archive_pieces(entries)
            files = sum(1 for entry in entries if entry.kind.value in ("file", "hardlink"))
            skipped_reasons = tuple(f"{path}: not a file, directory or symlink" for path in skipped)
        elif stat.S_ISREG(info.st_mode):
            size = info.st_size
            command = upload_file_command(destination, size, stat.S_IMODE(info.st_mode))
            pieces = _file_pieces(local_path, size)
            files, skipped_reasons = 1, ()
        else:
            raise CopyError(CopyProblem.LOCAL_PATH, f"{local_path!r} is not a file or directory")
        result = await _upload(
            service,
            target,
            command,
            pieces,
            size=size,
            probe=probe,
            destination=destination,
            state=state,
            progress=progress,
        )
        result = attrs.evolve(result, local_path=local_path, files=files, skipped=skipped_reasons)
    except BaseException as error:
        audit.interrupted(error, moved=state.moved)
        raise
    audit.copied(size=result.size, sha256=result.sha256, verified=result.sha256_verified)
    return result


def _local_name(local_path: str) -> str:
    return os.path.basename(os.path.normpath(local_path))


def _file_pieces(path: str, size: int) -> Iterator[bytes]:
    try:
        with open(path, "rb", buffering=0) as file:
            remaining = size
            while remaining:
                piece = file.read(min(PIECE, remaining))
                if not piece:
                    raise CopyError(
                        CopyProblem.LOCAL_PATH, f"{path!r} shrank while it was being copied"
                    )
                remaining -= len(piece)
                yield piece
    except OSError as error:
        raise CopyError(CopyProblem.LOCAL_PATH, f"cannot read {path!r}: {error.strerror}") from None


async def upload_stream(
    service: ExecService,
    target: CopyTarget,
    source: AsyncIterable[bytes],
    remote: str,
    *,
    size: int,
    mode: int | None = None,
    progress: CopyProgress | None = None,
) -> CopyResult:
    """Write exactly ``size`` bytes from ``source`` to the file ``remote`` (into it, under
    the name ``"upload"``, if it is a directory; better name the file). ``mode`` (permission
    bits) is applied if given.

    Raises:
        CopyError: as :func:`copy_to_pod`; ``SIZE_MISMATCH`` when ``source`` ends short of or
            goes past ``size``.
        ExecError: ``EXEC_INVALID`` for a bad ``size``; as ``ExecService.execute``.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ExecError(ExecErrorCode.INVALID, "size must be an integer >= 0")
    remote = check_remote_path(remote)
    paths = CopyPaths(direction="upload", local_path=None, remote_path=remote)
    audit = copy_audit(service, target, paths)
    state = Moved()
    try:
        probe = await probe_path(service, target, remote, audit)
        destination = upload_destination(probe, remote, "upload", directory=False)
        paths.remote_path = destination
        result = await _upload(
            service,
            target,
            upload_file_command(destination, size, mode),
            _Exactly(source, size),
            size=size,
            probe=probe,
            destination=destination,
            state=state,
            progress=progress,
        )
    except BaseException as error:
        audit.interrupted(error, moved=state.moved)
        raise
    audit.copied(size=result.size, sha256=result.sha256, verified=result.sha256_verified)
    return result


class _Exactly:
    """``source``'s pieces, checked to add up to ``size`` bytes (a plain iterator, not an
    async generator, so that leaving it early needs no finalizer)."""

    def __init__(self, source: AsyncIterable[bytes], size: int) -> None:
        self._source = aiter(source)
        self._size = size
        self._sent = 0

    def __aiter__(self) -> _Exactly:
        return self

    async def __anext__(self) -> bytes:
        try:
            piece = bytes(await anext(self._source))
        except StopAsyncIteration:
            if self._sent != self._size:
                raise CopyError(
                    CopyProblem.SIZE_MISMATCH,
                    f"the source ended after {self._sent} of {self._size} bytes",
                ) from None
            raise
        self._sent += len(piece)
        if self._sent > self._size:
            raise CopyError(
                CopyProblem.SIZE_MISMATCH, f"the source has more than {self._size} bytes"
            )
        return piece

    async def aclose(self) -> None:
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()


async def _upload(
    service: ExecService,
    target: CopyTarget,
    command: tuple[str, ...],
    pieces: Iterator[bytes] | AsyncIterable[bytes],
    *,
    size: int,
    probe: Probe,
    destination: str,
    state: Moved,
    progress: CopyProgress | None,
) -> CopyResult:
    digest = hashlib.sha256()

    def sent(count: int) -> None:
        state.moved += count
        if progress is not None:
            progress(state.moved, size)

    transfer = await run_transfer(
        service, target.request(command), source=pieces, on_piece=digest.update, on_sent=sent
    )
    summary = parse_summary(bytes(transfer.stderr))
    where = f"upload to {destination!r}"
    if not transfer.exited_cleanly:
        raise transfer_failure(transfer, summary, where)
    verified = check_summary(
        summary, size=size, digest=digest.hexdigest(), sha256sum=probe.sha256sum, where=where
    )
    return CopyResult(
        direction="upload",
        remote_path=destination,
        local_path=None,
        size=size,
        sha256=digest.hexdigest(),
        sha256_verified=verified,
        files=1,
    )
