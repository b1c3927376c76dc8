"""The errors of a copy: an ``ExecError`` with a seed-style ``code`` and what went wrong.

A copy fails like an exec (the same ``code`` values, so a caller that handles ``ExecError``
handles copies) and says more in :attr:`CopyError.problem`, a machine-readable
:class:`CopyProblem`: decide on it, never on the message's wording.
"""

from __future__ import annotations

import enum

from .._errors import ExecError, ExecErrorCode

__all__ = ["CopyError", "CopyProblem"]


class CopyProblem(enum.StrEnum):
    """What went wrong with a copy (the value is the code shown by the CLI)."""

    #: The remote path (or, for an upload, its parent directory) does not exist.
    NO_SUCH_PATH = "COPY_NO_SUCH_PATH"
    #: A file (or something else) stands where a directory was expected.
    NOT_A_DIRECTORY = "COPY_NOT_A_DIRECTORY"
    #: A directory stands where a file was expected (a stream download of a directory).
    IS_A_DIRECTORY = "COPY_IS_A_DIRECTORY"
    #: The remote path is neither a file nor a directory (a device, a FIFO, a socket).
    UNSUPPORTED = "COPY_UNSUPPORTED"
    #: The container's user may not read or write the remote path.
    PERMISSION_DENIED = "COPY_PERMISSION_DENIED"
    #: The container's file system is full.
    NO_SPACE = "COPY_NO_SPACE"
    #: A directory needs ``tar`` and the image has none (a single file still copies).
    NO_TAR = "COPY_NO_TAR"
    #: The local destination exists where the copy must create it (or the local source is
    #: missing): nothing was sent.
    LOCAL_PATH = "COPY_LOCAL_PATH"
    #: Fewer or more bytes arrived than were sent.
    SIZE_MISMATCH = "COPY_SIZE_MISMATCH"
    #: The sha256 computed in the container differs from the local one.
    CHECKSUM_MISMATCH = "COPY_CHECKSUM_MISMATCH"
    #: The connection was lost, and the copy could not resume (retries used up, or a tree).
    CONNECTION_LOST = "COPY_CONNECTION_LOST"
    #: The archive from the container was refused by the extraction policy, or is broken.
    BAD_ARCHIVE = "COPY_BAD_ARCHIVE"
    #: The remote command failed for another reason (its stderr is in the message).
    REMOTE_FAILED = "COPY_REMOTE_FAILED"


#: The ``ExecErrorCode`` each problem is reported with: a local mistake is ``EXEC_INVALID``
#: (nothing was sent); everything the container or the connection did is ``EXEC_FAILED``.
_CODES = {CopyProblem.LOCAL_PATH: ExecErrorCode.INVALID}


class CopyError(ExecError):
    """A copy that failed; ``problem`` says why, ``code`` is the matching ``ExecErrorCode``.

    The message names the path concerned and, for a remote failure, the first line of the
    remote command's stderr; it never holds file contents.
    """

    problem: CopyProblem

    def __init__(self, problem: CopyProblem, message: str) -> None:
        super().__init__(_CODES.get(problem, ExecErrorCode.FAILED), f"copy: {message}")
        self.problem = CopyProblem(problem)

    def __repr__(self) -> str:
        return f"CopyError({self.problem.value!r}, {self.message!r})"
