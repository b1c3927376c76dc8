"""A stateful model of ``ExecSession``: any interleaving of received messages, transport ends,
pulls and client sends keeps the frame order (data, exactly one terminal frame, then nothing) and
the state the table says."""

from __future__ import annotations

import json
from collections import deque

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

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
from kuber_exec_core.channels import decode_message
from kuber_exec_core.state import SessionState

STRUCTURED = {Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64}


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.session = ExecSession(Subprotocol.V5)
        self.subprotocol = Subprotocol.V5
        self.tty = False
        self.stdin = False
        self.state = SessionState.OPEN
        self.queue: deque[ServerFrame] = deque()
        self.transport_ended = False
        self.terminals = 0
        self.closed_early = False
        # Pre-v4 failure text: channel 3 is a byte stream with no end marker but the close.
        self.status_text = b""

    @initialize(
        subprotocol=st.sampled_from(Subprotocol),
        tty=st.booleans(),
        stdin=st.booleans(),
    )
    def start(self, subprotocol: Subprotocol, tty: bool, stdin: bool) -> None:
        self.subprotocol, self.tty, self.stdin = subprotocol, tty, stdin
        self.session = ExecSession(subprotocol, tty=tty, stdin=stdin)

    @property
    def finished(self) -> bool:
        return self.state in (SessionState.ENDED, SessionState.CLOSED)

    def _receive(self, channel: int, payload: bytes, expected: ServerFrame | None) -> None:
        self.session.receive_message(kt.frame_message(self.subprotocol, channel, payload))
        if expected is not None and not self.finished and not self.transport_ended:
            self.queue.append(expected)

    # -- the server's side ------------------------------------------------------------------------

    @rule(channel=st.sampled_from([1, 2]), data=st.binary(max_size=20))
    def output(self, channel: int, data: bytes) -> None:
        expected = (Stdout(data) if channel == 1 else Stderr(data)) if data else None
        self._receive(channel, data, expected)

    @rule(channel=st.sampled_from([0, 4, 5, 9]), data=st.binary(max_size=5))
    def unknown_channel(self, channel: int, data: bytes) -> None:
        self._receive(channel, data, None)

    @rule()
    def empty_status(self) -> None:
        self._receive(3, b"", None)

    @rule(code=st.integers(0, 255), text=st.text(min_size=1, max_size=10))
    def status(self, code: int, text: str) -> None:
        expected: ServerFrame
        if self.subprotocol not in STRUCTURED:
            payload = text.encode()
            if not self.finished and not self.transport_ended:
                self.status_text += payload
            self._receive(3, payload, None)
            return
        if code == 0:
            payload = b'{"metadata":{},"status":"Success"}'
            expected = Exit(0)
        elif code == 255:
            payload = json.dumps(
                {"status": "Failure", "reason": "InternalError", "message": text, "code": 500}
            ).encode()
            expected = Error(ExecErrorCode.FAILED, text)
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": text,
                "reason": "NonZeroExitCode",
                "details": {
                    "causes": [{"message": "x"}, {"reason": "ExitCode", "message": str(code)}]
                },
            }
            payload = json.dumps(status).encode()
            expected = Exit(code, "NonZeroExitCode", text)
        self._receive(3, payload, expected)

    @rule(clean=st.booleans())
    def transport_end(self, clean: bool) -> None:
        self.session.connection_closed(clean=clean)
        if self.transport_ended or self.finished:
            self.transport_ended = True
            return
        self.transport_ended = True
        if any(isinstance(f, Exit | Error) for f in self.queue):
            return
        if self.status_text:
            text = self.status_text.decode().strip()
            end: ServerFrame = Error(ExecErrorCode.FAILED, text or "Kubernetes exec failed")
        elif self.subprotocol in STRUCTURED:
            end = Error(
                ExecErrorCode.FAILED,
                "exit status unknown: the connection closed before the exec status arrived",
            )
        elif clean:
            end = Exit(0)
        else:
            end = Error(ExecErrorCode.FAILED, "exit status unknown: the connection was lost")
        self.queue.append(end)

    # -- the consumer ----------------------------------------------------------------------------

    @rule()
    def pull(self) -> None:
        event = self.session.next_event()
        if self.finished:
            assert event is SESSION_ENDED
            return
        if not self.queue:
            assert event is NEED_DATA
            return
        expected = self.queue.popleft()
        assert event == expected
        if isinstance(expected, Exit | Error):
            self.terminals += 1
            self.state = SessionState.ENDED
            self.queue.clear()

    # -- the client ------------------------------------------------------------------------------

    def _refusal(self, frame: Stdin | Resize) -> tuple[ExecErrorCode, str] | None:
        if self.finished:
            return (ExecErrorCode.ABORTED, "Exec request was aborted")
        if isinstance(frame, Resize):
            if not self.tty:
                return (ExecErrorCode.INVALID, "Resize needs a TTY session")
            if not (1 <= frame.columns <= 65535 and 1 <= frame.rows <= 65535):
                return (
                    ExecErrorCode.INVALID,
                    "Terminal dimensions must be integers between 1 and 65535",
                )
            return None
        if self.state is SessionState.STDIN_CLOSED:
            return (ExecErrorCode.INVALID, "stdin is already closed")
        if not self.stdin:
            return (ExecErrorCode.INVALID, "stdin was not requested for this session")
        if frame.eof and self.subprotocol is not Subprotocol.V5:
            return (ExecErrorCode.INVALID, "Closing stdin needs")
        return None

    def _send(self, frame: Stdin | Resize) -> list[bytes | str] | None:
        refusal = self._refusal(frame)
        if refusal is None:
            return self.session.send(frame)
        with pytest.raises(ExecError) as caught:
            self.session.send(frame)
        assert caught.value.code is refusal[0]
        assert caught.value.message.startswith(refusal[1])
        return None

    @rule(data=st.binary(max_size=40), eof=st.booleans())
    def send_stdin(self, data: bytes, eof: bool) -> None:
        messages = self._send(Stdin(data, eof=eof))
        if messages is None:
            return
        decoded = [decode_message(self.subprotocol, m) for m in messages]
        if eof:
            assert decoded[-1] == (255, b"\x00")
            decoded.pop()
            self.state = SessionState.STDIN_CLOSED
        assert b"".join(d[1] for d in decoded if d is not None) == data
        assert all(d is not None and d[0] == 0 for d in decoded)

    @rule(columns=st.integers(-1, 70000), rows=st.integers(-1, 70000))
    def send_resize(self, columns: int, rows: int) -> None:
        messages = self._send(Resize(columns, rows))
        if messages is not None:
            (message,) = messages
            decoded = decode_message(self.subprotocol, message)
            assert decoded is not None
            assert decoded[0] == 4
            assert json.loads(decoded[1]) == {"Width": columns, "Height": rows}

    @rule()
    def send_close(self) -> None:
        assert self.session.send(Close()) == []
        self.closed_early = self.closed_early or not self.finished
        self.state = SessionState.CLOSED
        self.queue.clear()

    # -- what must always hold -------------------------------------------------------------------

    @invariant()
    def state_matches(self) -> None:
        assert self.session.state is self.state
        assert self.session.is_finished is self.finished

    @invariant()
    def at_most_one_terminal(self) -> None:
        assert self.terminals <= 1

    def teardown(self) -> None:
        # Ending the transport and pulling everything gives exactly one terminal frame, unless
        # the client closed first (then none).
        self.transport_end(clean=False)
        for _ in range(len(self.queue) + 2):
            self.pull()
        assert self.session.next_event() is SESSION_ENDED
        assert self.terminals == (0 if self.closed_early else 1)


TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = settings(
    max_examples=max(25, settings().max_examples // 2), stateful_step_count=30
)
