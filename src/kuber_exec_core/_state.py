"""The session state table: states, inputs and transitions as data.

A session starts OPEN. The client may send stdin, resize and close; the server's messages become
output (``Stdout``/``Stderr``) and at most one terminal frame (``Exit`` or ``Error``)::

    OPEN ──stdin eof──▶ STDIN_CLOSED
    OPEN / STDIN_CLOSED ──exit or failure received──▶ ENDED   (the terminal frame was yielded)
    OPEN / STDIN_CLOSED ──ended locally──▶ ENDED              (its Error is the terminal frame)
    any state ──client close──▶ CLOSED                       (nothing more is yielded)

A local end is the client side deciding that the session is over before the server said so (a
session limit, the caller, a cleanup): ``ExecSession.end(error)``. It is not a client *action*
(nothing is written), and it is never refused: ending a session that has already ended or was
closed changes nothing, so the first end wins.

Every (state, input) pair is either in :data:`TRANSITIONS` or in :data:`REFUSALS` (the client's
mistake: raised as ``ExecError``, the state is kept), except received inputs in ENDED and CLOSED,
which cannot occur: the session discards what arrives after its end before it is decoded. A
refusal in a session that was ended locally also names why it ended (:data:`LOCAL_END_REFUSAL`).

A client action that the state allows must then pass its :data:`GUARDS`, in order: conditions on
the session's facts (was stdin requested, is there a TTY, did the server negotiate v5) and on the
frame (its size, its dimensions). A failed guard raises its :data:`GUARD_REFUSALS` entry and keeps
the state. ``ExecSession`` only evaluates the predicates; which guards apply, in which order, and
what each failure says, is all here; so is the wording of a session that ends without a whole
status (:data:`STREAM_END_FAILURES`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from ._errors import ExecErrorCode


class SessionState(enum.Enum):
    """Where an exec session is."""

    #: Output flows; stdin (if requested) is open.
    OPEN = "open"
    #: Output flows; stdin was closed by the client (v5 only).
    STDIN_CLOSED = "stdin-closed"
    #: The terminal frame (``Exit`` or ``Error``) was yielded; nothing follows.
    ENDED = "ended"
    #: The client closed the session; nothing more is yielded.
    CLOSED = "closed"


class SessionInput(enum.Enum):
    """What can happen to a session: client actions (``SEND_*``) and received facts."""

    SEND_STDIN = "send-stdin"
    SEND_STDIN_EOF = "send-stdin-eof"
    SEND_RESIZE = "send-resize"
    SEND_CLOSE = "send-close"
    #: A frame of a type the session does not know (refused in every state).
    SEND_UNKNOWN = "send-unknown"
    OUTPUT_RECEIVED = "output-received"
    EXIT_RECEIVED = "exit-received"
    FAILURE_RECEIVED = "failure-received"
    #: The client side ended the session with an ``Error`` of its own (``ExecSession.end``).
    ENDED_LOCALLY = "ended-locally"

    @property
    def is_client_action(self) -> bool:
        """Whether the client, not the server, causes this input."""
        return self.value.startswith("send-")


_S = SessionState
_I = SessionInput

#: States after which nothing more is yielded and every client action but close is refused.
TERMINAL_STATES: frozenset[SessionState] = frozenset({_S.ENDED, _S.CLOSED})

#: Terminal dimensions are uint16 on the wire (the resize JSON's Width/Height); 0 is no size.
MAX_TERMINAL_DIMENSION = 65_535

#: The whole machine. Anything not here is refused (REFUSALS) or cannot happen.
TRANSITIONS: Mapping[tuple[SessionState, SessionInput], SessionState] = MappingProxyType(
    {
        (_S.OPEN, _I.SEND_STDIN): _S.OPEN,
        (_S.OPEN, _I.SEND_STDIN_EOF): _S.STDIN_CLOSED,
        (_S.OPEN, _I.SEND_RESIZE): _S.OPEN,
        (_S.OPEN, _I.SEND_CLOSE): _S.CLOSED,
        (_S.OPEN, _I.OUTPUT_RECEIVED): _S.OPEN,
        (_S.OPEN, _I.EXIT_RECEIVED): _S.ENDED,
        (_S.OPEN, _I.FAILURE_RECEIVED): _S.ENDED,
        (_S.STDIN_CLOSED, _I.SEND_RESIZE): _S.STDIN_CLOSED,
        (_S.STDIN_CLOSED, _I.SEND_CLOSE): _S.CLOSED,
        (_S.STDIN_CLOSED, _I.OUTPUT_RECEIVED): _S.STDIN_CLOSED,
        (_S.STDIN_CLOSED, _I.EXIT_RECEIVED): _S.ENDED,
        (_S.STDIN_CLOSED, _I.FAILURE_RECEIVED): _S.ENDED,
        (_S.OPEN, _I.ENDED_LOCALLY): _S.ENDED,
        (_S.STDIN_CLOSED, _I.ENDED_LOCALLY): _S.ENDED,
        # The first end wins: a later local end (a limit firing as the process exits) is a no-op.
        (_S.ENDED, _I.ENDED_LOCALLY): _S.ENDED,
        (_S.CLOSED, _I.ENDED_LOCALLY): _S.CLOSED,
        # Closing is idempotent and always allowed: it is how the client releases the socket.
        (_S.ENDED, _I.SEND_CLOSE): _S.CLOSED,
        (_S.CLOSED, _I.SEND_CLOSE): _S.CLOSED,
    }
)

_ABORTED = (ExecErrorCode.ABORTED, "Exec request was aborted")
_STDIN_CLOSED = (ExecErrorCode.INVALID, "stdin is already closed")
_UNKNOWN = (ExecErrorCode.INVALID, "Unknown interactive exec frame")

#: Client actions a state refuses, with the error raised (the seed's message for aborted use).
REFUSALS: Mapping[tuple[SessionState, SessionInput], tuple[ExecErrorCode, str]] = MappingProxyType(
    {
        (_S.STDIN_CLOSED, _I.SEND_STDIN): _STDIN_CLOSED,
        (_S.STDIN_CLOSED, _I.SEND_STDIN_EOF): _STDIN_CLOSED,
        (_S.OPEN, _I.SEND_UNKNOWN): _UNKNOWN,
        (_S.STDIN_CLOSED, _I.SEND_UNKNOWN): _UNKNOWN,
        # The seed's send() checks "aborted" before it looks at the frame's type.
        **{
            (state, action): _ABORTED
            for state in TERMINAL_STATES
            for action in (_I.SEND_STDIN, _I.SEND_STDIN_EOF, _I.SEND_RESIZE, _I.SEND_UNKNOWN)
        },
    }
)

#: How a refusal reads in a session that was ended locally: the table's message, then why the
#: session ended (the ``Error`` given to ``ExecSession.end``), e.g. "Exec request was aborted: the
#: session was idle for 300 s (no input and no output) and was closed".
LOCAL_END_REFUSAL = "{refusal}: {reason}"


class StreamEnd(enum.Enum):
    """How a session ends when its transport ends without a whole status: the failure's wording is
    :data:`STREAM_END_FAILURES`'s."""

    #: v4/v5: the connection ended before the Status arrived.
    NO_STATUS = "no-status"
    #: v4/v5: the connection ended in the middle of the Status.
    STATUS_CUT = "status-cut"
    #: Before v4: a broken connection (a clean close is those servers' success).
    LOST = "lost"
    #: A failure status (a v4/v5 Status or a pre-v4 text) that says nothing.
    UNEXPLAINED = "unexplained"


