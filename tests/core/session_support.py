"""Helpers of the session tests (``test_session``, ``test_status_stream``): a server frame in a
subprotocol's encoding, a session's events up to its first signal, and how many examples the
server-bytes fuzz properties run."""

from __future__ import annotations

from hypothesis import settings

from kuber_exec_core import ExecSession, ServerFrame, Subprotocol
from kuber_exec_core import testing as kt
from kuber_exec_core.state import SessionSignal

__all__ = ["FUZZ_EXAMPLES", "drain", "frame"]

#: The server-bytes fuzz properties (two in test_session, two in test_status_stream): under the
#: ci profile (250 examples) ten times as many, 2,500 each, 10,000 in total; locally three times.
_PROFILE_EXAMPLES = settings().max_examples
FUZZ_EXAMPLES = _PROFILE_EXAMPLES * (10 if _PROFILE_EXAMPLES >= 250 else 3)


def frame(channel: int, payload: bytes, subprotocol: Subprotocol = Subprotocol.V5) -> bytes | str:
    """The server's message carrying ``payload`` on ``channel``."""
    return kt.frame_message(subprotocol, channel, payload)


def drain(session: ExecSession) -> list[ServerFrame | SessionSignal]:
    """Every event up to and including the first signal."""
    events: list[ServerFrame | SessionSignal] = []
    while True:
        event = session.next_event()
        events.append(event)
        if isinstance(event, SessionSignal):
            return events
