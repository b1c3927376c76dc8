"""``kuber-exec cp``: from parsed options to one copy through the library.

Contract of :func:`run_copy`: the backend is opened as for ``exec`` (the in-process sandbox,
or a kubeconfig context) and the copy goes through ``copy_to_pod`` / ``copy_from_pod`` on an
:class:`~kuber_exec_asyncio.ExecService`, so the target is resolved and its ownership checked as
for any exec. It returns 0 when the copy is complete and checked, 1 for a ``CopyError`` (after
the one ``kuber-exec: COPY_<PROBLEM>: message`` line), and raises ``ExecError`` for everything
else (exit status 125, reported by the supervisor).
"""

from __future__ import annotations

import os
import time
from typing import BinaryIO

from kuber_exec_asyncio import (
    CopyError,
    CopyResult,
    CopyTarget,
    ExecService,
    copy_from_pod,
    copy_to_pod,
)

from ._arguments import CopyOptions
from ._cluster import open_backend
from ._local import LocalStreams

__all__ = ["EXIT_COPY_FAILED", "ProgressBar", "run_copy"]

#: The exit status of a copy that failed (its problem on stderr); 125 stays kuber-exec's own.
EXIT_COPY_FAILED = 1


class ProgressBar:
    """A one-line progress bar on a terminal, redrawn at most ten times a second."""

    def __init__(self, stream: BinaryIO, label: str) -> None:
        self._stream = stream
        self._label = label
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._last = ""

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self._drawn_at < 0.1 and done != total:
            return
        self._drawn_at = now
        self._draw(done, total, now)

    def _draw(self, done: int, total: int | None, now: float) -> None:
        elapsed = max(now - self._started, 1e-6)
        rate = f"{_size(done / elapsed)}/s"
        if total:
            fraction = min(done / total, 1.0)
            filled = int(fraction * 24)
            bar = "#" * filled + "-" * (24 - filled)
            line = f"{self._label} [{bar}] {fraction:4.0%} {_size(done)}/{_size(total)} {rate}"
        else:
            line = f"{self._label} {_size(done)} {rate}"
        self._last = line
        self._write(f"\r{line}\x1b[K")

    def finish(self) -> None:
        """End the bar's line (only if one was drawn)."""
        if self._last:
            self._write("\n")

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text.encode("utf-8", "replace"))
            self._stream.flush()
        except OSError:
            pass


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _wants_progress(options: CopyOptions, streams: LocalStreams) -> bool:
    if options.progress is not None:
        return options.progress
    try:
        return os.isatty(streams.stderr.fileno())
    except (OSError, ValueError):
        return False


async def run_copy(options: CopyOptions, streams: LocalStreams) -> int:
    """``kuber-exec cp``: connect as ``options`` says and copy once; see the module."""
    target = CopyTarget(options.workspace, options.deployment, options.container)
    label = os.path.basename(options.local_path if options.upload else options.remote_path)
    bar = (
        ProgressBar(streams.stderr, label or "copy") if _wants_progress(options, streams) else None
    )
    async with open_backend(options) as backend:
        service = ExecService(backend, subprotocols=options.subprotocols or None)
        try:
            try:
                result: CopyResult
                if options.upload:
                    result = await copy_to_pod(
                        service, target, options.local_path, options.remote_path, progress=bar
                    )
                else:
                    result = await copy_from_pod(
                        service,
                        target,
                        options.remote_path,
                        options.local_path,
                        overwrite=options.overwrite,
                        retries=options.retries,
                        progress=bar,
                    )
            finally:
                if bar is not None:
                    bar.finish()
        except CopyError as error:
            _say(streams, f"kuber-exec: {error.problem.value}: {error.message}")
            return EXIT_COPY_FAILED
    if not result.sha256_verified:
        _say(
            streams,
            "kuber-exec: warning: the container has no sha256sum; only the size "
            f"({result.size} bytes) was checked",
        )
    for skipped in result.skipped:
        _say(streams, f"kuber-exec: skipped {skipped}")
    return 0


def _say(streams: LocalStreams, line: str) -> None:
    try:
        streams.stderr.write(f"{line}\n".encode("utf-8", "replace"))
        streams.stderr.flush()
    except OSError:
        pass