#: The ``EXEC_FAILED`` message of each :class:`StreamEnd`. ``{detail}`` is empty or, when the
#: transport knows why it ended, `` (why)`` (e.g. a keepalive timeout, or a message over the
#: size limit); ``{size}`` and ``{preview}`` are the cut Status's length and its start.
STREAM_END_FAILURES: Mapping[StreamEnd, str] = MappingProxyType(
    {
        StreamEnd.NO_STATUS: (
            "exit status unknown: the connection closed before the exec status arrived{detail}"
        ),
        StreamEnd.STATUS_CUT: (
            "exit status unknown: the connection closed in the middle of the exec status "
            "({size} bytes: {preview}{detail})"
        ),
        StreamEnd.LOST: "exit status unknown: the connection was lost{detail}",
        StreamEnd.UNEXPLAINED: "Kubernetes exec failed",
    }
)


def stream_end_failure(
    end: StreamEnd, why: str | None = None, *, size: int = 0, preview: str = ""
) -> str:
    """The message :data:`STREAM_END_FAILURES` gives ``end``, naming ``why`` when known."""
    if end is StreamEnd.STATUS_CUT:
        detail = f"; {why}" if why else ""
    else:
        detail = f" ({why})" if why else ""
    return STREAM_END_FAILURES[end].format(detail=detail, size=size, preview=preview)


