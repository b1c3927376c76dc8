"""The error a broken port-forward peer or a failed forwarded connection raises."""

from __future__ import annotations

from .._errors import ExecError, ExecErrorCode

__all__ = ["PortForwardProtocolError"]


class PortForwardProtocolError(ExecError):
    """The peer broke the SPDY/3.1 tunnel or the legacy channel protocol; always
    ``EXEC_FAILED``. The session it came from is over: nothing more may be fed to it."""

    def __init__(self, message: str) -> None:
        super().__init__(ExecErrorCode.FAILED, f"port-forward protocol error: {message}")
