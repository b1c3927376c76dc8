"""Smoke tests: the harness gives working exec URLs on containerd's real streaming server.

What containerd 1.6.20 (Debian bookworm, CRI runtime.v1, runc 1.1.5) did on the wire, observed with
these tests and a raw-socket probe (``http://127.0.0.1:PORT/exec/TOKEN`` URLs from CRI ``Exec``):

* Handshake: ``101`` with ``Upgrade: websocket``, ``Connection: Upgrade``, ``Sec-WebSocket-Accept``
  and ``Sec-WebSocket-Protocol: <the chosen one>``; no extensions (no permessage-deflate).
* Accepted: ``v4.channel.k8s.io``, ``v4.base64.channel.k8s.io``, ``base64.channel.k8s.io``,
  ``channel.k8s.io``. The first one in the *client's* order that it knows wins
  (``v5.channel.k8s.io, v4.channel.k8s.io`` -> v4; ``v4.base64..., v4.channel...`` -> v4.base64).
  Only ``v5.channel.k8s.io``, or an unknown one: ``HTTP/1.1 403 Forbidden``, no headers, no body.
* No ``Sec-WebSocket-Protocol`` at all: ``101`` with an *empty* ``Sec-WebSocket-Protocol: `` header
  (websockets 17's client rejects it: ``NegotiationError: no subprotocols supported`` with
  ``subprotocols=None``, ``InvalidHeaderFormat: invalid Sec-WebSocket-Protocol header`` with
  ``subprotocols=[]``), then the
  ``channel.k8s.io`` behaviour: binary frames ``b"\\x01"``, ``b"\\x01hello\\n"``, Close 1000.
* ``v4.channel.k8s.io``, ``echo hello``: binary messages ``b"\\x01"`` (the initial empty message on
  stdout), ``b"\\x01hello\\n"``, ``b'\\x03{"metadata":{},"status":"Success"}'``, then Close 1000.
* ``sh -c "exit 3"``: ``b"\\x01"`` then channel 3:
  ``{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error
  executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":
  [{"reason":"ExitCode","message":"3"}]}}`` (no ``code`` field).
* Command not found: channel 3 ``{"metadata":{},"status":"Failure","message":"Internal error
  occurred: error executing command in container: failed to exec in container: failed to start exec
  \\"<id>\\": OCI runtime exec failed: exec failed: unable to start container process: exec:
  \\"nonexistent-cmd\\": executable file not found in $PATH: unknown","reason":"InternalError",
  "details":{"causes":[{"message":"error executing command in container: ..."}]},"code":500}``.
* The initial empty message goes to the lowest requested output channel: stdout, else stderr
  (``b"\\x02"``), else the status channel (``b"\\x03"``, with only stdin requested).
* stdout and stderr arrive as separate messages (``b"\\x01out\\n"``, ``b"\\x02err\\n"``).
* ``v4.base64.channel.k8s.io``: the same messages as *text* frames, ASCII channel digit + padded
  base64: ``"1"``, ``"1aGVsbG8K"``, ``"3eyJtZXRhZGF0YSI6e30sInN0YXR1cyI6IlN1Y2Nlc3MifQ=="``.
* ``base64.channel.k8s.io``: ``"1"``, ``"1aGVsbG8K"`` and *no* status on success; on failure
  channel 3 carries the plain message text, base64'd:
  ``"3" + b64("command terminated with non-zero exit code: error executing command [sh -c exit 3],
  exit code 3")``.
* ``channel.k8s.io``: binary ``b"\\x01"``, ``b"\\x01hello\\n"``, no status on success; on failure
  ``b"\\x03command terminated with non-zero exit code: ... exit code 3"`` (plain text, no exit-code
  field; command not found: ``b"\\x03Internal error occurred: error executing command in ..."``).
* Every session ends with the server's Close 1000 right after the status (or the last output).
* ``tty=true`` with ``stdin=true`` (stderr off): output through the line discipline, e.g.
  ``b"\\x01/dev/pts/0\\r\\nhi\\r\\n"`` (message boundaries vary), then the status; the session
  ends when the process exits even though the client never closed stdin (it cannot, on v4).
* ``tty=true`` WITHOUT stdin loses output on containerd 1.6.20: ``sh -c "tty; echo hi"`` delivered
  nothing but ``b"\\x01"`` and the status in 20 of 30 runs, partial output in 3; output written
  0.5 s after the start was lost 20 of 20 times. The exit status is still right. Tests that need a
  TTY's output must request stdin too (as ``kubectl exec -it`` does).
* CRI ``Exec`` itself refuses ``tty`` with ``stderr`` (gRPC INVALID_ARGUMENT "tty and stderr cannot
  both be true") and no streams at all ("one of stdin, stdout, or stderr must be set").
* A URL is single use: a second upgrade gets ``404``. A plain GET (no upgrade) of a fresh URL gets
  ``400`` ``unable to upgrade: X-Stream-Protocol-Version is required`` (the SPDY path).
"""