class Guard(enum.Enum):
    """A condition on the session or the frame that a client action must meet."""

    #: The session was opened with a stdin stream.
    STDIN_REQUESTED = "stdin-requested"
    #: The ``Stdin`` payload is within the service's ``max_stdin_frame_bytes`` (if any).
    STDIN_WITHIN_FRAME_LIMIT = "stdin-within-frame-limit"
    #: Only ``v5.channel.k8s.io`` can close stdin (its ``[255, 0]`` message); v4 and older
    #: cannot signal end of input at all, and a silent no-op would hang the caller.
    EOF_NEEDS_V5 = "eof-needs-v5"
    #: Resizing a non-TTY session can stall the server's receive loop: refuse it here.
    RESIZE_NEEDS_TTY = "resize-needs-tty"
    #: Each dimension is an ``int`` from 1 to :data:`MAX_TERMINAL_DIMENSION`.
    DIMENSIONS_IN_RANGE = "dimensions-in-range"


#: The guards each client action must pass, in this order, once its state allows it.
GUARDS: Mapping[SessionInput, tuple[Guard, ...]] = MappingProxyType(
    {
        _I.SEND_STDIN: (Guard.STDIN_REQUESTED, Guard.STDIN_WITHIN_FRAME_LIMIT),
        _I.SEND_STDIN_EOF: (
            Guard.STDIN_REQUESTED,
            Guard.STDIN_WITHIN_FRAME_LIMIT,
            Guard.EOF_NEEDS_V5,
        ),
        _I.SEND_RESIZE: (Guard.RESIZE_NEEDS_TTY, Guard.DIMENSIONS_IN_RANGE),
    }
)

#: What a failed guard raises. ``{limit}`` is the stdin frame limit, ``{subprotocol}`` the
#: negotiated subprotocol and ``{v5}`` the one that can close stdin.
GUARD_REFUSALS: Mapping[Guard, tuple[ExecErrorCode, str]] = MappingProxyType(
    {
        Guard.STDIN_REQUESTED: (ExecErrorCode.INVALID, "stdin was not requested for this session"),
        Guard.STDIN_WITHIN_FRAME_LIMIT: (
            ExecErrorCode.INVALID,
            "stdin frame exceeds {limit} bytes",
        ),
        Guard.EOF_NEEDS_V5: (
            ExecErrorCode.INVALID,
            "Closing stdin needs the {v5} subprotocol; the server negotiated {subprotocol}, "
            "which cannot signal end of input",
        ),
        Guard.RESIZE_NEEDS_TTY: (ExecErrorCode.INVALID, "Resize needs a TTY session"),
        Guard.DIMENSIONS_IN_RANGE: (
            ExecErrorCode.INVALID,
            f"Terminal dimensions must be integers between 1 and {MAX_TERMINAL_DIMENSION}",
        ),
    }
)


def state_diagram() -> str:
    """The state table as a Mermaid ``stateDiagram-v2`` (the docs page is generated from it)."""
    lines = ["stateDiagram-v2", f"    [*] --> {SessionState.OPEN.name}"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.name} --> {target.name}: {event.value}")
    for state in (state for state in SessionState if state in TERMINAL_STATES):
        lines.append(f"    {state.name} --> [*]")
    return "\n".join(lines) + "\n"
