"""The session state table: states, inputs and transitions as data.

A session starts OPEN. The client may send stdin, resize and close; the server's messages become
output (``Stdout``/``Stderr``) and at most one terminal frame (``Exit`` or ``Error``)::

    OPEN ──stdin eof──▶ STDIN_CLOSED
    OPEN / STDIN_CLOSED ──exit or failure received──▶ ENDED   (the terminal frame was yielded)
    any state ──client close──▶ CLOSED                       (nothing more is yielded)

Every (state, input) pair is either in :data:`TRANSITIONS` or in :data:`REFUSALS` (the client's
mistake: raised as ``ExecError``, the state is kept), except received inputs in ENDED and CLOSED,
which cannot occur: the session discards what arrives after its end before it is decoded.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from ._errors import ExecErrorCode

__all__ = ["REFUSALS", "TRANSITIONS", "SessionInput", "SessionState", "state_diagram"]


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
    OUTPUT_RECEIVED = "output-received"
    EXIT_RECEIVED = "exit-received"
    FAILURE_RECEIVED = "failure-received"

    @property
    def is_client_action(self) -> bool:
        """Whether the client, not the server, causes this input."""
        return self.value.startswith("send-")


_S = SessionState
_I = SessionInput

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
        # Closing is idempotent and always allowed: it is how the client releases the socket.
        (_S.ENDED, _I.SEND_CLOSE): _S.CLOSED,
        (_S.CLOSED, _I.SEND_CLOSE): _S.CLOSED,
    }
)

_ABORTED = (ExecErrorCode.ABORTED, "Exec request was aborted")
_STDIN_CLOSED = (ExecErrorCode.INVALID, "stdin is already closed")

#: Client actions a state refuses, with the error raised (the seed's message for aborted use).
REFUSALS: Mapping[tuple[SessionState, SessionInput], tuple[ExecErrorCode, str]] = MappingProxyType(
    {
        (_S.STDIN_CLOSED, _I.SEND_STDIN): _STDIN_CLOSED,
        (_S.STDIN_CLOSED, _I.SEND_STDIN_EOF): _STDIN_CLOSED,
        **{
            (state, action): _ABORTED
            for state in (_S.ENDED, _S.CLOSED)
            for action in (_I.SEND_STDIN, _I.SEND_STDIN_EOF, _I.SEND_RESIZE)
        },
    }
)


def state_diagram() -> str:
    """The state table as a Mermaid ``stateDiagram-v2`` (the docs page is generated from it)."""
    lines = ["stateDiagram-v2", f"    [*] --> {SessionState.OPEN.name}"]
    for (state, event), target in TRANSITIONS.items():
        lines.append(f"    {state.name} --> {target.name}: {event.value}")
    for state in (SessionState.ENDED, SessionState.CLOSED):
        lines.append(f"    {state.name} --> [*]")
    return "\n".join(lines) + "\n"
