"""A supervised session whose start mark says ``ARGV[0]`` is missing: the error is kuber-exec's,
worded as what the start check found, never borrowing a container runtime's message."""

from __future__ import annotations

from kuber_exec_core import Error, ExecErrorCode, ExecSession, Subprotocol
from kuber_exec_core import testing as kt
from kuber_exec_core.channels import Channel
from kuber_exec_core.supervision import Supervision

SUPERVISION = Supervision("0123456789abcdef", executable="no-such-tool")


def test_a_missing_executable_is_reported_in_our_words() -> None:
    session = ExecSession(Subprotocol.V5, supervision=SUPERVISION)
    mark = b"K" + SUPERVISION.session_id.encode() + b"!"
    session.receive_message(kt.frame_message(Subprotocol.V5, Channel.STDOUT, mark))
    event = session.next_event()
    assert isinstance(event, Error)
    assert event.code is ExecErrorCode.FAILED
    assert event.message == (
        'kuber-exec\'s start check: "no-such-tool": executable file not found on the '
        "container's $PATH (the command did not start)"
    )
    assert "error executing command in container" not in event.message  # no runtime said it
