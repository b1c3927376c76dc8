"""Files into and out of a workspace's pods: ``copy_to_pod``, ``copy_from_pod`` and streams.

Each copy is ordinary execs through an :class:`ExecService` (so the same targeting, ownership
checks, limits and audit apply as to any exec): a probe (what the remote path is, whether the
image has ``tar`` and ``sha256sum``), then one transfer (``_transfer``) whose stdin or
stdout carries the bytes, as ``head -c N`` into a file, ``tar x`` of a measured archive,
``tail -c +N`` of a file or ``tar c`` of a directory (``kuber_exec_core.copy`` has the scripts).

What every copy guarantees:

- **Memory** is flat, whatever the size: bounded frames each way, backpressure both ways.
- **Size** is always checked; the **sha256** of the bytes moved (the file's, or the tar
  stream's for a directory) is compared with the container's when it has ``sha256sum``
  (:attr:`CopyResult.sha256_verified` says whether it did).
- **v4** works: an upload is delimited by its size, since v4 cannot close stdin.
- A file **download resumes** from the last byte received after a lost connection
  (``retries`` times); a directory restarts nothing and fails with ``CONNECTION_LOST``.
- An archive from the container is extracted through the core's ``ExtractionPolicy``: nothing
  is written outside the new directory (``..``, absolute names, links, devices, setuid).
- Errors are :class:`CopyError` with a :class:`CopyProblem`.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from typing import Literal

import attrs

from kuber_exec_core import (
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    Impersonation,
    Workspace,
)
from kuber_exec_core.copy import (
    CopyError,
    CopyProblem,
    Probe,
    Summary,
    check_readable,
    check_remote_path,
    check_retries,
    check_summary,
    download_file_command,
    download_tree_command,
    first_line,
    parse_probe,
    parse_summary,
    probe_command,
    problem_of,
    upload_destination,
    upload_file_command,
    upload_tree_command,
)
from kuber_exec_core.tar import (
    ArchiveEnd,
    ExtractionPolicy,
    MemberData,
    MemberEnd,
    SymlinkRule,
    TarError,
    TarLimits,
    TarMember,
    TarReader,
)

from .._audit._record import AuditRecord, CopyPaths
from .._service import ExecService
from ._local import (
    EXCLUSIVE_WRITE,
    PIECE,
    LocalExtractor,
    archive_pieces,
    archive_size,
    list_tree,
)
from ._transfer import Transfer, run_transfer

__all__ = [
    "DEFAULT_COPY_RETRIES",
    "CopyProgress",
    "CopyResult",
    "CopyTarget",
    "copy_from_pod",
    "copy_to_pod",
    "download_stream",
    "upload_stream",
]

#: Reconnections a file download makes after lost connections before it gives up.
DEFAULT_COPY_RETRIES = 3
#: Called as bytes move: ``(bytes so far, total)``; ``total`` is ``None`` when unknown (a
#: directory download). Called on the event loop: it must not block.
CopyProgress = Callable[[int, int | None], None]


@attrs.frozen
class CopyTarget:
    """Where a copy goes: the workspace, its Deployment, optionally the container, and the
    user every exec of the copy acts for (Kubernetes impersonation, as
    ``ExecRequest.on_behalf_of``; it is the ``user`` of the copy's audit events)."""

    workspace: Workspace
    deployment: str
    container: str | None = None
    on_behalf_of: Impersonation | None = None

    def request(self, command: tuple[str, ...]) -> ExecRequest:
        return ExecRequest(
            workspace=self.workspace,
            deployment=self.deployment,
            command=command,
            container=self.container,
            on_behalf_of=self.on_behalf_of,
        )


@attrs.frozen(kw_only=True)
class CopyResult:
    """What a copy moved.

    Attributes:
        direction: ``"upload"`` or ``"download"``.
        remote_path: the path in the container that was written or read.
        local_path: the local file or directory written or read (``None`` for a stream).
        size: the bytes moved: the file's, or the tar stream's for a directory.
        sha256: the sha256 (hex) of those bytes, computed locally.
        sha256_verified: whether the container computed the same (``False``: it has no
            ``sha256sum``, and only the size was checked).
        files: regular files moved (hard links included).
        retries: reconnections a download needed.
        skipped: what was left out, each with its reason (local sockets or FIFOs; symlinks
            under ``SymlinkRule.SKIP_*``).
    """

    direction: Literal["upload", "download"]
    remote_path: str
    local_path: str | None
    size: int
    sha256: str
    sha256_verified: bool
    files: int
    retries: int = 0
    skipped: tuple[str, ...] = ()


def _audit(service: ExecService, target: CopyTarget, paths: CopyPaths) -> AuditRecord:
    # The copy's own pair of events (kind "copy"), besides those of the execs it runs.
    return AuditRecord.for_copy(service.audit, target.request(("copy", paths.direction)), paths)


async def _probe(service: ExecService, target: CopyTarget, path: str, audit: AuditRecord) -> Probe:
    result = await service.execute(
        target.request(probe_command(path)), stdout_cap=4096, stderr_cap=4096
    )
    audit.started(result.target)
    if result.exit_code != 0:
        raise CopyError(
            CopyProblem.REMOTE_FAILED,
            f"could not inspect {path!r}: {first_line(result.stderr.decode('utf-8', 'replace'))}",
        )
    return parse_probe(result.stdout, path)


def _failure(transfer: Transfer, summary: Summary, where: str) -> CopyError:
    final = transfer.final
    if isinstance(final, Error) or final is None:
        reason = "the connection ended" if final is None else final.message
        return CopyError(CopyProblem.CONNECTION_LOST, f"{where}: {reason}")
    problem = problem_of(summary.messages)
    return CopyError(problem, f"{where}: {first_line(summary.messages)}")


# -- uploads ----------------------------------------------------------------------------------


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
    ``head -c`` (no ``tar`` needed) and takes the local permission bits; a directory is sent as
    a tar stream into ``tar x`` (the remote directory is made if missing, merged if it exists).
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
    audit = _audit(service, target, paths)
    state = _Moved()
    try:
        try:
            info = os.stat(local_path)
        except OSError as error:
            raise CopyError(
                CopyProblem.LOCAL_PATH, f"cannot read {local_path!r}: {error.strerror}"
            ) from None
        probe = await _probe(service, target, remote, audit)
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
    audit = _audit(service, target, paths)
    state = _Moved()
    try:
        probe = await _probe(service, target, remote, audit)
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


@attrs.define
class _Moved:
    moved: int = 0


async def _upload(
    service: ExecService,
    target: CopyTarget,
    command: tuple[str, ...],
    pieces: Iterator[bytes] | AsyncIterable[bytes],
    *,
    size: int,
    probe: Probe,
    destination: str,
    state: _Moved,
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
        raise _failure(transfer, summary, where)
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


# -- downloads --------------------------------------------------------------------------------


async def copy_from_pod(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    local: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    retries: int = DEFAULT_COPY_RETRIES,
    symlinks: SymlinkRule = SymlinkRule.CONTAINED,
    limits: TarLimits | None = None,
    progress: CopyProgress | None = None,
) -> CopyResult:
    """Copy a file or directory out of the container.

    When ``local`` is an existing directory the copy goes inside it under the remote name;
    otherwise ``local`` is the new name (its parent must exist). A file replaces an existing
    local file only with ``overwrite`` (it is written beside it and renamed when complete); a
    directory is always extracted into a new local directory, through the core's
    ``ExtractionPolicy`` (``symlinks`` and ``limits`` are its options), and removed again if
    the copy fails. A file download that loses its connection resumes from the last byte
    received, up to ``retries`` times.

    Raises:
        CopyError: ``NO_SUCH_PATH``, ``UNSUPPORTED``, ``PERMISSION_DENIED``, ``NO_TAR`` (a
            directory, without tar), ``LOCAL_PATH`` (the local destination exists, or its
            parent does not), ``BAD_ARCHIVE`` (the container's archive is hostile or broken:
            nothing was written outside the destination), ``SIZE_MISMATCH``,
            ``CHECKSUM_MISMATCH``, ``CONNECTION_LOST``, ``REMOTE_FAILED``.
        ExecError: as ``ExecService.execute``; ``EXEC_INVALID`` for a bad ``retries``.
    """
    local_path = os.fspath(local)
    remote = check_remote_path(remote)
    retries = check_retries(retries)
    paths = CopyPaths(direction="download", local_path=local_path, remote_path=remote)
    audit = _audit(service, target, paths)
    state = _Moved()
    try:
        probe = await _probe(service, target, remote, audit)
        check_readable(probe, remote)
        destination = _download_destination(probe, remote, local_path, overwrite)
        audit_local = destination
        if probe.kind == "dir":
            result = await _download_tree(
                service, target, remote, destination, probe, state, symlinks, limits, progress
            )
        else:
            result = await _download_file(
                service, target, remote, destination, probe, state, retries, progress
            )
        result = attrs.evolve(result, local_path=audit_local)
    except BaseException as error:
        audit.interrupted(error, moved=state.moved)
        raise
    audit.copied(size=result.size, sha256=result.sha256, verified=result.sha256_verified)
    return result


def _download_destination(probe: Probe, remote: str, local_path: str, overwrite: bool) -> str:
    """Where a download goes locally, checked: inside ``local_path`` if it is a directory, else
    ``local_path`` itself, which must not exist (a file may, with ``overwrite``)."""
    name = posixpath.basename(remote.rstrip("/"))
    if os.path.isdir(local_path):
        if name in ("", ".", ".."):
            raise CopyError(
                CopyProblem.LOCAL_PATH,
                f"{remote!r} has no name to use in {local_path!r}: name the destination",
            )
        destination = os.path.join(local_path, name)
    else:
        destination = local_path
    parent = os.path.dirname(os.path.abspath(destination))
    if not os.path.isdir(parent):
        raise CopyError(CopyProblem.LOCAL_PATH, f"the directory {parent!r} does not exist")
    if os.path.lexists(destination):
        replaceable = (
            probe.kind == "file"
            and overwrite
            and os.path.isfile(destination)
            and not os.path.islink(destination)
        )
        if not replaceable:
            hint = " (pass overwrite=True to replace a file)" if probe.kind == "file" else ""
            raise CopyError(CopyProblem.LOCAL_PATH, f"{destination!r} already exists{hint}")
    return destination


def _local_name(local_path: str) -> str:
    return os.path.basename(os.path.normpath(local_path))


async def _download_file(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    destination: str,
    probe: Probe,
    state: _Moved,
    retries: int,
    progress: CopyProgress | None,
) -> CopyResult:
    partial = f"{destination}.kuber-exec-partial"
    try:
        fd = os.open(partial, EXCLUSIVE_WRITE, 0o600)
    except OSError as error:
        raise CopyError(
            CopyProblem.LOCAL_PATH, f"cannot create {partial!r}: {error.strerror}"
        ) from None
    try:
        try:

            def write(data: bytes) -> None:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]

            result = await _stream_file(
                service, target, remote, probe, write, state, retries, progress
            )
            os.fchmod(fd, 0o644 & ~_umask())
        finally:
            os.close(fd)
        os.replace(partial, destination)
    except BaseException:
        with _quietly():
            os.unlink(partial)
        raise
    return attrs.evolve(result, local_path=destination)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


class _quietly:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: object, traceback: object) -> bool:
        return isinstance(error, OSError)


