"""Files out of a workspace's pods: ``copy_from_pod`` (a file, resumed after a lost connection,
or a directory, ``tar c`` extracted through the core's ``ExtractionPolicy``) and
``download_stream`` (a file's bytes handed to a sink), each a probe and transfers through the
:class:`ExecService`."""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
from collections.abc import Awaitable, Callable

import attrs

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
    parse_summary,
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

from .._audit._record import CopyPaths
from .._service import ExecService
from ._common import (
    DEFAULT_COPY_RETRIES,
    CopyProgress,
    CopyResult,
    CopyTarget,
    Moved,
    copy_audit,
    probe_path,
    transfer_failure,
)
from ._local import (
    EXCLUSIVE_WRITE,
    LocalExtractor,
)
from ._transfer import run_transfer

__all__ = [
    "copy_from_pod",
    "download_stream",
]


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
    the copy fails. A file download that loses its connection, or whose stream ends short
    though the command ended well, resumes from the last byte received; a directory starts
    over; each up to ``retries`` times (:attr:`CopyResult.retries`).

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
    audit = copy_audit(service, target, paths)
    state = Moved()
    try:
        probe = await probe_path(service, target, remote, audit)
        check_readable(probe, remote)
        destination = _download_destination(probe, remote, local_path, overwrite)
        audit_local = destination
        if probe.kind == "dir":
            result = await _download_tree(
                service,
                target,
                remote,
                destination,
                probe,
                state,
                retries,
                symlinks,
                limits,
                progress,
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


async def _download_file(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    destination: str,
    probe: Probe,
    state: Moved,
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
    state = Moved()
    paths = CopyPaths(direction="download", local_path=None, remote_path=remote)
    audit = copy_audit(service, target, paths)
    try:
        probe = await probe_path(service, target, remote, audit)
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
    state: Moved,
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
            # A clean end short of the file: the stream was cut on the way although the command
            # sent it all (seen on a loaded 1.37 node), or the file shrank. Resumed like a lost
            # connection; a file that really shrank stays short and fails below.
            if state.moved >= total or attempt >= retries:
                break
        else:
            failure = transfer_failure(transfer, summary, where)
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
    state: Moved,
    retries: int,
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
    where = f"download of {remote!r}"
    attempt = 0
    while True:
        state.moved = 0
        try:
            result = await _tree_once(
                service, target, remote, destination, probe, state, symlinks, limits, progress
            )
        except _CutShort as cut:
            # The next `tar c` need not make the same stream: start over, into a fresh
            # directory (this attempt's was removed).
            if attempt >= retries:
                raise CopyError(CopyProblem.CONNECTION_LOST, f"{where}: {cut.reason}") from None
            attempt += 1
            continue
        return attrs.evolve(result, retries=attempt)


class _CutShort(Exception):
    """One tree download's stream did not arrive whole, for a reason a new attempt may not
    meet: a lost connection, or a clean end short of what the container sent."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _tree_once(
    service: ExecService,
    target: CopyTarget,
    remote: str,
    destination: str,
    probe: Probe,
    state: Moved,
    symlinks: SymlinkRule,
    limits: TarLimits | None,
    progress: CopyProgress | None,
) -> CopyResult:
    # One `tar c` of the directory, extracted into ``destination`` (removed again on failure).
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
                failure = transfer_failure(transfer, summary, where)
                if failure.problem is CopyProblem.CONNECTION_LOST:
                    raise _CutShort(failure.message.removeprefix(f"{where}: "))
                raise failure
            reader.end_of_input()
            try:
                drain()
            except TarError:
                if _sent_otherwise(summary, probe, digest.hexdigest(), state.moved):
                    raise _CutShort(
                        f"the archive arrived short ({state.moved} bytes) of what the "
                        "container sent, although its command ended well"
                    ) from None
                raise
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


def _sent_otherwise(summary: Summary, probe: Probe, digest: str, moved: int) -> bool:
    """Whether an incomplete archive from a command that ended well was cut on the way rather
    than written so by ``tar`` (which a new attempt would only repeat). The script's last words
    are its summary on stderr (the stream's sha256, or its byte count without ``sha256sum``,
    and tar's status): missing, it was cut with the stream's tail; present, it says what the
    container sent, which is not what arrived."""
    if summary.checksum is None or summary.tar_status is None:
        return True
    return summary.checksum != (digest if probe.sha256sum else str(moved))
