"""A server message that quotes the argv it ran quotes the user's argv, not our start prologue:
a supervised exec runs ``/bin/sh -c PROLOGUE kuber-exec-<id> ARGV...``, and Kubernetes 1.20 says
``error executing command [<all of that>], exit code 4`` in the exit's Status."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import Error, ExecSession, Exit, Stdout, Subprotocol
from kuber_exec_core import testing as kt
from kuber_exec_core._server_text import without_start_prologue
from kuber_exec_core._status import StatusStream, parse_status
from kuber_exec_core.channels import Channel
from kuber_exec_core.supervision import Supervision

SUPERVISION = Supervision("2e13a9c04b7d8f16", executable="sh")
SESSION_IDS = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


def quoted(argv: list[str]) -> str:
    """``argv`` as Go's ``%v`` prints a ``[]string``: joined by spaces, in brackets."""
    return "[" + " ".join(argv) + "]"


def exit_status(message: str, code: int = 4) -> bytes:
    return json.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    ).encode()


USER_ARGV = ["sh", "-c", "echo hi; exit 4"]
SERVER_MESSAGE = (
    f"error executing command {quoted(SUPERVISION.supervised_command(USER_ARGV))}, exit code 4"
)


@pytest.mark.parametrize("subprotocol", [Subprotocol.V5, Subprotocol.V4])
def test_the_exit_message_of_kubernetes_1_20_quotes_the_users_argv(
    subprotocol: Subprotocol,
) -> None:
    assert "session=${0#kuber-exec-}" in SERVER_MESSAGE  # what the server really quotes
    frame = parse_status(subprotocol, exit_status(SERVER_MESSAGE))
    assert frame == Exit(
        4, "NonZeroExitCode", "error executing command [sh -c echo hi; exit 4], exit code 4"
    )


def test_a_supervised_session_reports_the_users_argv_in_its_exit() -> None:
    session = ExecSession(Subprotocol.V5, supervision=SUPERVISION)
    mark = b"K" + SUPERVISION.session_id.encode() + b"."
    session.receive_message(kt.frame_message(Subprotocol.V5, Channel.STDOUT, mark + b"hi\n"))
    session.receive_message(
        kt.frame_message(Subprotocol.V5, Channel.ERROR, exit_status(SERVER_MESSAGE))
    )
    events = []
    while (event := session.next_event()) is not None and not isinstance(event, Exit):
        events.append(event)
    assert events == [Stdout(b"hi\n")]
    assert isinstance(event, Exit)
    assert event.message == "error executing command [sh -c echo hi; exit 4], exit code 4"


def test_a_status_cut_into_pieces_is_rewritten_too() -> None:
    stream = StatusStream(Subprotocol.V5)
    payload = exit_status(SERVER_MESSAGE)
    assert stream.feed(payload[:100]) is None
    frame = stream.feed(payload[100:])
    assert isinstance(frame, Exit)
    assert frame.message == "error executing command [sh -c echo hi; exit 4], exit code 4"


def test_a_failure_and_pre_v4_text_are_rewritten_too() -> None:
    # v5 may repeat the runtime's text: every quoted supervised argv is shortened.
    twice = f"Internal error occurred: {SERVER_MESSAGE}: {SERVER_MESSAGE}"
    failure = json.dumps(
        {"status": "Failure", "message": twice, "reason": "InternalError", "code": 500}
    ).encode()
    frame = parse_status(Subprotocol.V5, failure)
    assert isinstance(frame, Error)
    short = "error executing command [sh -c echo hi; exit 4], exit code 4"
    assert frame.message == f"Internal error occurred: {short}: {short}"
    assert (frame.status_reason, frame.status_code) == ("InternalError", 500)
    text = f"command terminated with non-zero exit code: {SERVER_MESSAGE}".encode()
    legacy = parse_status(Subprotocol.LEGACY, text)
    assert isinstance(legacy, Error)
    assert legacy.message == f"command terminated with non-zero exit code: {short}"


@pytest.mark.parametrize(
    "message",
    [
        "command terminated with non-zero exit code: exit status 4",
        "error executing command [sh -c exit 4], exit code 4",
        # Not the prologue's exact shape: another shell, no id, a short id, an upper-case id,
        # the prologue without its opening bracket, the marker alone.
        SERVER_MESSAGE.replace("[/bin/sh -c", "[/bin/bash -c"),
        SERVER_MESSAGE.replace(f"kuber-exec-{SUPERVISION.session_id} ", "kuber-exec- "),
        SERVER_MESSAGE.replace(SUPERVISION.session_id, SUPERVISION.session_id[:15]),
        SERVER_MESSAGE.replace(SUPERVISION.session_id, SUPERVISION.session_id.upper()),
        SERVER_MESSAGE.replace("[/bin/sh", "/bin/sh"),
        "kuber-exec-2e13a9c04b7d8f16 sh -c exit 4",
        "",
    ],
)
def test_any_other_text_is_kept_as_the_server_wrote_it(message: str) -> None:
    assert without_start_prologue(message) == message


@given(
    argv=st.lists(st.text(), min_size=1, max_size=6),
    session_id=SESSION_IDS,
    before=st.text(),
    after=st.text(),
)
def test_any_argv_is_quoted_back_as_the_user_wrote_it(
    argv: list[str], session_id: str, before: str, after: str
) -> None:
    supervised = Supervision(session_id).supervised_command(argv)
    message = f"{before}{quoted(supervised)}{after}"
    assert without_start_prologue(message) == f"{before}{quoted(argv)}{after}"
    frame = parse_status(Subprotocol.V5, exit_status(message, code=7))
    assert frame == Exit(7, "NonZeroExitCode", f"{before}{quoted(argv)}{after}")