async def download_stream(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    sink: Callable[[bytes], Awaitable[None] | None],
    *,
    retries: int = DEFAULT_COPY_RETRIES,
    progress: CopyProgress | None = None,
) -> CopyResult:
    """Hand the bytes of the remote file ``remote`` to ``sink``, in order, each exactly once
    (a resumed download continues where the last piece ended). ``sink`` may be a coroutine
    function; while it is busy the socket is not read.

    Raises:
        CopyError: ``IS_A_DIRECTORY`` for a directory; otherwise as :func:`copy_from_pod`.
        ExecError: as ``ExecService.execute``.
    """
    remote = check_remote_path(remote)
    retries = check_retries(retries)
    state = _Moved()
    paths = CopyPaths(direction="download", local_path=None, remote_path=remote)
    audit = _audit(service, target, paths)
    try:
        probe = await _probe(service, target, remote, audit)
        check_readable(probe, remote)
        if probe.kind == "dir":
            raise CopyError(CopyProblem.IS_A_DIRECTORY, f"{remote!r} is a directory")
        result = await _stream_file(service, target, remote, probe, sink, state, retries, progress)
    except BaseException as error:
        audit.interrupted(error, moved=state.moved)
        raise
    audit.copied(size=result.size, sha256=result.sha256, verified=result.sha256_verified)
    return result


