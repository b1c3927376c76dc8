"""``ExecSession``: the seed's ``DuplexSession`` frame order and send rules, the state table, and
robustness against whatever a server sends."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core import (
    NEED_DATA,
    SESSION_ENDED,
    ClientFrame,
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
from kuber_exec_core.channels import decode_message
from kuber_exec_core.server import status_exit_code, status_success
from kuber_exec_core.state import (
    REFUSALS,
    TERMINAL_STATES,
    TRANSITIONS,
    SessionInput,
    SessionSignal,
    SessionState,
)

from .session_support import FUZZ_EXAMPLES, drain, frame

ABORTED = (ExecErrorCode.ABORTED, "Exec request was aborted")
V5 = Subprotocol.V5


def refused(session: ExecSession, client_frame: ClientFrame) -> tuple[ExecErrorCode, str]:
    with pytest.raises(ExecError) as caught:
        session.send(client_frame)
    return caught.value.code, caught.value.message


# -- frame order ---------------------------------------------------------------------------------


def test_data_then_one_terminal_then_nothing() -> None:
    session = ExecSession(V5)
    assert session.next_event() is NEED_DATA
    for message in (
        frame(1, b""),
        frame(1, b"out"),
        frame(2, b"err"),
        frame(1, b"more"),
        frame(3, status_exit_code(2)),
        frame(1, b"after the status"),
        frame(3, status_success()),
    ):
        session.receive_message(message)
    session.receive_message(frame(1, b"after everything"))
    session.connection_closed(clean=True)
    events = drain(session)
    assert events[:3] == [Stdout(b"out"), Stderr(b"err"), Stdout(b"more")]
    assert isinstance(events[3], Exit)
    assert events[3].exit_code == 2
    assert events[4:] == [SESSION_ENDED]
    assert session.state is SessionState.ENDED
    assert session.is_finished
    # Nothing after the end, however often asked, whatever arrives.
    session.receive_message(frame(1, b"late"))
    assert session.next_event() is SESSION_ENDED
    assert session.next_event() is SESSION_ENDED


def test_output_is_passed_through_untouched() -> None:
    session = ExecSession(V5)
    payload = bytes(range(256)) + "é".encode()[:1]  # binary, and half a UTF-8 character
    session.receive_message(frame(1, payload))
    session.receive_message(frame(1, "é".encode()[1:]))
    assert drain(session) == [Stdout(payload), Stdout(b"\xa9"), NEED_DATA]


def test_unknown_channels_are_ignored() -> None:
    session = ExecSession(V5)
    for channel in (0, 4, 5, 200, 255):
        session.receive_message(frame(channel, b"x"))
    session.receive_message(frame(1, b"ok"))
    assert drain(session) == [Stdout(b"ok"), NEED_DATA]


def test_the_status_ends_the_session_even_before_close() -> None:
    session = ExecSession(Subprotocol.V4)
    session.receive_message(frame(3, status_success(), Subprotocol.V4))
    assert drain(session) == [Exit(0), SESSION_ENDED]
    session.connection_closed(clean=False)
    assert session.next_event() is SESSION_ENDED


def test_a_protocol_error_is_the_terminal_frame() -> None:
    session = ExecSession(Subprotocol.V4_BASE64)
    session.receive_message(frame(1, b"ok", Subprotocol.V4_BASE64))
    session.receive_message("1!!")
    session.receive_message(frame(1, b"never", Subprotocol.V4_BASE64))
    events = drain(session)
    assert events[0] == Stdout(b"ok")
    assert isinstance(events[1], Error)
    assert events[1].code is ExecErrorCode.FAILED
    assert events[1].message.startswith("Kubernetes exec protocol error: ")
    assert events[2:] == [SESSION_ENDED]


def test_nothing_after_a_client_close() -> None:
    session = ExecSession(V5, stdin=True)
    session.receive_message(frame(1, b"pending"))
    session.receive_message(frame(3, status_success()))
    assert session.send(Close()) == []
    assert session.state is SessionState.CLOSED
    assert session.next_event() is SESSION_ENDED
    session.receive_message(frame(1, b"late"))
    session.connection_closed(clean=True)
    assert session.next_event() is SESSION_ENDED
    # Close is idempotent; everything else is "aborted", as the seed's send after close.
    assert session.send(Close()) == []
    assert refused(session, Stdin(b"x")) == ABORTED
    assert refused(session, Stdin(b"", eof=True)) == ABORTED
    assert refused(session, Resize(80, 24)) == ABORTED


@pytest.mark.parametrize(
    "late",
    [
        Stdin(b"x"),
        Stdin(b"x", eof=True),
        Stdin(b""),
        Resize(80, 24),
        Resize(0, 0),  # aborted is checked before the dimensions, as in the seed
    ],
)
def test_send_after_the_end_is_aborted(late: ClientFrame) -> None:
    session = ExecSession(V5, stdin=True, tty=True)
    session.receive_message(frame(3, status_success()))
    assert session.next_event() == Exit(0)
    assert refused(session, late) == ABORTED
    assert session.send(Close()) == []
    assert session.state is SessionState.CLOSED


def test_unknown_frame() -> None:
    class Shout(ClientFrame):
        pass

    session = ExecSession(V5, stdin=True)
    assert refused(session, Shout()) == (ExecErrorCode.INVALID, "Unknown interactive exec frame")
    assert session.state is SessionState.OPEN
    session.send(Close())
    # The seed checks "aborted" before looking at the frame.
    assert refused(session, Shout()) == ABORTED


# -- stdin -----------------------------------------------------------------------------------------


def test_stdin_after_eof_is_refused() -> None:
    session = ExecSession(V5, stdin=True)
    assert session.send(Stdin("héllo", eof=True)) == [b"\x00h\xc3\xa9llo", b"\xff\x00"]
    assert session.state is SessionState.STDIN_CLOSED
    for late in (Stdin(b"x"), Stdin(b""), Stdin(b"", eof=True)):
        assert refused(session, late) == (ExecErrorCode.INVALID, "stdin is already closed")
    # Output and the status still flow after stdin is closed.
    session.receive_message(frame(1, b"out"))
    session.receive_message(frame(3, status_success()))
    assert drain(session) == [Stdout(b"out"), Exit(0), SESSION_ENDED]


def test_stdin_rules() -> None:
    no_stdin = ExecSession(V5)
    assert refused(no_stdin, Stdin(b"x")) == (
        ExecErrorCode.INVALID,
        "stdin was not requested for this session",
    )
    limited = ExecSession(V5, stdin=True, max_stdin_frame_bytes=4)
    assert limited.send(Stdin(b"1234")) == [b"\x001234"]
    assert refused(limited, Stdin(b"12345")) == (
        ExecErrorCode.INVALID,
        "stdin frame exceeds 4 bytes",
    )
    assert refused(limited, Stdin("€€", eof=True)) == (  # 6 bytes: measured in bytes
        ExecErrorCode.INVALID,
        "stdin frame exceeds 4 bytes",
    )
    assert limited.state is SessionState.OPEN  # a refused EOF did not close stdin
    # An empty frame sends nothing (and is not EOF).
    assert limited.send(Stdin(b"")) == []
    assert limited.send(Stdin(bytearray(b"ab"))) == [b"\x00ab"]


@pytest.mark.parametrize("data", [1, None, ["a"], "\ud800"])
def test_stdin_data_type(data: object) -> None:
    with pytest.raises(ExecError) as caught:
        Stdin(data)
    assert caught.value.code is ExecErrorCode.INVALID


# -- resize ----------------------------------------------------------------------------------------

DIMENSIONS = (ExecErrorCode.INVALID, "Terminal dimensions must be integers between 1 and 65535")


@pytest.mark.parametrize(
    ("columns", "rows"),
    [(0, 24), (80, 0), (-1, 24), (65536, 24), (80, 65536), (True, 24), (80.0, 24), ("80", 24)],
)
def test_resize_rejects(columns: object, rows: object) -> None:
    session = ExecSession(V5, tty=True)
    assert refused(session, Resize(columns, rows)) == DIMENSIONS  # type: ignore[arg-type]


@pytest.mark.parametrize(("columns", "rows"), [(1, 1), (65535, 65535), (80, 24)])
@pytest.mark.parametrize("subprotocol", list(Subprotocol))
def test_resize_accepts(subprotocol: Subprotocol, columns: int, rows: int) -> None:
    session = ExecSession(subprotocol, tty=True)
    (message,) = session.send(Resize(columns, rows))
    decoded = decode_message(subprotocol, message)
    assert decoded is not None
    assert decoded[0] == 4
    assert json.loads(decoded[1]) == {"Width": columns, "Height": rows}
    assert session.state is SessionState.OPEN


def test_resize_needs_a_tty() -> None:
    assert refused(ExecSession(V5), Resize(80, 24)) == (
        ExecErrorCode.INVALID,
        "Resize needs a TTY session",
    )


# -- the state table -----------------------------------------------------------------------------


def test_state_table_is_total() -> None:
    received = {
        SessionInput.OUTPUT_RECEIVED,
        SessionInput.EXIT_RECEIVED,
        SessionInput.FAILURE_RECEIVED,
    }
    local = {SessionInput.ENDED_LOCALLY}
    for state in SessionState:
        for action in SessionInput:
            key = (state, action)
            in_transitions, in_refusals = key in TRANSITIONS, key in REFUSALS
            assert not (in_transitions and in_refusals), key
            if state in (SessionState.ENDED, SessionState.CLOSED) and action in received:
                assert not in_transitions, key
                assert not in_refusals, key
            else:
                assert in_transitions or in_refusals, key
    # Refusals are client actions only; received facts and local ends are never refused.
    assert all(action.is_client_action for _, action in REFUSALS)
    assert all((state, action) in TRANSITIONS for state in SessionState for action in local)
    assert {a for a in SessionInput if a.is_client_action} == set(SessionInput) - received - local


def test_terminal_states() -> None:
    for (state, action), target in TRANSITIONS.items():
        if action in (SessionInput.EXIT_RECEIVED, SessionInput.FAILURE_RECEIVED):
            assert target is SessionState.ENDED
        if action is SessionInput.SEND_CLOSE:
            assert target is SessionState.CLOSED
        if action is SessionInput.ENDED_LOCALLY:
            # Running sessions end; an ended or closed one stays as it is (the first end wins).
            expected = state if state in TERMINAL_STATES else SessionState.ENDED
            assert target is expected
        if state in (SessionState.ENDED, SessionState.CLOSED):
            assert action in (SessionInput.SEND_CLOSE, SessionInput.ENDED_LOCALLY)


# -- properties ----------------------------------------------------------------------------------


@settings(max_examples=FUZZ_EXAMPLES)
@given(kt.server_scripts())
def test_scripts_give_their_output_and_terminal(script: kt.ServerScript) -> None:
    session = ExecSession(script.subprotocol)
    frames = script.feed(session)
    assert frames[-1] == script.terminal
    data = frames[:-1]
    assert all(isinstance(f, Stdout | Stderr) and f.data for f in data)
    assert b"".join(f.data for f in data if isinstance(f, Stdout)) == script.stdout
    assert b"".join(f.data for f in data if isinstance(f, Stderr)) == script.stderr
    assert session.is_finished


@settings(max_examples=FUZZ_EXAMPLES)
@given(
    st.sampled_from(Subprotocol).flatmap(
        lambda p: st.tuples(
            st.just(p),
            st.lists(kt.raw_server_messages(p), max_size=12),
            st.booleans(),
            st.booleans(),
        )
    )
)
def test_arbitrary_server_messages_give_only_documented_events(
    case: tuple[Subprotocol, list[bytes | str], bool, bool],
) -> None:
    subprotocol, messages, close, clean = case
    session = ExecSession(subprotocol)
    events: list[ServerFrame | SessionSignal] = []
    for message in messages:
        session.receive_message(message)
        events.extend(drain(session))
    if close:
        session.connection_closed(clean=clean)
        events.extend(drain(session))
    terminals = [e for e in events if isinstance(e, Exit | Error)]
    assert len(terminals) <= 1
    for event in events:
        assert isinstance(event, Stdout | Stderr | Exit | Error | SessionSignal)
        if isinstance(event, Stdout | Stderr):
            assert isinstance(event.data, bytes)
            assert event.data
        if isinstance(event, Error):
            assert event.code is ExecErrorCode.FAILED
            assert isinstance(event.message, str)
        if isinstance(event, Exit):
            assert isinstance(event.exit_code, int)
    if terminals:
        after = events[events.index(terminals[0]) + 1 :]
        assert set(after) <= {SESSION_ENDED}
    if close:
        # A closed transport always ends the session: with the status, or "unknown".
        assert len(terminals) == 1
        assert events[-1] is SESSION_ENDED
