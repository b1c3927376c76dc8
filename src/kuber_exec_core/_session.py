"""The client side of one exec connection, as a pull-style state machine.

Feed it what the transport delivers (``receive_message``, ``connection_closed``) and pull events
with ``next_event`` (each event applies its own state change when it is returned, as in h11).
Client actions go through ``send``, which validates the frame against the state table and the
subprotocol and returns the WebSocket messages to write, or raises ``ExecError`` having written
nothing. ``end`` ends the session locally (a limit, the caller) with an ``Error`` of the caller's
as its terminal frame. The session never blocks, never buffers more than the messages fed to it,
and never decodes output as text. It owns every way a session ends: the layers above read its
``state``, ``final_frame`` and byte counts instead of keeping their own.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from typing import Literal

from ._channels import (
    CLOSE_STDIN_PAYLOAD,
    MAX_CLIENT_PAYLOAD_BYTES,
    Channel,
    Message,
    decode_message,
    encode_message,
)
from ._errors import ExecError, ExecErrorCode, ExecProtocolError
from ._frames import ClientFrame, Close, Error, Exit, Resize, ServerFrame, Stderr, Stdin, Stdout
from ._state import (
    GUARD_REFUSALS,
    GUARDS,
    LOCAL_END_REFUSAL,
    MAX_TERMINAL_DIMENSION,
    REFUSALS,
    TERMINAL_STATES,
    TRANSITIONS,
    Guard,
    SessionInput,
    SessionState,
    StreamEnd,
    stream_end_failure,
)
from ._status import StatusStream
from ._subprotocols import Subprotocol
from .supervision import StartMark, Supervision

__all__ = ["NEED_DATA", "SESSION_ENDED", "ExecSession", "SessionSignal", "chunk_stdin"]


class SessionSignal(enum.Enum):
    """What ``next_event`` returns when it has no frame to give."""

    #: Feed the next received message (or ``connection_closed``) and ask again.
    NEED_DATA = "NEED_DATA"
    #: The terminal frame was yielded, or the client closed: nothing more will come.
    SESSION_ENDED = "SESSION_ENDED"


# The fast path's channel numbers, as plain ints (comparing with an IntEnum member costs more).
_STDOUT = int(Channel.STDOUT)
_STDERR = int(Channel.STDERR)

NEED_DATA: Literal[SessionSignal.NEED_DATA] = SessionSignal.NEED_DATA
SESSION_ENDED: Literal[SessionSignal.SESSION_ENDED] = SessionSignal.SESSION_ENDED


def chunk_stdin(subprotocol: Subprotocol, data: bytes) -> list[Message]:
    """``data`` as stdin messages of at most 32 KiB payload each (client-go's buffer size)."""
    view = memoryview(data)
    return [
        encode_message(
            subprotocol, Channel.STDIN, bytes(view[offset : offset + MAX_CLIENT_PAYLOAD_BYTES])
        )
        for offset in range(0, len(view), MAX_CLIENT_PAYLOAD_BYTES)
    ]


class ExecSession:
    """One exec connection's protocol state, client side.

    Args:
        subprotocol: what the server negotiated.
        tty: whether a TTY was requested (resize is allowed only then).
        stdin: whether stdin was requested (``Stdin`` frames are refused otherwise).
        max_stdin_frame_bytes: the largest ``Stdin`` payload ``send`` accepts; ``None`` for no
            limit (``execute``'s own stdin, which the caller already holds in memory).
        supervision: the command was started under this supervision's prologue
            (:mod:`kuber_exec_core.supervision`): the start mark at the head of stdout is read
            and removed (:attr:`start_mark`); a ``MISSING`` mark, or output that does not begin
            with the mark, ends the session with an ``EXEC_FAILED`` error.
    """

    def __init__(
        self,
        subprotocol: Subprotocol,
        *,
        tty: bool = False,
        stdin: bool = False,
        max_stdin_frame_bytes: int | None = None,
        supervision: Supervision | None = None,
    ) -> None:
        self.subprotocol = subprotocol
        self.supervision = supervision
        # The start mark's bytes so far while it is awaited; None once read (or unsupervised).
        self._mark_head: bytearray | None = None if supervision is None else bytearray()
        self._start_mark: StartMark | None = None
        self._server_ended = False
        self.tty = tty
        self.stdin = stdin
        self.max_stdin_frame_bytes = max_stdin_frame_bytes
        self._state = SessionState.OPEN
        # ``_state in TERMINAL_STATES``, kept with the state: it is asked several times per
        # message, and hashing an enum member runs Python code.
        self._finished = False
        # Binary subprotocols decode stdout/stderr on a fast path in next_event (see there).
        self._binary = not subprotocol.is_base64
        self._pending: deque[Message] = deque()
        self._transport_ended = False
        self._transport_clean = False
        self._transport_reason: str | None = None
        self._status = StatusStream(subprotocol)
        self._final: Exit | Error | None = None
        # A local end's Error until next_event has yielded it (then None again).
        self._final_unyielded: Error | None = None
        self._ended_locally = False
        self._bytes_in = 0
        self._bytes_out = 0

    def __repr__(self) -> str:
        return (
            f"<ExecSession {self.subprotocol.value} state={self._state.name} "
            f"pending={len(self._pending)}>"
        )

    @property
    def state(self) -> SessionState:
        """The current state (see :mod:`kuber_exec_core.state`)."""
        return self._state

    @property
    def is_finished(self) -> bool:
        """Whether the session is over (ENDED or CLOSED): nothing more is received, and
        ``next_event`` yields at most the terminal frame of a local end (then ``SESSION_ENDED``)."""
        return self._finished

    @property
    def final_frame(self) -> Exit | Error | None:
        """The terminal frame: the ``Exit`` or ``Error`` received, or the ``Error`` given to
        :meth:`end`; ``None`` while the session runs, and after a client close before either."""
        return self._final

    @property
    def ended_locally(self) -> bool:
        """Whether :meth:`end` decided the terminal frame (not the server)."""
        return self._ended_locally

    @property
    def bytes_in(self) -> int:
        """stdin payload bytes accepted by :meth:`send` (what the process was sent)."""
        return self._bytes_in

    @property
    def bytes_out(self) -> int:
        """stdout and stderr payload bytes yielded by :meth:`next_event`."""
        return self._bytes_out

    @property
    def start_mark(self) -> StartMark | None:
        """The supervised prologue's start mark once read; ``None`` before (and unsupervised)."""
        return self._start_mark

    @property
    def awaiting_start_mark(self) -> bool:
        """Whether a supervised session has not yet read its start mark and is still running
        (a TTY session holds its stdin until then: the terminal would echo it, and a ^C would
        reach the prologue's shell)."""
        return self._mark_head is not None and not self._finished

    @property
    def server_reported_end(self) -> bool:
        """Whether the terminal frame is the server's account of the process's end: an ``Exit``,
        a Status failure (with its reason), or a pre-v4 failure text. ``False`` for every end
        decided here (a local end, a lost connection, a protocol error): the process may still be
        running, and the layer above may clean it up."""
        return self._server_ended

    @property
    def status_pending(self) -> bool:
        """Whether part of a status arrived and its end has not: a pre-v4 failure text (which
        ends only with the connection) or a v4/v5 Status split over messages. A driver bounds
        how long it waits for the rest, then calls ``connection_closed``."""
        return not self._finished and self._status.pending

    # -- received side -------------------------------------------------------------------------

    def receive_message(self, message: Message) -> None:
        """Feed one whole WebSocket message. Messages after the end are discarded."""
        if self._finished or self._transport_ended:
            return
        self._pending.append(message)

    def connection_closed(self, *, clean: bool, reason: str | None = None) -> None:
        """The transport ended: ``clean`` when a Close frame arrived, not a broken connection.

        ``reason`` (e.g. "no pong within 30 s") is added to the failure message, if any.
        """
        if not self._transport_ended:
            self._transport_ended = True
            self._transport_clean = clean
            self._transport_reason = reason

    def next_event(self) -> ServerFrame | SessionSignal:
        """The next frame, ``NEED_DATA``, or ``SESSION_ENDED``; never raises.

        After a local end (:meth:`end`) the next call yields its ``Error`` (the terminal frame),
        and every later one ``SESSION_ENDED``.
        """
        pending = self._pending
        while not self._finished:
            if pending:
                # The fast path, for almost every message of a transfer: binary stdout or
                # stderr output. An output frame changes no state (OPEN and STDIN_CLOSED each
                # go to themselves), so the table is not consulted.
                output = self._pop_output()
                if output is not None:
                    channel, message = output
                    payload = message[1:]
                    self._bytes_out += len(payload)
                    return Stdout(payload) if channel == _STDOUT else Stderr(payload)
                frame = self._decode(pending.popleft())
                if frame is None:
                    continue
            elif self._transport_ended:
                frame = self._end_of_stream()
            else:
                return NEED_DATA
            self._apply(_received_input(frame))
            if isinstance(frame, (Exit, Error)):
                self._final = frame
                self._pending.clear()
                self._mark_head = None
            return frame
        if self._final_unyielded is not None:
            frame, self._final_unyielded = self._final_unyielded, None
            return frame
        return SESSION_ENDED

    def take_output(self) -> tuple[int, memoryview] | None:
        """The next message's output payload, without a copy, for a consumer that keeps the
        bytes itself (``execute``'s buffers): ``(channel, view)`` when the next undecoded message
        is binary stdout (1) or stderr (2) output that :meth:`next_event` would yield as a
        frame, else ``None`` (then :meth:`next_event` decides). The bytes count as received.
        """
        output = self._pop_output()
        if output is None:
            return None
        channel, message = output
        self._bytes_out += len(message) - 1
        return channel, memoryview(message)[1:]

    def _pop_output(self) -> tuple[int, bytes] | None:
        # The next undecoded message and its channel, taken off the queue, when it is plain
        # binary output that needs no decoding: a bytes message with a payload on stdout or
        # stderr, on a binary subprotocol, once the start mark is read, in a running session.
        # Else None, and the message stays for the general decoder (_decode).
        pending = self._pending
        if not pending or self._finished or not self._binary or self._mark_head is not None:
            return None
        message = pending[0]
        if type(message) is not bytes or len(message) < 2:
            return None
        channel = message[0]
        if channel != _STDOUT and channel != _STDERR:
            return None
        pending.popleft()
        return channel, message

    def end(self, error: Error) -> bool:
        """End the session here, with ``error`` as its terminal frame (a session limit, the
        caller, a cleanup): OPEN and STDIN_CLOSED go to ENDED, messages not yet decoded are
        dropped, the next :meth:`next_event` yields ``error``, and later sends are refused
        naming ``error.message`` (:data:`~kuber_exec_core.state.LOCAL_END_REFUSAL`). A session
        that has already ended or was closed is left as it is: the first end wins.

        Returns whether this call ended the session (``False``: it was already over, and a
        terminal frame already yielded stays the one that counts).

        Raises:
            TypeError: ``error`` is not an :class:`~kuber_exec_core.Error` frame.
        """
        if not isinstance(error, Error):
            raise TypeError(f"end() takes an Error frame, not {type(error).__name__}")
        was_finished = self._finished
        self._apply(SessionInput.ENDED_LOCALLY)
        if was_finished:
            return False
        self._final = self._final_unyielded = error
        self._ended_locally = True
        self._pending.clear()
        return True

    def _decode(self, message: Message) -> ServerFrame | None:
        try:
            decoded = decode_message(self.subprotocol, message)
        except ExecProtocolError as error:
            return Error(error.code, error.message)
        if decoded is None:
            return None
        channel, payload = decoded
        if not payload:
            # The no-op right after the handshake (also on channel 3): not data, not a status.
            return None
        if channel == Channel.STDOUT:
            if self._mark_head is not None:
                return self._read_mark(payload)
            self._bytes_out += len(payload)
            return Stdout(payload)
        if channel == Channel.STDERR:
            self._bytes_out += len(payload)
            return Stderr(payload)
        if channel == Channel.ERROR:
            # A byte stream, not a message (docs/protocol.md): the frame comes once it is whole.
            status = self._status.feed(payload)
            if status is not None:
                self._server_ended = _reported_by_server(self.subprotocol, status)
            return status
        return None  # Unknown channels are ignored, as the server ignores ours.

    def _read_mark(self, payload: bytes) -> ServerFrame | None:
        head = self._mark_head
        assert head is not None
        assert self.supervision is not None
        missing = self.supervision.mark_length - len(head)
        head += payload[:missing]
        if len(head) < self.supervision.mark_length:
            return None
        self._mark_head = None
        mark = self.supervision.read_mark(bytes(head))
        if mark is None:
            return Error(
                ExecErrorCode.FAILED,
                "Kubernetes exec protocol error: the supervised command's output did not begin "
                f"with its start mark (got {bytes(head)!r})",
            )
        self._start_mark = mark
        if mark is StartMark.MISSING:
            return Error(ExecErrorCode.FAILED, self.supervision.missing_message)
        rest = payload[missing:]
        if not rest:
            return None
        self._bytes_out += len(rest)
        return Stdout(rest)

    def _end_of_stream(self) -> ServerFrame:
        status = self._status.finish(self._transport_reason)
        if status is not None:
            self._server_ended = _reported_by_server(self.subprotocol, status)
            return status
        if self.subprotocol.has_structured_status:
            return Error(
                ExecErrorCode.FAILED,
                stream_end_failure(StreamEnd.NO_STATUS, self._transport_reason),
            )
        if self._transport_clean:
            # Pre-v4 servers send nothing on success; a clean close is their success signal.
            self._server_ended = True
            return Exit(0)
        return Error(
            ExecErrorCode.FAILED, stream_end_failure(StreamEnd.LOST, self._transport_reason)
        )

    # -- client side ---------------------------------------------------------------------------

    def send(self, frame: ClientFrame) -> list[Message]:
        """Validate ``frame`` and return the messages that carry it (possibly none).

        The state table decides: the frame's input must be allowed in the current state
        (:data:`~kuber_exec_core.state.REFUSALS`), then pass its
        :data:`~kuber_exec_core.state.GUARDS` in order.

        Raises:
            ExecError: ``EXEC_ABORTED`` after the end or a close; ``EXEC_INVALID`` for a frame
                this session cannot carry (stdin after EOF or not requested, EOF on a
                subprotocol older than v5, resize without a TTY or out of range, a stdin
                payload over the limit, an unknown frame). Nothing was sent in that case.
        """
        action = _client_input(frame)
        self._check(action)
        for guard in GUARDS.get(action, ()):
            if not self._passes(guard, frame):
                code, message = GUARD_REFUSALS[guard]
                raise ExecError(
                    code,
                    message.format(
                        limit=self.max_stdin_frame_bytes,
                        subprotocol=self.subprotocol.value,
                        v5=Subprotocol.V5.value,
                    ),
                )
        messages = self._encode(frame)
        self._apply(action)
        if action is SessionInput.SEND_CLOSE:
            self._pending.clear()
            self._final_unyielded = None  # After a close nothing more is yielded.
        elif isinstance(frame, Stdin):
            self._bytes_in += len(frame.data)
        return messages

    def _passes(self, guard: Guard, frame: ClientFrame) -> bool:
        match guard:
            case Guard.STDIN_REQUESTED:
                return self.stdin
            case Guard.STDIN_WITHIN_FRAME_LIMIT:
                limit = self.max_stdin_frame_bytes
                return limit is None or (isinstance(frame, Stdin) and len(frame.data) <= limit)
            case Guard.EOF_NEEDS_V5:
                return self.subprotocol.can_close_stdin
            case Guard.RESIZE_NEEDS_TTY:
                return self.tty
            case Guard.DIMENSIONS_IN_RANGE:
                return isinstance(frame, Resize) and all(
                    isinstance(value, int)
                    and not isinstance(value, bool)
                    and 1 <= value <= MAX_TERMINAL_DIMENSION
                    for value in (frame.columns, frame.rows)
                )

    def _encode(self, frame: ClientFrame) -> list[Message]:
        if isinstance(frame, Stdin):
            messages = chunk_stdin(self.subprotocol, frame.data)
            if frame.eof:
                messages.append(
                    encode_message(self.subprotocol, Channel.CLOSE, CLOSE_STDIN_PAYLOAD)
                )
            return messages
        if isinstance(frame, Resize):
            payload = json.dumps({"Width": frame.columns, "Height": frame.rows}).encode("ascii")
            return [encode_message(self.subprotocol, Channel.RESIZE, payload)]
        return []  # Close: nothing on the wire; the transport's own close follows.

    # -- the table -----------------------------------------------------------------------------

    def _check(self, action: SessionInput) -> None:
        refusal = REFUSALS.get((self._state, action))
        if refusal is None:
            return
        code, message = refusal
        if self._ended_locally and self._state is SessionState.ENDED:
            assert isinstance(self._final, Error)
            message = LOCAL_END_REFUSAL.format(refusal=message, reason=self._final.message)
        raise ExecError(code, message)

    def _apply(self, event: SessionInput) -> None:
        key = (self._state, event)
        if key in TRANSITIONS:
            self._state = TRANSITIONS[key]
            self._finished = self._state in TERMINAL_STATES
            return
        self._check(event)
        # Unreachable by construction (see the state module); fail closed rather than carry on.
        self._state = SessionState.ENDED
        self._finished = True
        raise ExecProtocolError(f"{event.value} is not allowed in state {key[0].value}")


def _reported_by_server(subprotocol: Subprotocol, frame: Exit | Error) -> bool:
    # A v4/v5 Error without a Status reason is a protocol error or a cut status: decided here.
    return (
        isinstance(frame, Exit)
        or not subprotocol.has_structured_status
        or frame.status_reason is not None
    )


def _client_input(frame: object) -> SessionInput:
    if isinstance(frame, Stdin):
        return SessionInput.SEND_STDIN_EOF if frame.eof else SessionInput.SEND_STDIN
    if isinstance(frame, Resize):
        return SessionInput.SEND_RESIZE
    if isinstance(frame, Close):
        return SessionInput.SEND_CLOSE
    return SessionInput.SEND_UNKNOWN


def _received_input(frame: ServerFrame) -> SessionInput:
    if isinstance(frame, Exit):
        return SessionInput.EXIT_RECEIVED
    if isinstance(frame, Error):
        return SessionInput.FAILURE_RECEIVED
    return SessionInput.OUTPUT_RECEIVED
