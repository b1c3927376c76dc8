"""The status channel (3): parse what a server reports, and build what a server sends.

docs/protocol.md. v4/v5 send one ``metav1.Status`` JSON: ``Success`` is exit 0;
``NonZeroExitCode`` carries the code in the ``details.causes[]`` entry whose ``reason`` is
``ExitCode`` (wherever it is in the list: taking ``causes[0]`` is a peer's bug); anything else is a
failure to run (``EXEC_FAILED`` with the Status message). Pre-v4 subprotocols send plain text on
failure and nothing on success. A message that quotes a supervised argv quotes the user's
argv only (``_server_text``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._errors import ExecErrorCode
from ._frames import Error, Exit
from ._server_text import without_start_prologue
from ._state import STREAM_END_FAILURES, StreamEnd, stream_end_failure
from ._subprotocols import Subprotocol

__all__ = [
    "MAX_STATUS_BYTES",
    "NON_ZERO_EXIT_CODE_REASON",
    "StatusStream",
    "parse_status",
    "status_exit_code",
    "status_failure",
    "status_success",
]

NON_ZERO_EXIT_CODE_REASON = "NonZeroExitCode"
_EXIT_CODE_CAUSE = "ExitCode"
# strconv.Atoi-like, bounded so a hostile status cannot make a huge int.
_EXIT_CODE = re.compile(r"[+-]?[0-9]{1,10}")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _exit_code_from_causes(details: object) -> int | None:
    if not isinstance(details, dict):
        return None
    causes = details.get("causes")
    if not isinstance(causes, list):
        return None
    for cause in causes:
        if isinstance(cause, dict) and cause.get("reason") == _EXIT_CODE_CAUSE:
            message = cause.get("message")
            if isinstance(message, str) and _EXIT_CODE.fullmatch(message.strip()):
                return int(message.strip())
    return None


def parse_status(subprotocol: Subprotocol, payload: bytes) -> Exit | Error:
    """Turn a non-empty channel-3 payload into the session's terminal frame.

    Never raises: a payload that is not a Status object is reported as an ``EXEC_FAILED`` error
    frame that quotes no more than the start of it.
    """
    if not subprotocol.has_structured_status:
        text = without_start_prologue(payload.decode("utf-8", errors="replace").strip())
        return Error(ExecErrorCode.FAILED, text or STREAM_END_FAILURES[StreamEnd.UNEXPLAINED])
    try:
        status: Any = json.loads(payload)
    except (ValueError, RecursionError):
        status = None
    return _status_frame(status, payload)


def _status_frame(status: Any, payload: bytes) -> Exit | Error:
    # ``status``: ``payload`` as parsed JSON (None when it was not JSON).
    if not isinstance(status, dict):
        preview = bytes(payload[:200]).decode("utf-8", errors="replace")
        return Error(
            ExecErrorCode.FAILED,
            f"Kubernetes exec protocol error: the status was not a Status object: {preview!r}",
        )
    message = _text(status.get("message"))
    if message:
        message = without_start_prologue(message)
    reason = _text(status.get("reason"))
    if status.get("status") == "Success":
        return Exit(0, reason, message)
    if reason == NON_ZERO_EXIT_CODE_REASON:
        code = _exit_code_from_causes(status.get("details"))
        if code is not None:
            return Exit(code, reason, message)
    code = status.get("code")
    return Error(
        ExecErrorCode.FAILED,
        message or reason or STREAM_END_FAILURES[StreamEnd.UNEXPLAINED],
        status_reason=reason,
        status_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
    )


#: A Status is a few hundred bytes; more than this on channel 3 is not one (bounded buffering).
MAX_STATUS_BYTES = 1024 * 1024

_WHITESPACE = frozenset(b" \t\r\n")
_OPEN_BRACE, _CLOSE_BRACE, _QUOTE, _BACKSLASH = b'{}"\\'


class StatusStream:
    """Channel 3 as the byte stream it is (docs/protocol.md): a Status may arrive in any number of
    messages, split at any byte.

    v4/v5: the payloads are accumulated and the Status is parsed as soon as they form a whole
    JSON object (a brace-depth scan that knows strings and escapes, linear in the bytes), so a
    server that sends its Status and never closes still ends the run. Bytes that cannot start an
    object are a protocol error at once; an incomplete object waits for more or for
    :meth:`finish`. Pre-v4: failure text has no end marker, so it is accumulated until
    :meth:`finish` (the connection's end). Never more than :data:`MAX_STATUS_BYTES` is kept.
    """

    def __init__(self, subprotocol: Subprotocol) -> None:
        self.subprotocol = subprotocol
        self._buffer = bytearray()
        self._started = False
        self._depth = 0
        self._in_string = False
        self._escaped = False

    @property
    def pending(self) -> bool:
        """Whether status bytes arrived and no terminal frame was decided yet."""
        return bool(self._buffer)

    def feed(self, payload: bytes) -> Exit | Error | None:
        """Add one channel-3 payload; the terminal frame once the Status is whole, else None."""
        if len(self._buffer) + len(payload) > MAX_STATUS_BYTES:
            return Error(
                ExecErrorCode.FAILED,
                f"Kubernetes exec protocol error: the status exceeds {MAX_STATUS_BYTES} bytes",
            )
        start = len(self._buffer)
        self._buffer += payload
        if not self.subprotocol.has_structured_status:
            return None
        if start == 0:
            # The usual case, a whole Status in one message: parsed at once, without the
            # byte-by-byte scan (a Python loop over a few hundred bytes). A payload that parses
            # is exactly what the scan would have judged whole; anything else is scanned.
            try:
                status: Any = json.loads(payload)
            except (ValueError, RecursionError):
                pass
            else:
                return _status_frame(status, payload)
        if self._scan(start):
            # The whole of the current message is parsed with the object, so that one-message
            # statuses are judged exactly as before (trailing bytes included).
            return parse_status(self.subprotocol, bytes(self._buffer))
        return None

    def finish(self, reason: str | None = None) -> Exit | Error | None:
        """The stream ended: the terminal frame for what accumulated, or None if nothing did."""
        if not self._buffer:
            return None
        if not self.subprotocol.has_structured_status:
            return parse_status(self.subprotocol, bytes(self._buffer))
        preview = bytes(self._buffer[:200]).decode("utf-8", errors="replace")
        return Error(
            ExecErrorCode.FAILED,
            stream_end_failure(
                StreamEnd.STATUS_CUT, reason, size=len(self._buffer), preview=repr(preview)
            ),
        )

    def _scan(self, start: int) -> bool:
        """Scan the bytes from ``start``; True when the buffer holds a whole object, or bytes
        that cannot be the start of one (both are decided by parsing)."""
        buffer = self._buffer
        for index in range(start, len(buffer)):
            byte = buffer[index]
            if not self._started:
                if byte in _WHITESPACE:
                    continue
                if byte != _OPEN_BRACE:
                    return True
                self._started = True
                self._depth = 1
            elif self._in_string:
                if self._escaped:
                    self._escaped = False
                elif byte == _BACKSLASH:
                    self._escaped = True
                elif byte == _QUOTE:
                    self._in_string = False
            elif byte == _QUOTE:
                self._in_string = True
            elif byte == _OPEN_BRACE or byte == 0x5B:  # '{' or '['
                self._depth += 1
            elif byte == _CLOSE_BRACE or byte == 0x5D:  # '}' or ']'
                self._depth -= 1
                if self._depth == 0:
                    return True
        return False


def _go_json(value: object) -> bytes:
    # encoding/json's HTML-safe escaping, as a real server writes it (docs/protocol.md).
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text.encode("utf-8")


def status_success() -> bytes:
    """The Status a v4/v5 server sends when the command exits 0."""
    return _go_json({"metadata": {}, "status": "Success"})


def status_exit_code(exit_code: int, message: str | None = None) -> bytes:
    """The Status a v4/v5 server sends when the command exits non-zero."""
    text = message or f"command terminated with non-zero exit code: exit status {exit_code}"
    return _go_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": text,
            "reason": NON_ZERO_EXIT_CODE_REASON,
            "details": {"causes": [{"reason": _EXIT_CODE_CAUSE, "message": str(exit_code)}]},
        }
    )


def status_failure(message: str) -> bytes:
    """The Status a v4/v5 server sends when the command could not run (``InternalError``)."""
    return _go_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {message}",
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }
    )
