"""The status channel (3): parse what a server reports, and build what a server sends.

protocol.md §4. v4/v5 send one ``metav1.Status`` JSON: ``Success`` is exit 0;
``NonZeroExitCode`` carries the code in the ``details.causes[]`` entry whose ``reason`` is
``ExitCode`` (wherever it is in the list: taking ``causes[0]`` is a peer's bug); anything else is a
failure to run (``EXEC_FAILED`` with the Status message). Pre-v4 subprotocols send plain text on
failure and nothing on success.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ._errors import ExecErrorCode
from ._frames import Error, Exit
from ._subprotocols import Subprotocol

__all__ = [
    "NON_ZERO_EXIT_CODE_REASON",
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
        text = payload.decode("utf-8", errors="replace").strip()
        return Error(ExecErrorCode.FAILED, text or "Kubernetes exec failed")
    try:
        status: Any = json.loads(payload)
    except (ValueError, RecursionError):
        status = None
    if not isinstance(status, dict):
        preview = payload[:200].decode("utf-8", errors="replace")
        return Error(
            ExecErrorCode.FAILED,
            f"Kubernetes exec protocol error: the status was not a Status object: {preview!r}",
        )
    message = _text(status.get("message"))
    reason = _text(status.get("reason"))
    if status.get("status") == "Success":
        return Exit(0, reason, message)
    if reason == NON_ZERO_EXIT_CODE_REASON:
        code = _exit_code_from_causes(status.get("details"))
        if code is not None:
            return Exit(code, reason, message)
    return Error(ExecErrorCode.FAILED, message or reason or "Kubernetes exec failed")


def _go_json(value: object) -> bytes:
    # encoding/json's HTML-safe escaping, as a real server writes it (protocol.md §4: `\u003e`).
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