async def _stream_file(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    probe: Probe,
    sink: Callable[[bytes], Awaitable[None] | None],
    state: _Moved,
    retries: int,
    progress: CopyProgress | None,
) -> CopyResult:
    # The transfer of a readable file the probe found: the caller audits the copy.
    digest = hashlib.sha256()
    total = probe.size

    async def received(data: bytes) -> None:
        if state.moved + len(data) > total:
            raise CopyError(
                CopyProblem.SIZE_MISMATCH, f"{remote!r} grew past {total} bytes while copied"
            )
        digest.update(data)
        pending = sink(data)
        if pending is not None:
            await pending
        state.moved += len(data)
        if progress is not None:
            progress(state.moved, total)

    attempt = 0
    where = f"download of {remote!r}"
    while True:
        transfer = await run_transfer(
            service,
            target.request(download_file_command(remote, state.moved)),
            on_stdout=received,
        )
        summary = parse_summary(bytes(transfer.stderr))
        if transfer.exited_cleanly:
            break
        failure = _failure(transfer, summary, where)
        if failure.problem is not CopyProblem.CONNECTION_LOST or attempt >= retries:
            raise failure
        attempt += 1
    if state.moved != total:
        raise CopyError(
            CopyProblem.SIZE_MISMATCH,
            f"{where}: {state.moved} bytes arrived, the file had {total}",
        )
    # The size was checked against the probe's; the sha256 needs sha256sum.
    verified = probe.sha256sum and check_summary(
        summary, size=total, digest=digest.hexdigest(), sha256sum=True, where=where
    )
    return CopyResult(
        direction="download",
        remote_path=remote,
        local_path=None,
        size=total,
        sha256=digest.hexdigest(),
        sha256_verified=verified,
        files=1,
        retries=attempt,
    )


