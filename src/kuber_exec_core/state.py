"""The session's state table: states, inputs, transitions, refusals and guards, as data.

``ExecSession`` consults these tables for every decision; the docs' state diagram is generated
from them (:func:`state_diagram`).
"""

from ._session import SessionSignal as SessionSignal
from ._state import GUARD_REFUSALS as GUARD_REFUSALS
from ._state import GUARDS as GUARDS
from ._state import LOCAL_END_REFUSAL as LOCAL_END_REFUSAL
from ._state import MAX_TERMINAL_DIMENSION as MAX_TERMINAL_DIMENSION
from ._state import REFUSALS as REFUSALS
from ._state import STREAM_END_FAILURES as STREAM_END_FAILURES
from ._state import TERMINAL_STATES as TERMINAL_STATES
from ._state import TRANSITIONS as TRANSITIONS
from ._state import Guard as Guard
from ._state import SessionInput as SessionInput
from ._state import SessionState as SessionState
from ._state import StreamEnd as StreamEnd
from ._state import state_diagram as state_diagram
from ._state import stream_end_failure as stream_end_failure

__all__ = [
    "GUARDS",
    "GUARD_REFUSALS",
    "LOCAL_END_REFUSAL",
    "MAX_TERMINAL_DIMENSION",
    "REFUSALS",
    "STREAM_END_FAILURES",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Guard",
    "SessionInput",
    "SessionSignal",
    "SessionState",
    "StreamEnd",
    "state_diagram",
    "stream_end_failure",
]