from __future__ import annotations

import base64
import json
import os
import socket

import pytest
from websockets.exceptions import InvalidHandshake, InvalidStatus

from .cri_exchange import binary, exchange
from .cri_runtime import CriRuntime

V4 = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
BASE64 = "base64.channel.k8s.io"
CHANNEL = "channel.k8s.io"
SUCCESS = {"metadata": {}, "status": "Success"}


def test_v4_echo_hello(cri_runtime: CriRuntime) -> None:
    protocol, messages, code = exchange(cri_runtime.exec_url(["echo", "hello"]), [V4])
    assert protocol == V4
    frames = binary(messages)
    assert frames[0] == b"\x01"  # the initial empty message on stdout
    stdout = b"".join(f[1:] for f in frames[1:] if f[0] == 1)
    assert stdout == b"hello\n"
    assert [f[0] for f in frames[1:]] == [1] * (len(frames) - 2) + [3]
    assert frames[-1] == b'\x03{"metadata":{},"status":"Success"}'
    assert json.loads(frames[-1][1:]) == SUCCESS
    assert code == 1000


def test_v4_nonzero_exit(cri_runtime: CriRuntime) -> None:
    protocol, messages, code = exchange(cri_runtime.exec_url(["sh", "-c", "exit 3"]), [V4])
    assert protocol == V4
    frames = binary(messages)
    assert frames[0] == b"\x01"
    assert frames[-1][0] == 3
    status = json.loads(frames[-1][1:])
    assert status["metadata"] == {}
    assert status["status"] == "Failure"
    assert status["reason"] == "NonZeroExitCode"
    causes = status["details"]["causes"]
    assert [c["message"] for c in causes if c.get("reason") == "ExitCode"] == ["3"]
    assert code == 1000


def test_v4_command_not_found_is_internal_error(cri_runtime: CriRuntime) -> None:
    _, messages, _ = exchange(cri_runtime.exec_url(["nonexistent-cmd"]), [V4])
    status = json.loads(binary(messages)[-1][1:])
    assert status["reason"] == "InternalError"
    assert status["code"] == 500
    assert "executable file not found" in status["message"]


def test_v4_stdout_and_stderr_are_separate_channels(cri_runtime: CriRuntime) -> None:
    url = cri_runtime.exec_url(["sh", "-c", "echo out; echo err >&2"])
    _, messages, _ = exchange(url, [V4])
    frames = binary(messages)
    assert b"".join(f[1:] for f in frames if f[0] == 1) == b"out\n"
    assert b"".join(f[1:] for f in frames if f[0] == 2) == b"err\n"
    assert json.loads(frames[-1][1:]) == SUCCESS


def test_v4_base64(cri_runtime: CriRuntime) -> None:
    protocol, messages, _ = exchange(cri_runtime.exec_url(["echo", "hello"]), [V4_BASE64])
    assert protocol == V4_BASE64
    assert all(isinstance(m, str) for m in messages)
    assert messages[0] == "1"
    stdout = b"".join(base64.b64decode(m[1:]) for m in messages[1:] if m[0] == "1")
    assert stdout == b"hello\n"
    assert isinstance(messages[-1], str)
    assert messages[-1][0] == "3"
    assert json.loads(base64.b64decode(messages[-1][1:])) == SUCCESS


