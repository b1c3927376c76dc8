"""Incremental splitting of a JSON-lines stream (a Kubernetes watch body) into lines.

A watch answers with one JSON object per line. The bytes arrive in reads of any size: a line may be
split anywhere (inside a UTF-8 sequence too) and one read may hold many lines. The decoder keeps
only the unfinished tail, and bounds it: a peer that never sends a newline cannot make it grow
without limit.
"""

from __future__ import annotations

from ._errors import ExecError, ExecErrorCode

__all__ = ["DEFAULT_MAX_WATCH_LINE_BYTES", "JsonLinesDecoder"]

#: One watch event is one object: etcd refuses objects over 1.5 MiB, and the JSON of a watch event
#: is that object plus a few bytes. 8 MiB leaves room for any real object while bounding a
#: broken peer.
DEFAULT_MAX_WATCH_LINE_BYTES = 8 * 1024 * 1024


class JsonLinesDecoder:
    """Feed bytes, get back the complete lines (without their newline); blank lines are skipped.

    Raises:
        ExecError: ``EXEC_FAILED`` from :meth:`feed` when a line exceeds ``max_line_bytes``
            (counted without its newline). The decoder is then reset (its tail dropped).
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_WATCH_LINE_BYTES) -> None:
        if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int):
            raise ExecError(ExecErrorCode.INVALID, "max_line_bytes must be a positive integer")
        if max_line_bytes <= 0:
            raise ExecError(ExecErrorCode.INVALID, "max_line_bytes must be a positive integer")
        self._max = max_line_bytes
        self._buffer = bytearray()
        # Where the newline search resumes: the bytes before it are known to hold none, so many
        # small reads of one long line cost linear time, not quadratic.
        self._scanned = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes of the unfinished line held so far."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return every line it completed, in order."""
        buffer = self._buffer
        buffer += data
        lines: list[bytes] = []
        start = 0
        search = self._scanned
        while True:
            end = buffer.find(b"\n", search)
            if end < 0:
                break
            if end - start > self._max:
                self.reset()
                raise self._too_long()
            line = bytes(buffer[start:end])
            if line.strip():
                lines.append(line)
            start = search = end + 1
        if start:
            # One deletion per feed, not one per line: slicing the front off a bytearray moves
            # the rest.
            del buffer[:start]
        self._scanned = len(buffer)
        if len(buffer) > self._max:
            self.reset()
            raise self._too_long()
        return lines

    def reset(self) -> bytes:
        """Drop (and return) the unfinished tail: the stream it belonged to is over."""
        tail = bytes(self._buffer)
        self._buffer = bytearray()
        self._scanned = 0
        return tail

    def _too_long(self) -> ExecError:
        return ExecError(
            ExecErrorCode.FAILED,
            f"A Kubernetes watch event exceeds the {self._max}-byte line limit",
        )
