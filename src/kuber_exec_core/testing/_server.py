"""What a server sends for one exec: framed messages, whole scripts that end in a status (or are
cut short) with what a client must make of them, and anything at all for robustness tests.

The messages are framed by this module's own code (docs/protocol.md), not by the core's codec."""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Sequence
from typing import Any

import attrs
from hypothesis import strategies as st

from .._channels import Message
from .._errors import ExecErrorCode
from .._frames import Error, Exit, ServerFrame
from .._session import SESSION_ENDED, ExecSession
from .._state import STREAM_END_FAILURES, StreamEnd, stream_end_failure
from .._subprotocols import Subprotocol


def frame_message(subprotocol: Subprotocol, channel: int, payload: bytes) -> Message:
    """One whole message as a server (or client) sends it: ``[channel][payload]`` in binary
    subprotocols, ``'0'+channel`` then padded base64 in the base64 ones (docs/protocol.md)."""
    if subprotocol in (Subprotocol.BASE64, Subprotocol.V4_BASE64):
        return chr(ord("0") + channel) + base64.standard_b64encode(payload).decode("ascii")
    return bytes([channel]) + payload


class StatusKind(enum.Enum):
    """How a :class:`ServerScript` ends."""

    #: ``{"metadata":{},"status":"Success"}`` (v4/v5), or nothing and a clean close (pre-v4).
    SUCCESS = "success"
    #: ``NonZeroExitCode`` with the ``ExitCode`` cause somewhere among other causes (v4/v5).
    NON_ZERO_EXIT = "non-zero-exit"
    #: ``InternalError`` with code 500: the command could not run (v4/v5).
    INTERNAL_ERROR = "internal-error"
    #: Plain failure text on channel 3 (pre-v4 only).
    TEXT_FAILURE = "text-failure"
    #: No status at all: the connection ended early (v4/v5 any close; pre-v4 a broken one).
    TRUNCATED = "truncated"


@attrs.frozen(kw_only=True, repr=False)
class ServerScript:
    """The messages a server sends for one exec, and what a client must make of them.

    Feed ``messages`` in order, then end the transport with ``clean_close``; the client must
    yield exactly ``stdout`` and ``stderr`` (however chunked) and then ``terminal``.
    """

    subprotocol: Subprotocol
    messages: tuple[Message, ...]
    clean_close: bool
    kind: StatusKind
    stdout: bytes
    stderr: bytes
    terminal: Exit | Error

    def __repr__(self) -> str:
        return (
            f"ServerScript({self.subprotocol.value}, {self.kind.name}, "
            f"{len(self.messages)} messages, clean_close={self.clean_close}, "
            f"terminal={self.terminal!r})"
        )

    def feed(self, session: ExecSession) -> list[ServerFrame]:
        """Feed the whole script into ``session`` and return every frame it yields, in order."""
        frames: list[ServerFrame] = []
        for message in self.messages:
            session.receive_message(message)
        session.connection_closed(clean=self.clean_close)
        while (event := session.next_event()) is not SESSION_ENDED:
            assert isinstance(event, ServerFrame), event
            frames.append(event)
        return frames


def _go_json(value: object) -> bytes:
    # Go's encoding/json escapes <, > and & (and U+2028/9) even in plain strings.
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text.encode("utf-8")


_status_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40)


@st.composite
def _status(draw: st.DrawFn, kind: StatusKind, structured: bool) -> tuple[bytes, Exit | Error]:
    if kind is StatusKind.SUCCESS:
        return _go_json({"metadata": {}, "status": "Success"}), Exit(0)
    if kind is StatusKind.NON_ZERO_EXIT:
        code = draw(st.integers(min_value=1, max_value=255) | st.integers(-(2**31), 2**31 - 1))
        message = draw(
            st.just(f"command terminated with non-zero exit code: {code}") | _status_text
        )
        others = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"message": _status_text},
                    optional={
                        "reason": st.sampled_from(["Other", "exitcode", ""]),
                        "field": _status_text,
                    },
                ),
                max_size=3,
            )
        )
        index = draw(st.integers(min_value=0, max_value=len(others)))
        causes = [*others[:index], {"reason": "ExitCode", "message": str(code)}, *others[index:]]
        status: dict[str, Any] = {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "NonZeroExitCode",
            "details": {"causes": causes},
        }
        return _go_json(status), Exit(code, "NonZeroExitCode", message)
    if kind is StatusKind.INTERNAL_ERROR:
        detail = draw(_status_text)
        message = f"Internal error occurred: error executing command in container: {detail}"
        status = {
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "InternalError",
            "details": {"causes": [{"message": detail}]},
            "code": 500,
        }
        return _go_json(status), Error(ExecErrorCode.FAILED, message)
    assert kind is StatusKind.TEXT_FAILURE
    assert not structured
    text = draw(_status_text)
    return text.encode("utf-8"), Error(
        ExecErrorCode.FAILED, text.strip() or STREAM_END_FAILURES[StreamEnd.UNEXPLAINED]
    )


