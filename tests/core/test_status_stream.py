"""Channel 3 is a byte stream (protocol.md §4): a status split at any byte, over any number of
messages, gives exactly the result of the whole status, on every subprotocol; a whole v4/v5
Status ends the session without waiting for the close; pre-v4 text waits for the close."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core import (
    NEED_DATA,
    SESSION_ENDED,
    Error,
    ExecErrorCode,
    ExecSession,
    Exit,
    ServerFrame,
    Stdout,
    Subprotocol,
)
from kuber_exec_core import testing as kt
from kuber_exec_core._status import MAX_STATUS_BYTES, StatusStream
from kuber_exec_core.channels import decode_message
from kuber_exec_core.server import status_exit_code, status_failure, status_success
from kuber_exec_core.state import SessionSignal

from .session_support import FUZZ_EXAMPLES, drain, frame

WITH_STATUS = [kt.StatusKind.NON_ZERO_EXIT, kt.StatusKind.INTERNAL_ERROR, kt.StatusKind.SUCCESS]


@st.composite
def split(draw: st.DrawFn, payload: bytes) -> list[bytes]:
    """``payload`` cut at random byte offsets (empty pieces included: they are no-ops)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(payload)), max_size=12)))
    bounds = [0, *cuts, len(payload)]
    return [payload[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def rechunked_scripts(draw: st.DrawFn) -> tuple[kt.ServerScript, list[bytes | str]]:
    """A real server script, and the same script with its status re-chunked at random."""
    script = draw(kt.server_scripts(kinds=[*WITH_STATUS, kt.StatusKind.TEXT_FAILURE]))
    messages = list(script.messages)
    decoded = decode_message(script.subprotocol, messages[-1])
    if decoded is None or decoded[0] != 3 or not decoded[1]:
        return script, messages  # pre-v4 success: no status at all
    pieces = draw(split(decoded[1]))
    status = [kt.frame_message(script.subprotocol, 3, piece) for piece in pieces]
    return script, [*messages[:-1], *status]


def events_of(
    session: ExecSession, messages: list[bytes | str], *, close: bool | None
) -> list[ServerFrame | SessionSignal]:
    events: list[ServerFrame | SessionSignal] = []
    for message in messages:
        session.receive_message(message)
        events.extend(drain(session))
    if close is not None:
        session.connection_closed(clean=close)
        events.extend(drain(session))
    return events


@settings(max_examples=FUZZ_EXAMPLES)
@given(rechunked_scripts())
def test_a_status_split_anywhere_gives_the_whole_statuss_result(
    case: tuple[kt.ServerScript, list[bytes | str]],
) -> None:
    script, messages = case
    whole = kt.ServerScript(
        subprotocol=script.subprotocol,
        messages=tuple(messages),
        clean_close=script.clean_close,
        kind=script.kind,
        stdout=script.stdout,
        stderr=script.stderr,
        terminal=script.terminal,
    )
    frames = whole.feed(ExecSession(script.subprotocol))
    assert frames[-1] == script.terminal
    assert [f for f in frames if isinstance(f, Exit | Error)] == [script.terminal]


@settings(max_examples=FUZZ_EXAMPLES)
@given(rechunked_scripts())
def test_a_whole_structured_status_ends_the_session_before_any_close(
    case: tuple[kt.ServerScript, list[bytes | str]],
) -> None:
    script, messages = case
    session = ExecSession(script.subprotocol)
    events = events_of(session, messages, close=None)
    if script.subprotocol.has_structured_status:
        terminals = [e for e in events if isinstance(e, Exit | Error)]
        assert terminals == [script.terminal]
        assert events[-1] is SESSION_ENDED
        assert not session.status_pending
    else:
        # Pre-v4 failure text has no end marker: it is whole only when the connection ends.
        assert events[-1] is NEED_DATA
        assert not any(isinstance(e, Exit | Error) for e in events)
        assert session.status_pending == (script.kind is kt.StatusKind.TEXT_FAILURE)
        session.connection_closed(clean=script.clean_close)
        assert drain(session) == [script.terminal, SESSION_ENDED]


def test_a_status_split_in_two_is_the_exit_code() -> None:
    # The report: '{"metadata":{},"s' then the rest gave "the status was not a Status object".
    for subprotocol in (Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64):
        status = status_exit_code(3)
        session = ExecSession(subprotocol)
        first = frame(3, status[:17], subprotocol)
        second = frame(3, status[17:], subprotocol)
        assert events_of(session, [first], close=None) == [NEED_DATA]
        assert session.status_pending
        (event, ended) = events_of(session, [second], close=None)
        assert isinstance(event, Exit)
        assert event.exit_code == 3
        assert ended is SESSION_ENDED


def test_braces_inside_strings_do_not_end_the_status() -> None:
    status = b'{"metadata":{},"status":"Failure","message":"a } \\" } {","reason":"X"}'
    session = ExecSession(Subprotocol.V5)
    events = events_of(session, [frame(3, status[: status.index(b"}", 20) + 1])], close=None)
    assert events == [NEED_DATA]
    assert events_of(session, [frame(3, status[status.index(b"}", 20) + 1 :])], close=None) == [
        Error(ExecErrorCode.FAILED, 'a } " } {'),
        SESSION_ENDED,
    ]


def test_output_keeps_flowing_while_a_status_is_incomplete() -> None:
    session = ExecSession(Subprotocol.V5)
    status = status_success()
    messages = [frame(3, status[:5]), frame(1, b"late output"), frame(3, status[5:])]
    assert events_of(session, messages, close=None) == [
        NEED_DATA,
        Stdout(b"late output"),
        NEED_DATA,
        Exit(0),
        SESSION_ENDED,
    ]


def test_an_incomplete_status_at_the_close_says_so() -> None:
    session = ExecSession(Subprotocol.V4)
    events = events_of(session, [frame(3, status_success()[:10], Subprotocol.V4)], close=True)
    assert events[0] is NEED_DATA
    assert isinstance(events[1], Error)
    assert events[1].code is ExecErrorCode.FAILED
    assert events[1].message.startswith(
        "exit status unknown: the connection closed in the middle of the exec status (10 bytes"
    )
    assert events[2:] == [SESSION_ENDED]


def test_what_cannot_start_a_status_fails_at_once() -> None:
    session = ExecSession(Subprotocol.V5)
    (event, ended) = events_of(session, [frame(3, b" [1, 2")], close=None)
    assert isinstance(event, Error)
    assert "the status was not a Status object" in event.message
    assert ended is SESSION_ENDED


def test_status_buffering_is_bounded() -> None:
    session = ExecSession(Subprotocol.V5)
    piece = b"{" + b" " * (64 * 1024)
    messages = [frame(3, piece)] * (MAX_STATUS_BYTES // len(piece) + 1)
    events = events_of(session, messages, close=None)
    assert isinstance(events[-2], Error)
    assert f"the status exceeds {MAX_STATUS_BYTES} bytes" in events[-2].message
    assert events[-1] is SESSION_ENDED


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def whole_statuses(draw: st.DrawFn) -> bytes:
    """One JSON object (a real Status, or any object) with whitespace around it."""
    value = draw(
        st.sampled_from(
            [status_success(), status_exit_code(3), status_failure("no such file")]
        ).map(json.loads)
        | st.dictionaries(st.sampled_from(["status", "reason", "message", "code", "x"]), _JSON)
    )
    space = st.text(alphabet=" \t\r\n", max_size=2)
    return (draw(space) + json.dumps(value) + draw(space)).encode()


@given(whole_statuses())
def test_a_status_in_one_message_is_judged_as_when_it_comes_byte_by_byte(payload: bytes) -> None:
    # One message is parsed at once; byte by byte takes the scan. Both give the same frame.
    whole = StatusStream(Subprotocol.V5).feed(payload)
    stream = StatusStream(Subprotocol.V5)
    pieces = [stream.feed(payload[index : index + 1]) for index in range(len(payload))]
    decided = [result for result in pieces if result is not None]
    assert whole is not None
    assert decided[:1] == [whole]


@given(st.binary(max_size=64))
def test_any_first_message_on_the_status_channel_is_judged_without_raising(
    payload: bytes,
) -> None:
    result = StatusStream(Subprotocol.V5).feed(payload)
    assert result is None or isinstance(result, Exit | Error)
