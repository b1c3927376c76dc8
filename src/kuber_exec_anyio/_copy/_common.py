"""Files into and out of a workspace's pods: ``copy_to_pod``, ``copy_from_pod`` and streams.

Each copy is ordinary execs through an :class:`ExecService` (so the same targeting, ownership
checks, limits and audit apply as to any exec): a probe (what the remote path is, whether the
image has ``tar`` and ``sha256sum``), then one transfer (``_transfer``) whose stdin or
stdout carries the bytes, as ``dd count=N`` (or ``head -c N``) into a file, ``tar x`` of a
measured archive, ``cat`` or ``tail -c +N`` of a file or ``tar c`` of a directory
(``kuber_exec_core.copy`` has the scripts).

What every copy guarantees:

- **Memory** is flat, whatever the size: bounded frames each way, backpressure both ways.
- **Size** is always checked; the **sha256** of the bytes moved (the file's, or the tar
  stream's for a directory) is compared with the container's when it has ``sha256sum``
  (:attr:`CopyResult.sha256_verified` says whether it did).
- **v4** works: an upload is delimited by its size, since v4 cannot close stdin.
- A file **download resumes** from the last byte received after a lost connection or a stream
  cut short under a clean end (``retries`` times); a directory starts over, then fails with
  ``CONNECTION_LOST``.
- An archive from the container is extracted through the core's ``ExtractionPolicy``: nothing
  is written outside the new directory (``..``, absolute names, links, devices, setuid).
- Errors are :class:`CopyError` with a :class:`CopyProblem`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from kuber_exec_core import (
    Error,
    ExecRequest,
    Impersonation,
    Workspace,
)
from kuber_exec_core.copy import (
    CopyError,
    CopyProblem,
    Probe,
    Summary,
    first_line,
    parse_probe,
    probe_command,
    problem_of,
)

from .._audit._record import AuditRecord, CopyPaths
from .._service import ExecService
from ._transfer import Transfer

__all__ = [
    "DEFAULT_COPY_RETRIES",
    "CopyProgress",
    "CopyResult",
    "CopyTarget",
    "Moved",
    "copy_audit",
    "probe_path",
    "transfer_failure",
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
        retries: reconnections a download needed (resumptions of a file, new starts of a
            directory).
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


def copy_audit(service: ExecService, target: CopyTarget, paths: CopyPaths) -> AuditRecord:
    """The copy's own audit record (``kind="copy"``, through the service's hook), besides the
    records of the execs it runs."""
    return AuditRecord.for_copy(service.audit, target.request(("copy", paths.direction)), paths)


async def probe_path(
    service: ExecService, target: CopyTarget, path: str, audit: AuditRecord
) -> Probe:
    """What ``path`` is in the container and which tools it has (one exec); ``audit`` gets its
    ``started`` event once the target is reached.

    Raises:
        CopyError: ``REMOTE_FAILED`` when the probe could not run.
        ExecError: as ``ExecService.execute``.
    """
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


def transfer_failure(transfer: Transfer, summary: Summary, where: str) -> CopyError:
    """The error of a transfer that did not exit cleanly: ``CONNECTION_LOST`` when the
    connection ended without the command's status, else the problem its messages name."""
    final = transfer.final
    if isinstance(final, Error) or final is None:
        reason = "the connection ended" if final is None else final.message
        return CopyError(CopyProblem.CONNECTION_LOST, f"{where}: {reason}")
    problem = problem_of(summary.messages)
    return CopyError(problem, f"{where}: {first_line(summary.messages)}")


@attrs.define
class Moved:
    """The bytes a copy has moved so far (its audit reports them when it fails)."""

    moved: int = 0