@st.composite
def server_scripts(
    draw: st.DrawFn,
    subprotocol: Subprotocol | None = None,
    *,
    kinds: Sequence[StatusKind] | None = None,
    max_chunks: int = 6,
) -> ServerScript:
    """What a server sends for one exec in ``subprotocol`` (default: any), ending as one of
    ``kinds`` (default: any the subprotocol can send).

    First the empty message on the lowest requested output channel (stdout, else stderr, else
    channel 3), then up to ``max_chunks`` output messages of arbitrary bytes on the requested
    streams (empty ones included: they are no-ops), then the status (if any), then a close.
    """
    protocol = subprotocol or draw(st.sampled_from(Subprotocol))
    structured = protocol in (Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64)
    possible = (
        [StatusKind.SUCCESS, StatusKind.NON_ZERO_EXIT, StatusKind.INTERNAL_ERROR]
        if structured
        else [StatusKind.SUCCESS, StatusKind.TEXT_FAILURE]
    ) + [StatusKind.TRUNCATED]
    kind = draw(st.sampled_from([k for k in (kinds or possible) if k in possible]))
    initial = draw(st.sampled_from([1, 2, 3]))
    streams = {1: [1, 2], 2: [2], 3: []}[initial]
    messages: list[Message] = [frame_message(protocol, initial, b"")]
    output = {1: bytearray(), 2: bytearray()}
    if streams:
        chunks = draw(
            st.lists(
                st.tuples(st.sampled_from(streams), st.binary(max_size=64)), max_size=max_chunks
            )
        )
        for channel, data in chunks:
            messages.append(frame_message(protocol, channel, data))
            output[channel] += data
    clean = True
    terminal: Exit | Error
    if kind is StatusKind.TRUNCATED:
        clean = draw(st.booleans()) if structured else False
        terminal = Error(
            ExecErrorCode.FAILED,
            stream_end_failure(StreamEnd.NO_STATUS if structured else StreamEnd.LOST),
        )
    elif kind is StatusKind.SUCCESS and not structured:
        terminal = Exit(0)
    else:
        payload, terminal = draw(_status(kind, structured))
        messages.append(frame_message(protocol, 3, payload))
        clean = draw(st.booleans())
    return ServerScript(
        subprotocol=protocol,
        messages=tuple(messages),
        clean_close=clean,
        kind=kind,
        stdout=bytes(output[1]),
        stderr=bytes(output[2]),
        terminal=terminal,
    )


def raw_server_messages(subprotocol: Subprotocol) -> st.SearchStrategy[Message]:
    """Anything a broken or hostile server could send in ``subprotocol``: arbitrary binary and
    text frames, well-framed messages on every channel with arbitrary payloads, and statuses
    that are almost right."""
    channels = st.sampled_from([0, 1, 2, 3, 4, 5, 9, 255]) | st.integers(0, 255)
    framed = st.builds(
        lambda channel, payload: (
            frame_message(subprotocol, channel % 10, payload)
            if subprotocol in (Subprotocol.BASE64, Subprotocol.V4_BASE64)
            else frame_message(subprotocol, channel, payload)
        ),
        channels,
        st.binary(max_size=64)
        | st.sampled_from(
            [
                b"{}",
                b"[]",
                b"null",
                b'{"status":"Failure","reason":"NonZeroExitCode"}',
                b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":"x"}}',
                b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason'
                b'":"ExitCode","message":"99999999999999999999"}]}}',
                b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason'
                b'":"ExitCode","message":7}]}}',
                b'{"status":"Failure","message":["x"],"reason":{}}',
                b"[" * 5000,
                b"\xff\xfe",
            ]
        ),
    )
    return framed | st.binary(max_size=80) | st.text(max_size=80)
