"""``ExecSession.end``: the core owns every way a session ends, a local end included.

A local end (a session limit, the caller, a cleanup) takes a running session to ENDED with the
caller's ``Error`` as its terminal frame; later sends are refused by the state table, naming why;
the session counts the bytes it moved and keeps its final frame, so no layer above keeps an end
state of its own.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    NEED_DATA,
    SESSION_ENDED,
    Close,
    Error,
    ExecError,
    ExecErrorCode,
    ExecSession,
    Exit,
    Resize,
    ServerFrame,
    Stderr,
    Stdin,
    Stdout,
    Subprotocol,
)
from kuber_exec_core import testing as kt
from kuber_exec_core.state import LOCAL_END_REFUSAL, REFUSALS, SessionInput, SessionState

LIMIT = Error(ExecErrorCode.ABORTED, "the session was idle for 5 s and was closed")


def _stdout(data: bytes, subprotocol: Subprotocol = Subprotocol.V5) -> bytes | str:
    return kt.frame_message(subprotocol, 1, data)


def test_a_local_end_is_the_terminal_frame_and_the_state_is_ended() -> None:
    session = ExecSession(Subprotocol.V5, stdin=True, tty=True)
    session.receive_message(_stdout(b"before"))
    assert session.next_event() == Stdout(b"before")
    session.receive_message(_stdout(b"after the limit"))  # Arrived, not yet decoded: dropped.
    assert session.end(LIMIT) is True
    assert session.state is SessionState.ENDED
    assert session.is_finished
    assert session.ended_locally
    assert session.final_frame == LIMIT
    assert session.next_event() == LIMIT
    assert session.next_event() is SESSION_ENDED
    assert session.next_event() is SESSION_ENDED
    assert session.bytes_out == len(b"before")
    assert "ENDED" in repr(session)


@pytest.mark.parametrize(
    ("frame", "action"),
    [
        (Stdin(b"x"), SessionInput.SEND_STDIN),
        (Stdin(b"", eof=True), SessionInput.SEND_STDIN_EOF),
        (Resize(80, 24), SessionInput.SEND_RESIZE),
    ],
)
def test_sends_after_a_local_end_are_refused_by_the_table_with_the_reason(
    frame: Stdin | Resize, action: SessionInput
) -> None:
    session = ExecSession(Subprotocol.V5, stdin=True, tty=True)
    session.end(LIMIT)
    with pytest.raises(ExecError) as refused:
        session.send(frame)
    code, refusal = REFUSALS[(SessionState.ENDED, action)]
    assert refused.value.code is code is ExecErrorCode.ABORTED
    assert refused.value.message == LOCAL_END_REFUSAL.format(refusal=refusal, reason=LIMIT.message)
    assert session.state is SessionState.ENDED  # A refusal keeps the state.


def test_after_a_received_exit_the_refusal_is_the_seeds_alone() -> None:
    session = ExecSession(Subprotocol.V5, stdin=True)
    session.receive_message(kt.frame_message(Subprotocol.V5, 3, b'{"status":"Success"}'))
    assert session.next_event() == Exit(0)
    with pytest.raises(ExecError) as refused:
        session.send(Stdin(b"x"))
    assert (refused.value.code, refused.value.message) == REFUSALS[
        (SessionState.ENDED, SessionInput.SEND_STDIN)
    ]


def test_the_first_end_wins() -> None:
    session = ExecSession(Subprotocol.V5)
    session.receive_message(kt.frame_message(Subprotocol.V5, 3, b'{"status":"Success"}'))
    assert session.next_event() == Exit(0)
    # The exit was yielded: a limit firing now changes nothing.
    assert session.end(LIMIT) is False
    assert session.final_frame == Exit(0)
    assert not session.ended_locally
    assert session.next_event() is SESSION_ENDED
    later = Error(ExecErrorCode.FAILED, "a second end")
    fresh = ExecSession(Subprotocol.V5)
    assert fresh.end(LIMIT) is True
    assert fresh.end(later) is False
    assert fresh.final_frame == LIMIT
    assert fresh.next_event() == LIMIT


def test_a_close_after_a_local_end_yields_nothing_more_and_keeps_the_final_frame() -> None:
    session = ExecSession(Subprotocol.V5)
    session.end(LIMIT)
    assert session.send(Close()) == []
    assert session.state is SessionState.CLOSED
    assert session.next_event() is SESSION_ENDED
    assert session.final_frame == LIMIT  # How it ended, for the audit event.


def test_ending_a_closed_session_changes_nothing() -> None:
    session = ExecSession(Subprotocol.V5)
    session.send(Close())
    assert session.end(LIMIT) is False
    assert session.state is SessionState.CLOSED
    assert session.final_frame is None
    assert session.next_event() is SESSION_ENDED


def test_end_takes_an_error_frame_only() -> None:
    session = ExecSession(Subprotocol.V5)
    with pytest.raises(TypeError):
        session.end(Exit(0))  # type: ignore[arg-type]
    assert session.state is SessionState.OPEN


# -- properties -------------------------------------------------------------------------------


@given(
    kt.server_scripts(),
    st.integers(min_value=0, max_value=40),
    st.lists(st.binary(max_size=64), max_size=5),
)
def test_a_local_end_anywhere_gives_one_terminal_frame_and_true_counts(
    script: kt.ServerScript, cut: int, inputs: list[bytes]
) -> None:
    # Feed the script's messages one by one, pulling events; after ``cut`` of them, end the
    # session locally. Whatever the point: data frames, then exactly one terminal frame (the
    # server's, if it came first, else the local end's), then nothing; the counts are the
    # bytes that were really yielded and sent.
    session = ExecSession(script.subprotocol, stdin=True)
    for data in inputs:
        session.send(Stdin(data))
    events: list[ServerFrame] = []
    ended_locally = False
    messages = script.messages
    for index in range(len(messages) + 1):
        if index == cut:
            ended_locally = session.end(LIMIT)
        if index < len(messages):
            session.receive_message(messages[index])
        else:
            session.connection_closed(clean=script.clean_close)
        while (event := session.next_event()) is not NEED_DATA and event is not SESSION_ENDED:
            assert isinstance(event, ServerFrame)
            events.append(event)
    terminal = events[-1]
    assert [e for e in events if isinstance(e, Exit | Error)] == [terminal]
    assert session.final_frame == terminal
    assert session.ended_locally is ended_locally
    assert terminal == (LIMIT if ended_locally else script.terminal)
    output = [e for e in events if isinstance(e, Stdout | Stderr)]
    assert session.bytes_out == sum(len(frame.data) for frame in output)
    assert session.bytes_in == sum(len(data) for data in inputs)
    assert session.next_event() is SESSION_ENDED
