"""Frames: what a client sends into an interactive session, and what a session yields.

Client frames are inputs (``Stdin``, ``Resize``, ``Close``); server frames are the seed's
``ExecServerFrame`` (``Stdout``, ``Stderr``, then exactly one terminal ``Exit`` or ``Error``).
Payloads are ``bytes``, untouched: nothing is decoded as text on the way.
"""

from __future__ import annotations

import attrs

from ._errors import ExecError, ExecErrorCode

__all__ = [
    "ClientFrame",
    "Close",
    "Error",
    "Exit",
    "Resize",
    "ServerFrame",
    "Stderr",
    "Stdin",
    "Stdout",
    "TerminalFrame",
    "stdin_bytes",
]

_REPR_PREVIEW = 32


def _short(data: bytes) -> str:
    if len(data) <= _REPR_PREVIEW:
        return repr(data)
    return f"<{len(data)} bytes: {data[:_REPR_PREVIEW]!r}…>"


def stdin_bytes(value: object) -> bytes:
    """``value`` as stdin bytes: bytes-like as is, ``str`` as UTF-8; else ``EXEC_INVALID``."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise ExecError(
                ExecErrorCode.INVALID, "stdin data must be valid Unicode text or bytes"
            ) from None
    raise ExecError(ExecErrorCode.INVALID, "stdin data must be a string or bytes")


def _flag(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise ExecError(
            ExecErrorCode.INVALID,
            f"{attribute.name} must be True or False, not {type(value).__name__}",
        )


class ClientFrame:
    """Base of the frames a client sends into an interactive session."""

    __slots__ = ()


class ServerFrame:
    """Base of the frames an interactive session yields."""

    __slots__ = ()


@attrs.frozen(repr=False)
class Stdin(ClientFrame):
    """Bytes for the process's stdin (``str`` is encoded as UTF-8); ``eof`` closes stdin after.

    Closing stdin needs ``v5.channel.k8s.io``; on older subprotocols it raises ``EXEC_INVALID``.
    """

    data: bytes = attrs.field(default=b"", converter=stdin_bytes)
    eof: bool = attrs.field(default=False, validator=_flag)

    def __repr__(self) -> str:
        return f"Stdin(data={_short(self.data)}, eof={self.eof})"


@attrs.frozen
class Resize(ClientFrame):
    """The terminal's new size; TTY sessions only, each value 1..65535."""

    columns: int
    rows: int


@attrs.frozen
class Close(ClientFrame):
    """End the session from the client side: no further frames are yielded."""


@attrs.frozen(repr=False)
class Stdout(ServerFrame):
    """Bytes the process wrote to stdout (with a TTY: everything, after the line discipline)."""

    data: bytes

    def __repr__(self) -> str:
        return f"Stdout(data={_short(self.data)})"


@attrs.frozen(repr=False)
class Stderr(ServerFrame):
    """Bytes the process wrote to stderr (never on TTY sessions)."""

    data: bytes

    def __repr__(self) -> str:
        return f"Stderr(data={_short(self.data)})"


@attrs.frozen
class Exit(ServerFrame):
    """The process ended: ``exit_code`` 0 on success; ``reason``/``message`` from the Status."""

    exit_code: int
    reason: str | None = None
    message: str | None = None


@attrs.frozen
class Error(ServerFrame):
    """The session failed; ``code`` and ``message`` as :class:`~kuber_exec_core.ExecError`.

    ``status_reason`` and ``status_code`` are the server's Status ``reason`` and ``code`` when
    the server reported the failure (``InternalError``, 500 for a command that could not start);
    ``None`` for a failure decided here. They do not take part in equality.
    """

    code: ExecErrorCode
    message: str
    status_reason: str | None = attrs.field(default=None, eq=False, kw_only=True)
    status_code: int | None = attrs.field(default=None, eq=False, kw_only=True)

    def to_exception(self) -> ExecError:
        """The :class:`ExecError` this frame stands for."""
        return ExecError(
            self.code,
            self.message,
            status_reason=self.status_reason,
            status_code=self.status_code,
        )


TerminalFrame = Exit | Error