async def _download_tree(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    destination: str,
    probe: Probe,
    state: _Moved,
    symlinks: SymlinkRule,
    limits: TarLimits | None,
    progress: CopyProgress | None,
) -> CopyResult:
    if not probe.tar:
        raise CopyError(
            CopyProblem.NO_TAR,
            f"copying the directory {remote!r} needs tar in the container, which has none "
            "(single files copy without it)",
        )
    extractor = LocalExtractor(destination, ExtractionPolicy(limits, symlink_rule=symlinks))
    reader = TarReader(limits)
    digest = hashlib.sha256()
    ended: list[ArchiveEnd] = []

    def drain() -> None:
        while not ended:
            event = reader.next_event()
            if isinstance(event, TarMember):
                extractor.member(event)
            elif isinstance(event, MemberData):
                extractor.data(event.data)
            elif isinstance(event, MemberEnd):
                extractor.end_member()
            elif isinstance(event, ArchiveEnd):
                ended.append(event)
            else:
                return  # NEED_DATA

    def received(data: bytes) -> None:
        digest.update(data)
        state.moved += len(data)
        reader.feed(data)
        drain()
        if progress is not None:
            progress(state.moved, None)

    where = f"download of {remote!r}"
    try:
        try:
            transfer = await run_transfer(
                service,
                target.request(download_tree_command(remote, sha256=probe.sha256sum)),
                on_stdout=received,
            )
            summary = parse_summary(bytes(transfer.stderr))
            if not transfer.exited_cleanly:
                raise _failure(transfer, summary, where)
            reader.end_of_input()
            drain()
            verified = check_summary(
                summary,
                size=state.moved,
                digest=digest.hexdigest(),
                sha256sum=probe.sha256sum,
                where=where,
            )
            extractor.finish()
        except TarError as error:
            raise CopyError(CopyProblem.BAD_ARCHIVE, f"{where}: {error.message}") from error
        finally:
            extractor.abort()
    except BaseException:
        shutil.rmtree(destination, ignore_errors=True)
        raise
    return CopyResult(
        direction="download",
        remote_path=remote,
        local_path=destination,
        size=state.moved,
        sha256=digest.hexdigest(),
        sha256_verified=verified,
        files=extractor.files,
        skipped=tuple(f"{s.member.name}: {s.reason}" for s in extractor.skipped),
    )
