"""The ``*.channel.k8s.io`` codec: framing, negotiation, the status channel, the exec URL, and the
server side, with cases taken from real server traffic (protocol.md §1–6)."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    DEFAULT_SUBPROTOCOLS,
    NEED_DATA,
    SESSION_ENDED,
    Error,
    ExecError,
    ExecErrorCode,
    ExecSession,
    ExecStreams,
    Exit,
    Resize,
    ResolvedTarget,
    Stderr,
    Stdin,
    Stdout,
    Subprotocol,
)
from kuber_exec_core import testing as kt
from kuber_exec_core._exec_url import quote_value
from kuber_exec_core.channels import (
    ALL_SUBPROTOCOLS,
    MAX_CLIENT_PAYLOAD_BYTES,
    Channel,
    ExecProtocolError,
    accept_subprotocol,
    choose_subprotocol,
    chunk_stdin,
    decode_message,
    encode_message,
    parse_status,
    parse_subprotocol_header,
)
from kuber_exec_core.kube import exec_path
from kuber_exec_core.server import (
    ResizeReceived,
    ServerChannel,
    StdinClosed,
    StdinReceived,
    status_exit_code,
    status_failure,
    status_success,
)
from kuber_exec_core.supervision import Supervision

BINARY = [Subprotocol.V5, Subprotocol.V4, Subprotocol.LEGACY]
BASE64 = [Subprotocol.V4_BASE64, Subprotocol.BASE64]
STRUCTURED = [Subprotocol.V5, Subprotocol.V4, Subprotocol.V4_BASE64]
PRE_V4 = [Subprotocol.BASE64, Subprotocol.LEGACY]

# -- negotiation ---------------------------------------------------------------------------------


def test_subprotocol_family() -> None:
    assert [p.value for p in ALL_SUBPROTOCOLS] == [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "v4.base64.channel.k8s.io",
        "base64.channel.k8s.io",
        "channel.k8s.io",
    ]
    assert DEFAULT_SUBPROTOCOLS == (Subprotocol.V5, Subprotocol.V4)
    assert [p for p in ALL_SUBPROTOCOLS if p.is_base64] == BASE64
    assert [p for p in ALL_SUBPROTOCOLS if p.has_structured_status] == STRUCTURED
    assert [p for p in ALL_SUBPROTOCOLS if p.can_close_stdin] == [Subprotocol.V5]


def test_accept_subprotocol() -> None:
    assert accept_subprotocol(DEFAULT_SUBPROTOCOLS, "v4.channel.k8s.io") is Subprotocol.V4
    for answer in (None, "", "base64.channel.k8s.io", "V5.CHANNEL.K8S.IO"):
        with pytest.raises(ExecProtocolError) as caught:
            accept_subprotocol(DEFAULT_SUBPROTOCOLS, answer)
        assert caught.value.code is ExecErrorCode.FAILED


def test_choose_subprotocol_follows_the_client_order() -> None:
    legacy = [Subprotocol.V4, Subprotocol.V4_BASE64, Subprotocol.BASE64, Subprotocol.LEGACY]
    offer = ["v5.channel.k8s.io", "base64.channel.k8s.io", "v4.channel.k8s.io"]
    assert choose_subprotocol(offer, legacy) is Subprotocol.BASE64
    assert choose_subprotocol(offer, [Subprotocol.V5]) is Subprotocol.V5
    assert choose_subprotocol(["x"], legacy) is None
    assert choose_subprotocol([], legacy) is Subprotocol.LEGACY
    assert choose_subprotocol([], [Subprotocol.V5]) is None


def test_parse_subprotocol_header() -> None:
    assert parse_subprotocol_header(["v5.channel.k8s.io, v4.channel.k8s.io", " x ,,"]) == [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "x",
    ]


# -- framing -------------------------------------------------------------------------------------


def test_binary_framing() -> None:
    assert encode_message(Subprotocol.V4, Channel.STDIN, b"ls\n") == b"\x00ls\n"
    assert decode_message(Subprotocol.V4, b"\x01out") == (1, b"out")
    assert decode_message(Subprotocol.V5, bytearray(b"\x02err")) == (2, b"err")  # type: ignore[arg-type]
    assert decode_message(Subprotocol.V5, memoryview(b"\xff\x00")) == (255, b"\x00")  # type: ignore[arg-type]
    assert decode_message(Subprotocol.LEGACY, b"") is None


def test_base64_framing_is_computed() -> None:
    payload = bytes(range(256))
    expected = "1" + base64.standard_b64encode(payload).decode("ascii")
    assert encode_message(Subprotocol.V4_BASE64, Channel.STDOUT, payload) == expected
    assert decode_message(Subprotocol.BASE64, expected) == (1, payload)
    # A worked example by hand: "hi" is 0x68 0x69 -> 011010 000110 1001(00) -> a G k =.
    assert encode_message(Subprotocol.BASE64, Channel.STDIN, b"hi") == "0aGk="
    assert encode_message(Subprotocol.BASE64, Channel.RESIZE, b"") == "4"
    assert decode_message(Subprotocol.BASE64, "3") == (3, b"")
    assert decode_message(Subprotocol.BASE64, "") is None


@pytest.mark.parametrize(
    ("subprotocol", "message", "fragment"),
    [
        (Subprotocol.V4, "1aGk=", "a text frame arrived on v4.channel.k8s.io"),
        (Subprotocol.V5, "", "a text frame arrived"),
        (Subprotocol.BASE64, b"1aGk=", "a binary frame arrived on base64.channel.k8s.io"),
        (Subprotocol.V4_BASE64, "xaGk=", "did not start with a channel digit"),
        (Subprotocol.V4_BASE64, "1aGk", "malformed payload"),
        (Subprotocol.V4_BASE64, "1a*k=", "malformed payload"),
        (Subprotocol.V4_BASE64, "1é===", "malformed payload"),
    ],
)
def test_framing_errors(subprotocol: Subprotocol, message: str | bytes, fragment: str) -> None:
    with pytest.raises(ExecProtocolError) as caught:
        decode_message(subprotocol, message)
    assert caught.value.code is ExecErrorCode.FAILED
    assert fragment in caught.value.message


def test_base64_cannot_carry_channel_255() -> None:
    with pytest.raises(ValueError, match="channel 255"):
        encode_message(Subprotocol.V4_BASE64, Channel.CLOSE, b"\x00")


channels = st.sampled_from([0, 1, 2, 3, 4])


@given(st.sampled_from(Subprotocol), channels, st.binary(max_size=300))
def test_encode_decode_round_trip(subprotocol: Subprotocol, channel: int, payload: bytes) -> None:
    message = encode_message(subprotocol, channel, payload)
    assert isinstance(message, str) is subprotocol.is_base64
    assert message == kt.frame_message(subprotocol, channel, payload)
    assert decode_message(subprotocol, message) == (channel, payload)


@given(st.sampled_from(BINARY), st.integers(0, 255), st.binary(max_size=50))
def test_binary_round_trip_every_channel(
    subprotocol: Subprotocol, channel: int, payload: bytes
) -> None:
    assert decode_message(subprotocol, encode_message(subprotocol, channel, payload)) == (
        channel,
        payload,
    )


def _max_message_size(subprotocol: Subprotocol) -> int:
    return (
        1 + 4 * ((MAX_CLIENT_PAYLOAD_BYTES + 2) // 3)
        if subprotocol.is_base64
        else 1 + MAX_CLIENT_PAYLOAD_BYTES
    )


@given(
    st.sampled_from(Subprotocol),
    st.integers(0, 3 * MAX_CLIENT_PAYLOAD_BYTES + 5),
    st.binary(min_size=1, max_size=64),
)
def test_chunk_stdin(subprotocol: Subprotocol, size: int, pattern: bytes) -> None:
    data = (pattern * (size // len(pattern) + 1))[:size]
    messages = chunk_stdin(subprotocol, data)
    assert len(messages) == -(-size // MAX_CLIENT_PAYLOAD_BYTES)
    decoded = [decode_message(subprotocol, m) for m in messages]
    assert all(d is not None and d[0] == 0 and d[1] for d in decoded)
    assert b"".join(d[1] for d in decoded if d is not None) == data
    assert all(len(m) <= _max_message_size(subprotocol) for m in messages)
    assert MAX_CLIENT_PAYLOAD_BYTES == 32 * 1024


# -- the client's messages, read by the server side ----------------------------------------------


@given(
    st.sampled_from(Subprotocol),
    st.lists(st.binary(max_size=MAX_CLIENT_PAYLOAD_BYTES * 2 + 3), max_size=4),
    st.lists(st.tuples(st.integers(1, 65535), st.integers(1, 65535)), max_size=3),
)
def test_client_to_server_round_trip(
    subprotocol: Subprotocol, chunks: list[bytes], sizes: list[tuple[int, int]]
) -> None:
    client = ExecSession(subprotocol, tty=True, stdin=True)
    server = ServerChannel(subprotocol)
    received = bytearray()
    for chunk in chunks:
        for message in client.send(Stdin(chunk)):
            event = server.decode_client(message)
            assert isinstance(event, StdinReceived)
            assert event.data
            received += event.data
    assert bytes(received) == b"".join(chunks)
    for columns, rows in sizes:
        (message,) = client.send(Resize(columns, rows))
        assert server.decode_client(message) == ResizeReceived(columns, rows)
    if subprotocol is Subprotocol.V5:
        assert client.send(Stdin(b"", eof=True)) == [b"\xff\x00"]
        assert server.decode_client(b"\xff\x00") == StdinClosed()


@given(st.sampled_from(Subprotocol), st.lists(st.binary(max_size=100), max_size=6), st.data())
def test_server_to_client_round_trip_rechunked(
    subprotocol: Subprotocol, outputs: list[bytes], data: st.DataObject
) -> None:
    """Any split of the same output into messages gives the client the same bytes."""
    whole = b"".join(outputs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=5)))
    pieces = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    server = ServerChannel(subprotocol)
    client = ExecSession(subprotocol)
    client.receive_message(server.initial_message(stdout=True, stderr=True))
    for piece in pieces:
        client.receive_message(server.output(Channel.STDOUT, piece))
        client.receive_message(server.output(Channel.STDERR, piece[::-1]))
    final = status_success() if subprotocol.has_structured_status else None
    if final is not None:
        client.receive_message(server.status(final))
    client.connection_closed(clean=True)
    out, err, terminal = bytearray(), bytearray(), []
    while (event := client.next_event()) is not SESSION_ENDED:
        assert event is not NEED_DATA
        match event:
            case Stdout(data=chunk):
                assert chunk
                out += chunk
            case Stderr(data=chunk):
                err += chunk
            case _:
                terminal.append(event)
    assert bytes(out) == whole
    assert bytes(err) == b"".join(p[::-1] for p in pieces)
    assert terminal == [Exit(0)]


@pytest.mark.parametrize(
    ("subprotocol", "message", "expected"),
    [
        (Subprotocol.V5, b"", None),
        (Subprotocol.V5, b"\x00", None),  # stdin with no payload is a no-op, not EOF
        (Subprotocol.V5, b"\x00abc", StdinReceived(b"abc")),
        (Subprotocol.V5, b"\x01abc", None),  # channels 1-3 are dropped
        (Subprotocol.V5, b"\x02abc", None),
        (Subprotocol.V5, b"\x03abc", None),
        (Subprotocol.V5, b"\x05abc", None),
        (Subprotocol.V5, b"\xff\x00", StdinClosed()),
        (Subprotocol.V4, b"\xff\x00", None),  # v4 has no close channel
        (Subprotocol.V5, b'\x04{"Width":80,"Height":24}', ResizeReceived(80, 24)),
        (Subprotocol.V5, b'\x04{"Width":80,"Height":24}\n', ResizeReceived(80, 24)),
        (
            Subprotocol.V4_BASE64,
            "4" + base64.b64encode(b'{"Width":1,"Height":2}').decode(),
            ResizeReceived(1, 2),
        ),
        (Subprotocol.BASE64, "0" + base64.b64encode(b"x").decode(), StdinReceived(b"x")),
        (Subprotocol.BASE64, "0", None),
    ],
)
def test_decode_client(subprotocol: Subprotocol, message: bytes | str, expected: object) -> None:
    assert ServerChannel(subprotocol).decode_client(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        b"\xff",
        b"\xff\x01",
        b"\xff\x00\x00",
        b"\x04not json",
        b"\x04[80, 24]",
        b'\x04{"Width":-1,"Height":24}',
        b'\x04{"Width":65536,"Height":24}',
        b'\x04{"Width":80.5,"Height":24}',
        b'\x04{"Width":true,"Height":24}',
    ],
)
def test_decode_client_errors(message: bytes) -> None:
    with pytest.raises(ExecProtocolError):
        ServerChannel(Subprotocol.V5).decode_client(message)


@pytest.mark.parametrize(
    ("stdout", "stderr", "channel"),
    [(True, True, 1), (True, False, 1), (False, True, 2), (False, False, 3)],
)
@pytest.mark.parametrize("subprotocol", list(Subprotocol))
def test_initial_message(
    subprotocol: Subprotocol, stdout: bool, stderr: bool, channel: int
) -> None:
    message = ServerChannel(subprotocol).initial_message(stdout=stdout, stderr=stderr)
    assert message == kt.frame_message(subprotocol, channel, b"")
    # The client treats it as a no-op, even on channel 3.
    session = ExecSession(subprotocol)
    session.receive_message(message)
    assert session.next_event() is NEED_DATA


# -- the status channel --------------------------------------------------------------------------

# As a real v4/v5 server writes them (protocol.md §4); note Go's HTML-safe escapes.
REAL_SUCCESS = b'{"metadata":{},"status":"Success"}'
REAL_EXIT_3 = (
    b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: '
    b'error executing command [sh -c echo x \\u003e /dev/full; exit 3], exit code 3",'
    b'"reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
)
REAL_EXIT_CAUSE_LAST = (
    b'{"metadata":{},"status":"Failure","message":"command terminated","reason":"NonZeroExitCode",'
    b'"details":{"causes":[{"message":"first"},{"reason":"Signal","message":"9"},'
    b'{"reason":"ExitCode","message":"137"}]}}'
)
REAL_INTERNAL = (
    b'{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing '
    b'command in container: failed to exec in container: failed to start exec \\"abc\\": '
    b"OCI runtime exec failed: exec failed: unable to start container process: "
    b'exec: \\"nope\\": executable file not found in $PATH: unknown",'
    b'"reason":"InternalError","details":{"causes":[{"message":"x"}]},"code":500}'
)


@pytest.mark.parametrize("subprotocol", STRUCTURED)
@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (REAL_SUCCESS, Exit(0)),
        (
            REAL_EXIT_3,
            Exit(
                3,
                "NonZeroExitCode",
                "command terminated with non-zero exit code: error executing command "
                "[sh -c echo x > /dev/full; exit 3], exit code 3",
            ),
        ),
        (REAL_EXIT_CAUSE_LAST, Exit(137, "NonZeroExitCode", "command terminated")),
        (
            REAL_INTERNAL,
            Error(
                ExecErrorCode.FAILED,
                "Internal error occurred: error executing command in container: failed to exec in "
                'container: failed to start exec "abc": OCI runtime exec failed: exec failed: '
                'unable to start container process: exec: "nope": executable file not found in '
                "$PATH: unknown",
            ),
        ),
        # NonZeroExitCode without a usable ExitCode cause: a failure, never a made-up code.
        (
            b'{"status":"Failure","reason":"NonZeroExitCode","message":"m","details":{"causes":[]}}',
            Error(ExecErrorCode.FAILED, "m"),
        ),
        (
            b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}}',
            Error(ExecErrorCode.FAILED, "NonZeroExitCode"),
        ),
        (b'{"status":"Failure"}', Error(ExecErrorCode.FAILED, "Kubernetes exec failed")),
    ],
)
def test_parse_status(subprotocol: Subprotocol, payload: bytes, expected: object) -> None:
    assert parse_status(subprotocol, payload) == expected


@pytest.mark.parametrize("payload", [b"not json", b"[]", b'"Success"', b"\xff\xfe", b"[" * 10_000])
def test_parse_status_garbage_is_a_protocol_failure(payload: bytes) -> None:
    frame = parse_status(Subprotocol.V4, payload)
    assert isinstance(frame, Error)
    assert frame.code is ExecErrorCode.FAILED
    assert frame.message.startswith("Kubernetes exec protocol error: the status was not a Status")


@pytest.mark.parametrize("subprotocol", PRE_V4)
def test_pre_v4_status_is_text(subprotocol: Subprotocol) -> None:
    text = b"command terminated with non-zero exit code: exit status 2\n"
    assert parse_status(subprotocol, text) == Error(
        ExecErrorCode.FAILED, "command terminated with non-zero exit code: exit status 2"
    )
    # Even JSON is just text there.
    assert parse_status(subprotocol, REAL_SUCCESS) == Error(
        ExecErrorCode.FAILED, REAL_SUCCESS.decode()
    )


def test_status_builders_parse_back() -> None:
    assert parse_status(Subprotocol.V5, status_success()) == Exit(0)
    assert b"\\u003e" in status_exit_code(4, "a > b")
    assert parse_status(Subprotocol.V5, status_exit_code(4, "a > b")) == Exit(
        4, "NonZeroExitCode", "a > b"
    )
    failure = json.loads(status_failure("exec: <nope>"))
    assert (failure["reason"], failure["code"]) == ("InternalError", 500)
    assert parse_status(Subprotocol.V4, status_failure("exec: <nope>")) == Error(
        ExecErrorCode.FAILED, "Internal error occurred: exec: <nope>"
    )


# -- ends of session, per protocol.md §4 and §6 --------------------------------------------------


@pytest.mark.parametrize("subprotocol", STRUCTURED)
@pytest.mark.parametrize("clean", [True, False])
def test_close_without_status_is_unknown(subprotocol: Subprotocol, clean: bool) -> None:
    session = ExecSession(subprotocol)
    session.receive_message(kt.frame_message(subprotocol, 1, b""))
    session.receive_message(kt.frame_message(subprotocol, 1, b"partial"))
    session.connection_closed(clean=clean)
    assert session.next_event() == Stdout(b"partial")
    frame = session.next_event()
    assert isinstance(frame, Error)
    assert frame.code is ExecErrorCode.FAILED
    assert frame.message.startswith("exit status unknown")


@pytest.mark.parametrize("subprotocol", PRE_V4)
def test_pre_v4_clean_close_is_success(subprotocol: Subprotocol) -> None:
    session = ExecSession(subprotocol)
    session.connection_closed(clean=True)
    assert session.next_event() == Exit(0)
    broken = ExecSession(subprotocol)
    broken.connection_closed(clean=False, reason="connection reset")
    assert broken.next_event() == Error(
        ExecErrorCode.FAILED, "exit status unknown: the connection was lost (connection reset)"
    )


def test_v4_cannot_close_stdin_and_says_so() -> None:
    for subprotocol in (
        Subprotocol.V4,
        Subprotocol.V4_BASE64,
        Subprotocol.BASE64,
        Subprotocol.LEGACY,
    ):
        session = ExecSession(subprotocol, stdin=True)
        with pytest.raises(ExecError) as caught:
            session.send(Stdin(b"data", eof=True))
        assert caught.value.code is ExecErrorCode.INVALID
        assert caught.value.message == (
            f"Closing stdin needs the v5.channel.k8s.io subprotocol; the server negotiated "
            f"{subprotocol.value}, which cannot signal end of input"
        )
        # Nothing was sent, and stdin is still open.
        assert session.send(Stdin(b"more")) == [kt.frame_message(subprotocol, 0, b"more")]


def test_v5_close_is_255_0_after_the_data() -> None:
    session = ExecSession(Subprotocol.V5, stdin=True)
    assert session.send(Stdin(b"abc", eof=True)) == [b"\x00abc", b"\xff\x00"]


# -- the exec URL --------------------------------------------------------------------------------

NASTY = ["a&b=c", "x/y?z#w", "line\nbreak", "naïve ☃ 😀", "%41", "+ plus", "", "container=evil"]


def _target(**changes: str) -> ResolvedTarget:
    base = {
        "namespace": "team-a",
        "deployment": "web",
        "deployment_uid": "d",
        "pod": "web-1",
        "pod_uid": "p",
        "container": "app",
    }
    return ResolvedTarget(**(base | changes))


def test_exec_path_repeats_command() -> None:
    path = exec_path(_target(), ["sh", "-c", "echo hi"], ExecStreams(stdin=True, tty=False))
    assert path == (
        "/api/v1/namespaces/team-a/pods/web-1/exec?command=sh&command=-c&command=echo%20hi"
        "&container=app&stdin=true&stdout=true&stderr=true"
    )


@pytest.mark.parametrize(
    ("streams", "flags"),
    [
        (ExecStreams(), ["stdout", "stderr"]),
        (ExecStreams(stdin=True, tty=True), ["stdin", "stdout", "tty"]),
        (ExecStreams(stdout=False, stderr=False, stdin=True), ["stdin"]),
        (ExecStreams(stdout=True, stderr=False), ["stdout"]),
    ],
)
def test_exec_path_flags(streams: ExecStreams, flags: list[str]) -> None:
    query = parse_qsl(urlsplit(exec_path(_target(), ["x"], streams)).query)
    assert [k for k, v in query if v == "true"] == flags
    # False flags are omitted, never sent empty (the server reads any present value as true).
    assert {k for k, _ in query} == {"command", "container", *flags}


@given(st.text(alphabet=st.characters(codec="utf-8")) | st.sampled_from(NASTY))
def test_quote_value_is_quote_without_safe_characters(value: str) -> None:
    # The table-driven fast path must not differ from the standard library by one character.
    assert quote_value(value) == quote(value, safe="")


def test_quote_value_encodes_every_ascii_character_as_quote_does() -> None:
    every = "".join(chr(code) for code in range(128))
    assert quote_value(every) == quote(every, safe="")


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"))
def test_unreserved_text_is_its_own_encoding(value: str) -> None:
    assert quote_value(value) == quote(value, safe="") == value


@given(st.sampled_from(["0123456789abcdef", "fedcba9876543210"]), st.booleans())
def test_the_supervision_scripts_are_constant_and_quoted_exactly(
    session_id: str, hangup: bool
) -> None:
    # The prologue and the cleanup script are the same text for every exec (the id travels as
    # an argument), so their encoding is computed once: it must be quote()'s to the character.
    supervision = Supervision(session_id, executable="true")
    prologue = supervision.supervised_command(["true"])
    cleanup = supervision.cleanup_command(grace=2, hangup=hangup)
    other = Supervision("0" * 16, executable="true")
    assert prologue[2] == other.supervised_command(["ls"])[2]
    assert cleanup[2] == other.cleanup_command(grace=5)[2]
    assert session_id not in prologue[2]
    assert session_id not in cleanup[2]
    assert prologue[3] == "kuber-exec-" + session_id
    for argument in (*prologue, *cleanup):
        assert quote_value(argument) == quote(argument, safe="")


@given(
    st.lists(st.text(alphabet=st.characters(codec="utf-8")), min_size=1, max_size=4),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10),
)
def test_exec_path_query_is_urlencode_of_the_argv(command: list[str], container: str) -> None:
    path = exec_path(_target(container=container), command, ExecStreams())
    expected = urlencode(
        [
            *(("command", c) for c in command),
            ("container", container),
            ("stdout", "true"),
            ("stderr", "true"),
        ],
        quote_via=quote,
    )
    assert urlsplit(path).query == expected


@given(
    st.lists(st.sampled_from(NASTY) | st.text(max_size=10), min_size=1, max_size=5),
    st.sampled_from(NASTY) | st.text(min_size=1, max_size=10),
    st.sampled_from(NASTY) | st.text(min_size=1, max_size=10),
    st.sampled_from(NASTY) | st.text(min_size=1, max_size=10),
)
def test_exec_path_cannot_be_injected(
    command: list[str], namespace: str, pod: str, container: str
) -> None:
    path = exec_path(
        _target(namespace=namespace, pod=pod, container=container), command, ExecStreams()
    )
    assert all(0x21 <= ord(c) <= 0x7E for c in path), "not percent-encoded"
    parts = urlsplit(path)
    assert parts.fragment == ""
    segments = parts.path.split("/")
    assert [unquote(s) for s in segments] == [
        "",
        "api",
        "v1",
        "namespaces",
        namespace,
        "pods",
        pod,
        "exec",
    ]
    assert parse_qsl(parts.query, keep_blank_values=True) == [
        *(("command", c) for c in command),
        ("container", container),
        ("stdout", "true"),
        ("stderr", "true"),
    ]


@given(
    st.sampled_from(Subprotocol),
    st.binary(max_size=60)
    | st.text(max_size=60)
    | st.builds(lambda p: b"\x04" + p, st.binary(max_size=40))
    | st.sampled_from(
        [
            b'\x04{"Width":1e400,"Height":1}',
            b'\x04{"Width":100000000000000000000,"Height":1}',
            b"\x04" + b"[" * 3000,
            b'\x04{"Width":NaN}',
        ]
    ),
)
def test_decode_client_never_raises_anything_else(
    subprotocol: Subprotocol, message: bytes | str
) -> None:
    try:
        event = ServerChannel(subprotocol).decode_client(message)
    except ExecProtocolError as error:
        assert error.code is ExecErrorCode.FAILED  # noqa: PT017
    else:
        assert event is None or isinstance(event, StdinReceived | StdinClosed | ResizeReceived)
