"""The session's fast path for output messages, and ``execute``'s copy-free ``take_output``,
give exactly what the general decoder gives.

The fast path takes only ``bytes`` messages; any other buffer type of the same content goes
through the general decoder. So feeding every message once as ``bytes`` and once as a
``bytearray`` must give the same frames, byte counts and states, for any mix of channels,
empty messages, statuses, subprotocols and a supervised start mark.
"""

from __future__ import annotations

from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    NEED_DATA,
    SESSION_ENDED,
    ExecError,
    ExecResult,
    ExecSession,
    ExecuteRun,
    ResolvedTarget,
    Stdout,
    Subprotocol,
)
from kuber_exec_core.channels import Message
from kuber_exec_core.supervision import Supervision

TARGET = ResolvedTarget(
    namespace="ns", deployment="web", deployment_uid="d", pod="web-1", pod_uid="p", container="app"
)
SUPERVISION = Supervision("0123456789abcdef")
SUCCESS = b'{"metadata":{},"status":"Success"}'
FAILURE = b'{"metadata":{},"status":"Failure","reason":"InternalError","message":"boom"}'

binary_subprotocols = st.sampled_from([Subprotocol.V5, Subprotocol.V4])
channels = st.sampled_from([0, 1, 1, 1, 2, 2, 4, 7, 255])
messages = st.one_of(
    st.builds(
        lambda channel, payload: bytes((channel,)) + payload, channels, st.binary(max_size=40)
    ),
    st.just(b""),
    st.just(b"\x01"),
    st.sampled_from([b"\x03" + SUCCESS, b"\x03" + FAILURE, b"\x03" + SUCCESS[:10]]),
)


def mark() -> bytes:
    return b"K" + SUPERVISION.session_id.encode() + b"."


def as_bytearrays(sequence: list[bytes]) -> list[Message]:
    # Message is typed bytes | str; the decoder also takes any bytes-like (its general path).
    return cast("list[Message]", [bytearray(message) for message in sequence])


def drain(session: ExecSession, sequence: list[Message]) -> list[object]:
    seen: list[object] = []
    for message in sequence:
        session.receive_message(message)
        while (event := session.next_event()) is not NEED_DATA:
            seen.append(event)
            if event is SESSION_ENDED:
                return seen
    session.connection_closed(clean=True)
    while (event := session.next_event()) is not SESSION_ENDED:
        seen.append(event)
    seen.append((session.state, session.bytes_out, session.server_reported_end))
    return seen


@given(binary_subprotocols, st.booleans(), st.lists(messages, max_size=25))
def test_the_fast_path_yields_what_the_general_decoder_yields(
    subprotocol: Subprotocol, supervised: bool, sequence: list[bytes]
) -> None:
    if supervised:
        sequence = [b"\x01" + mark(), *sequence]
    supervision = SUPERVISION if supervised else None
    fast = drain(ExecSession(subprotocol, supervision=supervision), list(sequence))
    general = drain(ExecSession(subprotocol, supervision=supervision), as_bytearrays(sequence))
    assert fast == general


def outcome(run: ExecuteRun, sequence: list[Message]) -> object:
    for message in sequence:
        run.receive_message(message)
    run.connection_closed(clean=True)
    try:
        result = run.next_event()
    except ExecError as error:
        return (type(error), error.code, str(error))
    assert isinstance(result, ExecResult)
    return (result.exit_code, result.stdout, result.stderr)


@given(
    binary_subprotocols,
    st.lists(messages, max_size=25),
    st.integers(min_value=0, max_value=200),
)
def test_execute_keeps_the_same_bytes_and_caps_with_or_without_the_copy_free_path(
    subprotocol: Subprotocol, sequence: list[bytes], cap: int
) -> None:
    def run() -> ExecuteRun:
        return ExecuteRun(TARGET, subprotocol, stdout_cap=cap, stderr_cap=cap)

    assert outcome(run(), list(sequence)) == outcome(run(), as_bytearrays(sequence))


def test_take_output_hands_over_a_view_and_counts_it() -> None:
    session = ExecSession(Subprotocol.V5)
    session.receive_message(b"\x01abc")
    session.receive_message(b"\x03" + SUCCESS)
    taken = session.take_output()
    assert taken is not None
    channel, view = taken
    assert (channel, bytes(view), session.bytes_out) == (1, b"abc", 3)
    assert session.take_output() is None  # a status is next_event's to decode
    assert session.next_event().__class__.__name__ == "Exit"


def test_take_output_waits_for_the_start_mark() -> None:
    session = ExecSession(Subprotocol.V5, supervision=SUPERVISION)
    session.receive_message(b"\x01" + mark() + b"hi")
    assert session.take_output() is None
    assert session.next_event() == Stdout(b"hi")


def test_take_output_leaves_base64_to_the_decoder() -> None:
    session = ExecSession(Subprotocol.V4_BASE64)
    session.receive_message("1aGk=")
    assert session.take_output() is None
    assert session.next_event() == Stdout(b"hi")