@pytest.mark.parametrize("protocol", [BASE64, CHANNEL])
def test_pre_v4_protocols_have_no_success_status(cri_runtime: CriRuntime, protocol: str) -> None:
    chosen, messages, code = exchange(cri_runtime.exec_url(["echo", "hello"]), [protocol])
    assert chosen == protocol
    if protocol == BASE64:
        assert messages == ["1", "1" + base64.b64encode(b"hello\n").decode()]
    else:
        assert messages == [b"\x01", b"\x01hello\n"]
    assert code == 1000


@pytest.mark.parametrize("protocol", [BASE64, CHANNEL])
def test_pre_v4_protocols_report_failure_as_text(cri_runtime: CriRuntime, protocol: str) -> None:
    _, messages, _ = exchange(cri_runtime.exec_url(["sh", "-c", "exit 3"]), [protocol])
    last = messages[-1]
    if protocol == BASE64:
        assert isinstance(last, str)
        assert last[0] == "3"
        text = base64.b64decode(last[1:])
    else:
        assert isinstance(last, bytes)
        assert last[0] == 3
        text = last[1:]
    assert text.startswith(b"command terminated with non-zero exit code")
    assert text.endswith(b"exit code 3")


def test_server_picks_first_supported_in_client_order(cri_runtime: CriRuntime) -> None:
    url = cri_runtime.exec_url(["true"])
    assert exchange(url, ["v5.channel.k8s.io", V4])[0] == V4
    url = cri_runtime.exec_url(["true"])
    assert exchange(url, [V4_BASE64, V4])[0] == V4_BASE64


def test_v5_only_is_forbidden(cri_runtime: CriRuntime) -> None:
    with pytest.raises(InvalidStatus) as caught:
        exchange(cri_runtime.exec_url(["true"]), ["v5.channel.k8s.io"])
    assert caught.value.response.status_code == 403
    assert caught.value.response.body in (b"", None)


def test_url_is_single_use(cri_runtime: CriRuntime) -> None:
    url = cri_runtime.exec_url(["true"])
    exchange(url, [V4])
    with pytest.raises(InvalidStatus) as caught:
        exchange(url, [V4])
    assert caught.value.response.status_code == 404


def test_tty_drops_stderr_and_uses_the_line_discipline(cri_runtime: CriRuntime) -> None:
    # stdin=True: without it, containerd 1.6 loses a TTY's output (see the top of this file).
    url = cri_runtime.exec_url(["sh", "-c", "tty; echo hi"], tty=True, stdin=True)
    _, messages, _ = exchange(url, [V4])
    frames = binary(messages)
    stdout = b"".join(f[1:] for f in frames if f[0] == 1)
    assert stdout.startswith(b"/dev/pts/")
    assert stdout.endswith(b"\r\nhi\r\n")
    assert not [f for f in frames if f[0] == 2]
    assert json.loads(frames[-1][1:]) == SUCCESS


def test_no_subprotocol_gets_an_empty_protocol_header(cri_runtime: CriRuntime) -> None:
    """Raw socket: the strict websockets client cannot even complete this handshake."""
    with pytest.raises(InvalidHandshake):  # NegotiationError or InvalidHeaderFormat
        exchange(cri_runtime.exec_url(["true"]), [])

    url = cri_runtime.exec_url(["echo", "hello"])
    path = url.removeprefix(cri_runtime.stream_base_url)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{cri_runtime.stream_port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", cri_runtime.stream_port), timeout=30) as sock:
        sock.sendall(request.encode())
        received = b""
        while chunk := sock.recv(65536):  # the server closes TCP after its Close frame
            received += chunk
    head, _, frames = received.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 101 Switching Protocols"
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:])}
    assert headers["sec-websocket-protocol"] == ""  # present, empty
    # Unmasked server frames, all short: FIN+opcode, 7-bit length, payload. channel.k8s.io rules.
    parsed: list[tuple[int, bytes]] = []
    while frames:
        opcode, length = frames[0] & 0x0F, frames[1] & 0x7F
        assert length < 126
        parsed.append((opcode, frames[2 : 2 + length]))
        frames = frames[2 + length :]
    assert parsed == [(2, b"\x01"), (2, b"\x01hello\n"), (8, b"\x03\xe8")]
