"""``execute``'s accounting: per-stream caps over a session, and its result.

The seed's ``collect``.

Output is written into one growing buffer per stream (linear, never quadratic; handed over
without a final copy), and never more than the cap: the first byte over a stream's cap ends the
run with ``ExecOutputLimitError``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Literal

import attrs

from ._channels import Channel, Message
from ._errors import ExecError, ExecErrorCode, ExecOutputLimitError, StreamName
from ._frames import Error, Exit, Stderr, Stdin, Stdout
from ._session import NEED_DATA, SESSION_ENDED, ExecSession, SessionSignal
from ._subprotocols import DEFAULT_SUBPROTOCOLS, Subprotocol
from ._target import ResolvedTarget
from .supervision import Supervision

__all__ = ["ExecResult", "ExecuteRun", "OutputBuffer"]


@attrs.frozen(kw_only=True, repr=False)
class ExecResult:
    """What ``execute`` returns: the target, the exit, and the captured bytes."""

    target: ResolvedTarget
    exit_code: int
    reason: str | None
    message: str | None
    stdout: bytes
    stderr: bytes

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8, invalid sequences replaced (as the seed's TextDecoder)."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8, invalid sequences replaced."""
        return self.stderr.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.exit_code == 0

    def __repr__(self) -> str:
        return (
            f"ExecResult(pod={self.target.pod!r}, container={self.target.container!r}, "
            f"exit_code={self.exit_code}, stdout=<{len(self.stdout)} bytes>, "
            f"stderr=<{len(self.stderr)} bytes>)"
        )


class OutputBuffer:
    """One stream's captured output, bounded by ``cap`` bytes.

    The bytes are written into one growing buffer (``io.BytesIO``, in memory), whose
    ``getvalue()`` hands that buffer over without copying it: capturing N bytes peaks at about
    N bytes (plus the buffer's growth slack), not the 2 N of keeping chunks and joining them.
    """

    def __init__(self, stream: StreamName, cap: int) -> None:
        self.stream: StreamName = stream
        self.cap = cap
        self.size = 0
        self._buffer = io.BytesIO()

    def add(self, data: bytes | memoryview) -> None:
        """Keep ``data``, or raise ``ExecOutputLimitError`` if it would pass the cap."""
        if self.size + len(data) > self.cap:
            raise ExecOutputLimitError(self.stream, self.cap)
        self.size += len(data)
        self._buffer.write(data)

    def getvalue(self) -> bytes:
        """Everything kept, as one bytes object (no copy while nothing else holds the buffer)."""
        return self._buffer.getvalue()


class ExecuteRun:
    """One non-interactive exec: stdin (sent whole, then closed), capped output, the result.

    Drive it like a session: ``stdin_messages()`` once after connecting, then feed received
    messages until ``next_event()`` returns an :class:`ExecResult` (or raises). ``supervision``:
    the command runs under that supervision's prologue (see :class:`ExecSession`).
    """

    def __init__(
        self,
        target: ResolvedTarget,
        subprotocol: Subprotocol,
        *,
        stdout_cap: int,
        stderr_cap: int,
        stdin: bytes | None = None,
        supervision: Supervision | None = None,
    ) -> None:
        self.target = target
        self.session = ExecSession(
            subprotocol, tty=False, stdin=stdin is not None, supervision=supervision
        )
        self._stdin = stdin
        self._stdout = OutputBuffer("stdout", stdout_cap)
        self._stderr = OutputBuffer("stderr", stderr_cap)
        self._failure: ExecError | None = None

    @staticmethod
    def subprotocols(
        *, stdin: bool, offer: Sequence[Subprotocol] = DEFAULT_SUBPROTOCOLS
    ) -> tuple[Subprotocol, ...]:
        """What to offer out of ``offer``: with stdin only v5, so that the command never starts
        on a server that could not deliver its end of input (v4 cannot signal stdin EOF).

        Raises:
            ExecError: ``EXEC_INVALID`` for stdin when ``offer`` has no v5.
        """
        if not stdin:
            return tuple(offer)
        if Subprotocol.V5 not in offer:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"execute with stdin needs {Subprotocol.V5.value} (older subprotocols cannot "
                "close stdin), which is not among the offered subprotocols: "
                + ", ".join(protocol.value for protocol in offer),
            )
        return (Subprotocol.V5,)

    def stdin_messages(self) -> list[Message]:
        """The stdin bytes as messages, then the v5 close; empty without stdin."""
        if self._stdin is None:
            return []
        return self.session.send(Stdin(self._stdin, eof=True))

    def receive_message(self, message: Message) -> None:
        """Feed one received WebSocket message."""
        self.session.receive_message(message)

    def connection_closed(self, *, clean: bool, reason: str | None = None) -> None:
        """The transport ended (``clean``: a Close frame arrived; ``reason``: why, if known)."""
        self.session.connection_closed(clean=clean, reason=reason)

    def next_event(self) -> ExecResult | Literal[SessionSignal.NEED_DATA]:
        """``NEED_DATA`` or the result.

        Raises:
            ExecOutputLimitError: a stream passed its cap (at its first excess byte).
            ExecError: the status was a failure, or the connection ended without one.

        A raised error is final: later calls raise it again. (Carrying on after the limit error
        would drop the excess chunk and return a truncated result as if it were complete.)
        """
        if self._failure is not None:
            raise self._failure
        try:
            return self._next_event()
        except ExecError as error:
            self._failure = error
            raise

    def _next_event(self) -> ExecResult | Literal[SessionSignal.NEED_DATA]:
        session = self.session
        while True:
            # Output straight from the message into its buffer: one copy, not two.
            while (output := session.take_output()) is not None:
                channel, view = output
                (self._stdout if channel == Channel.STDOUT else self._stderr).add(view)
            event = session.next_event()
            if event is NEED_DATA:
                return NEED_DATA
            if isinstance(event, Stdout):
                self._stdout.add(event.data)
            elif isinstance(event, Stderr):
                self._stderr.add(event.data)
            elif isinstance(event, Exit):
                return ExecResult(
                    target=self.target,
                    exit_code=event.exit_code,
                    reason=event.reason,
                    message=event.message,
                    stdout=self._stdout.getvalue(),
                    stderr=self._stderr.getvalue(),
                )
            elif isinstance(event, Error):
                raise event.to_exception()
            elif event is SESSION_ENDED:
                raise ExecError(ExecErrorCode.ABORTED, "Exec request was aborted")
