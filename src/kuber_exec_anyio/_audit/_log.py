"""``JsonLinesAuditLog``: an audit hook that appends events to a file, one JSON object per line.

Calling it never blocks the event loop: events go into a bounded queue that a daemon thread
writes out. The event schema is :meth:`AuditEvent.to_dict`.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from pathlib import Path

from kuber_exec_core import ExecError, ExecErrorCode

from ._record import AuditEvent

__all__ = ["JsonLinesAuditLog"]

logger = logging.getLogger("kuber_exec")


class JsonLinesAuditLog:
    """An audit hook that appends each event to ``path`` as one JSON object per line.

    Calling it never blocks the event loop: the event goes into an in-memory queue of at most
    ``max_pending`` events, which a daemon thread writes out (flushing whenever the queue runs
    empty). When the queue is full (the disk is slower than the sessions), the event is dropped,
    counted in :attr:`dropped` and a warning is logged. The file is created with mode 0600 and
    appended to. Use it as a context manager, or call :meth:`close`, to write what is pending.
    Each line is :meth:`AuditEvent.to_dict`.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_pending: int = 10_000) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending <= 0:
            raise ExecError(ExecErrorCode.INVALID, "max_pending must be a positive integer")
        self.path = Path(path)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(descriptor, "a", encoding="utf-8")
        self._queue: queue.Queue[AuditEvent | None] = queue.Queue(max_pending)
        self._closed = False
        #: Events dropped because the queue was full (or the log closed).
        self.dropped = 0
        self._thread = threading.Thread(target=self._write_loop, name="kuber-exec-audit")
        self._thread.daemon = True
        self._thread.start()

    def __repr__(self) -> str:
        return f"JsonLinesAuditLog({str(self.path)!r}, pending={self._queue.qsize()})"

    def __call__(self, event: AuditEvent) -> None:
        """Queue ``event`` for writing; never blocks."""
        if self._closed:
            self._drop("the audit log is closed")
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._drop("the audit log's queue is full (the disk is behind)")

    def _drop(self, why: str) -> None:
        self.dropped += 1
        # 1, 2, 4, 8, ...: a flood of drops does not become a flood of warnings.
        if self.dropped & (self.dropped - 1) == 0:
            logger.warning(
                "audit event dropped: %s; %d dropped so far (%s)", why, self.dropped, self.path
            )

    def flush(self) -> None:
        """Block until every queued event is written and flushed (call it off the event loop)."""
        self._queue.join()

    def close(self) -> None:
        """Write what is queued, stop the thread and close the file; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self._file.close()

    def __enter__(self) -> JsonLinesAuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_loop(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                self._write(event)
            except Exception:
                logger.exception("could not write an audit event to %s", self.path)
            finally:
                self._queue.task_done()

    def _write(self, event: AuditEvent) -> None:
        self._file.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
        if self._queue.empty():
            self._file.flush()
