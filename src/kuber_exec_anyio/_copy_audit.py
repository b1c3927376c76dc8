"""The audit trail of one copy: a ``started`` and an ``ended`` ``AuditEvent`` of kind ``copy``.

A copy runs two or more execs (a probe, the transfer, a retry), each audited as usual by the
service; this record adds the copy's own pair, with what moved: direction, paths, bytes, the
sha256 and whether the container confirmed it, and the outcome.
"""

from __future__ import annotations

import datetime
import logging
import time
import uuid
from typing import Literal

from kuber_exec_core import ExecError, ExecErrorCode, ResolvedTarget, Workspace

from ._audit import AuditEvent, AuditHook

__all__ = ["CopyAudit"]

logger = logging.getLogger("kuber_exec")

Direction = Literal["upload", "download"]


class CopyAudit:
    """Builds and emits one copy's two events through ``hook`` (nothing when it is ``None``)."""

    def __init__(
        self,
        hook: AuditHook | None,
        *,
        direction: Direction,
        workspace: Workspace,
        deployment: str,
        container: str | None,
        local_path: str | None,
        remote_path: str,
    ) -> None:
        self._hook = hook
        self._direction: Direction = direction
        self._workspace = workspace
        self._deployment = deployment
        self._container = container
        self._local_path = local_path
        self.remote_path = remote_path
        self._session_id = uuid.uuid4().hex
        self._started_at = datetime.datetime.now(datetime.UTC)
        self._monotonic = time.monotonic()
        self._target: ResolvedTarget | None = None
        self._ended = False

    def started(self, target: ResolvedTarget) -> None:
        """The container was reached (the probe ran): emit ``started``."""
        self._target = target
        self._emit("started", {})

    def succeeded(self, *, size: int, sha256: str, verified: bool) -> None:
        """Emit ``ended`` with ``outcome="exit"`` and exit code 0."""
        self._end(outcome="exit", exit_code=0, size=size, sha256=sha256, verified=verified)

    def failed(self, error: BaseException, *, size: int) -> None:
        """Emit ``ended`` with ``outcome="error"`` for ``error`` (``EXEC_ABORTED`` when it is
        a cancellation)."""
        if isinstance(error, ExecError):
            code, message = error.code, error.message
        elif isinstance(error, Exception):
            code, message = ExecErrorCode.FAILED, f"{type(error).__name__}: {error}"
        else:
            code, message = ExecErrorCode.ABORTED, "cancelled"
        self._end(outcome="error", error_code=code, error_message=message, size=size)

    def _end(
        self,
        *,
        size: int,
        sha256: str | None = None,
        verified: bool | None = None,
        **fields: object,
    ) -> None:
        if self._ended:
            return
        self._ended = True
        moved = {"bytes_in": size} if self._direction == "upload" else {"bytes_out": size}
        self._emit(
            "ended",
            {
                **fields,
                **moved,
                "sha256": sha256,
                "sha256_verified": verified,
                "duration_seconds": time.monotonic() - self._monotonic,
            },
        )

    def _emit(self, phase: Literal["started", "ended"], fields: dict[str, object]) -> None:
        if self._hook is None:
            return
        target = self._target
        try:
            event = AuditEvent(
                kind="copy",
                phase=phase,
                session_id=self._session_id,
                workspace=self._workspace,
                deployment=self._deployment,
                pod=None if target is None else target.pod,
                container=self._container if target is None else target.container,
                command=("copy", self._direction),
                tty=False,
                started_at=self._started_at,
                direction=self._direction,
                local_path=self._local_path,
                remote_path=self.remote_path,
                **fields,  # type: ignore[arg-type]
            )
            self._hook(event)
        except Exception:
            logger.exception("the audit hook failed on a copy's %s event (the copy goes on)", phase)
