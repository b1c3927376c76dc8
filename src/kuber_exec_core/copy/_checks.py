"""The checks of a copy that need no I/O: the arguments, where an upload goes in the container,
whether a download may read its source, and whether what the container reported matches what
moved."""

from __future__ import annotations

from .._errors import ExecError, ExecErrorCode
from ._problems import CopyError, CopyProblem
from ._remote import Probe, Summary

__all__ = [
    "MAX_REMOTE_PATH",
    "check_readable",
    "check_remote_path",
    "check_retries",
    "check_summary",
    "join_remote",
    "upload_destination",
]

#: The longest remote path accepted (Linux's ``PATH_MAX``).
MAX_REMOTE_PATH = 4096


def check_remote_path(path: object) -> str:
    """``path``, when it is a path a copy may name in the container.

    Raises:
        ExecError: ``EXEC_INVALID`` for anything but non-empty text without NUL of at most
            :data:`MAX_REMOTE_PATH` characters.
    """
    if not isinstance(path, str) or not path or "\0" in path or len(path) > MAX_REMOTE_PATH:
        raise ExecError(
            ExecErrorCode.INVALID,
            f"the remote path must be non-empty text without NUL, at most {MAX_REMOTE_PATH} "
            "characters",
        )
    return path


def check_retries(value: object) -> int:
    """``value``, when it is a number of reconnections a download may make.

    Raises:
        ExecError: ``EXEC_INVALID`` for anything but an integer from 0 to 100.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ExecError(ExecErrorCode.INVALID, "retries must be an integer from 0 to 100")
    return value


def join_remote(directory: str, name: str) -> str:
    """``name`` inside the container's ``directory`` (``/`` between them, once)."""
    return directory.rstrip("/") + "/" + name if directory.rstrip("/") else "/" + name


def check_summary(summary: Summary, *, size: int, digest: str, sha256sum: bool, where: str) -> bool:
    """Compare what the container reported with what moved (``size`` bytes whose sha256 is
    ``digest``); returns whether the sha256 was compared (``sha256sum``: the container has
    the tool).

    Raises:
        CopyError: ``SIZE_MISMATCH`` or ``CHECKSUM_MISMATCH``, naming ``where``.
    """
    if summary.size is not None and summary.size != size:
        raise CopyError(
            CopyProblem.SIZE_MISMATCH,
            f"{where}: {size} bytes were sent, the container has {summary.size}",
        )
    if sha256sum:
        if summary.checksum != digest:
            raise CopyError(
                CopyProblem.CHECKSUM_MISMATCH,
                f"{where}: the container's sha256 {summary.checksum} is not {digest}",
            )
        return True
    if summary.size is None:
        # No sha256sum: the summer was ``wc -c``, whose count is the checksum field.
        counted = summary.checksum
        if counted is None or not counted.isdigit() or int(counted) != size:
            raise CopyError(
                CopyProblem.SIZE_MISMATCH,
                f"{where}: {size} bytes moved, the container counted {counted}",
            )
    return False


def upload_destination(probe: Probe, remote: str, name: str, *, directory: bool) -> str:
    """Where an upload named ``name`` goes, given what the probe found at ``remote``: inside
    it when it is a directory, else ``remote`` itself (a file to replace, or a new path in an
    existing directory).

    Raises:
        CopyError: ``NO_SUCH_PATH``, ``NOT_A_DIRECTORY`` or ``UNSUPPORTED``.
    """
    if probe.kind == "dir":
        return join_remote(remote, name)
    if probe.kind == "missing":
        if probe.parent == "missing":
            raise CopyError(CopyProblem.NO_SUCH_PATH, f"the directory of {remote!r} does not exist")
        if probe.parent != "dir":
            raise CopyError(
                CopyProblem.NOT_A_DIRECTORY, f"the parent of {remote!r} is not a directory"
            )
        return remote
    if directory:
        raise CopyError(CopyProblem.NOT_A_DIRECTORY, f"{remote!r} exists and is not a directory")
    if probe.kind == "other":
        raise CopyError(CopyProblem.UNSUPPORTED, f"{remote!r} is not a regular file")
    return remote


def check_readable(probe: Probe, remote: str) -> None:
    """Whether a download may read ``remote``, from what the probe found there.

    Raises:
        CopyError: ``NO_SUCH_PATH``, ``UNSUPPORTED`` or ``PERMISSION_DENIED``.
    """
    if probe.kind == "missing":
        raise CopyError(CopyProblem.NO_SUCH_PATH, f"{remote!r} does not exist in the container")
    if probe.kind == "other":
        raise CopyError(CopyProblem.UNSUPPORTED, f"{remote!r} is not a file or a directory")
    if not probe.readable:
        raise CopyError(CopyProblem.PERMISSION_DENIED, f"{remote!r} is not readable")
