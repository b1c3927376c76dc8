"""The exec WebSocket on the wire, checked with a raw client (protocol.md §1–6)."""

from __future__ import annotations

import json
import os

import pytest
import trio

from kuber_exec_core import Error, Exit, Subprotocol
from kuber_exec_core.channels import Channel, decode_message, encode_message, parse_status
from kuber_exec_core.server import MAX_CLIENT_FRAME_BYTES
from kuber_exec_sandbox import Sandbox, demo_cluster, serve_sandbox
from support.sandbox import exec_target, ready_web_pod

from .wsclient import RawWebSocket, Rejected, connect

V5, V4 = Subprotocol.V5, Subprotocol.V4


async def open_exec(
    sandbox: Sandbox,
    command: list[str],
    protocols: list[str] | None = None,
    /,
    **flags: str,
) -> RawWebSocket:
    flags = flags or {"stdout": "true", "stderr": "true"}
    target = exec_target(ready_web_pod(sandbox.cluster), command, **flags)
    socket = await connect(sandbox, target, [V5.value] if protocols is None else protocols)
    assert isinstance(socket, RawWebSocket), socket
    return socket


async def end_left_processes(sandbox: Sandbox) -> None:
    """Kill what a client left running (as on a real cluster, a command outlives its client's
    close) and wait until every child is reaped."""
    sandbox.cluster.faults.kill_processes("demo", ready_web_pod(sandbox.cluster))
    with trio.fail_after(30):
        await sandbox.wait_processes_reaped()


def decoded(protocol: Subprotocol, messages: list[bytes | str]) -> list[tuple[int, bytes]]:
    out = []
    for message in messages:
        item = decode_message(protocol, message)
        assert item is not None, "the server never sends an empty message (only the channel)"
        out.append(item)
    return out


def stream_bytes(items: list[tuple[int, bytes]], channel: int) -> bytes:
    return b"".join(payload for ch, payload in items if ch == channel)


@pytest.mark.trio
async def test_v5_session_order_initial_message_output_status_close(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["sh", "-c", "printf out; printf err >&2"])
    assert socket.subprotocol == V5.value
    messages, closed = await socket.receive_all()
    items = decoded(V5, messages)
    assert items[0] == (Channel.STDOUT, b""), "first: one empty message on the lowest channel"
    assert items[-1][0] == Channel.ERROR, "the status comes last"
    assert json.loads(items[-1][1]) == {"metadata": {}, "status": "Success"}
    assert [ch for ch, _ in items].count(Channel.ERROR) == 1
    assert stream_bytes(items[1:], Channel.STDOUT) == b"out"
    assert stream_bytes(items, Channel.STDERR) == b"err"
    assert closed.code == 1000


@pytest.mark.trio
@pytest.mark.parametrize(
    ("flags", "channel"),
    [
        ({"stderr": "true"}, Channel.STDERR),
        ({"stdin": "true"}, Channel.ERROR),
        ({"stdout": "1", "stderr": "1"}, Channel.STDOUT),
    ],
)
async def test_initial_message_on_lowest_writable_channel(
    sandbox: Sandbox, flags: dict[str, str], channel: Channel
) -> None:
    socket = await open_exec(sandbox, ["true"], **flags)
    first = await socket.receive()
    assert first == bytes((channel,))
    await socket.receive_all()


@pytest.mark.trio
async def test_non_zero_exit_is_an_exit_code_cause(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["sh", "-c", "exit 7"])
    messages, _ = await socket.receive_all()
    channel, status = decoded(V5, messages)[-1]
    assert channel == Channel.ERROR
    body = json.loads(status)
    assert body["reason"] == "NonZeroExitCode"
    assert {"reason": "ExitCode", "message": "7"} in body["details"]["causes"]
    assert parse_status(V5, status) == Exit(7, "NonZeroExitCode", body["message"])


@pytest.mark.trio
async def test_missing_executable_is_an_internal_error(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["no-such-program-kuber-exec"])
    messages, closed = await socket.receive_all()
    status = json.loads(decoded(V5, messages)[-1][1])
    assert status["reason"] == "InternalError"
    assert status["code"] == 500
    assert "no-such-program-kuber-exec" in status["message"]
    assert closed.code == 1000


@pytest.mark.trio
async def test_environment_has_hostname_and_pod_env() -> None:
    cluster = demo_cluster()
    pod = cluster.pod("demo", ready_web_pod(cluster))
    assert pod is not None
    pod.env["GREETING"] = "hello"
    async with serve_sandbox(cluster) as sandbox:
        socket = await open_exec(sandbox, ["sh", "-c", 'printf "%s %s" "$HOSTNAME" "$GREETING"'])
        messages, _ = await socket.receive_all()
    assert stream_bytes(decoded(V5, messages), Channel.STDOUT) == f"{pod.name} hello".encode()


@pytest.mark.trio
async def test_v5_close_ends_stdin_and_output_keeps_flowing(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["sh", "-c", "cat; echo done"], stdin="true", stdout="true")
    await socket.send(encode_message(V5, Channel.STDIN, b"abc"))
    await socket.send(b"")  # an empty message is a no-op, not EOF
    await socket.send(bytes((Channel.STDIN,)))  # [0]: stdin with no payload is not EOF either
    await socket.send(bytes((Channel.CLOSE, Channel.STDIN)))
    messages, closed = await socket.receive_all()
    items = decoded(V5, messages)
    assert stream_bytes(items, Channel.STDOUT) == b"abcdone\n"
    assert json.loads(items[-1][1])["status"] == "Success"
    assert closed.code == 1000


@pytest.mark.trio
@pytest.mark.parametrize("bad_close", [bytes((255,)), bytes((255, 0, 0)), bytes((255, 7))])
async def test_malformed_v5_close_tears_the_session_down(
    sandbox: Sandbox, bad_close: bytes
) -> None:
    socket = await open_exec(sandbox, ["sleep", "1000"], stdin="true", stdout="true")
    assert await socket.receive() == bytes((Channel.STDOUT,))
    await socket.send(bad_close)
    messages, closed = await socket.receive_all()
    assert messages == [], "no status after a teardown"
    assert closed.code == 1002
    await sandbox.wait_processes_reaped()


@pytest.mark.trio
async def test_v5_close_on_a_v4_session_is_dropped(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["cat"], [V4.value], stdin="true", stdout="true")
    assert socket.subprotocol == V4.value
    assert await socket.receive() == bytes((Channel.STDOUT,))
    await socket.send(bytes((Channel.CLOSE, Channel.STDIN)))
    await socket.send(encode_message(V4, Channel.STDIN, b"still open"))
    echoed = b""
    while echoed != b"still open":
        message = await socket.receive()
        assert isinstance(message, bytes)
        echoed += message[1:]
    await socket.close()
    _, closed = await socket.receive_all()
    assert closed.code == 1000
    await end_left_processes(sandbox)


@pytest.mark.trio
async def test_fragments_are_not_reassembled(sandbox: Sandbox) -> None:
    # A real server reads each frame as a whole message: the continuation frame's first byte
    # ('c' = 99) is taken as its channel, which is dropped.
    socket = await open_exec(sandbox, ["cat"], stdin="true", stdout="true")
    await socket.send(bytes((Channel.STDIN,)) + b"ab", finished=False)
    await socket.send(b"cd", finished=True)
    await socket.send(bytes((Channel.CLOSE, Channel.STDIN)))
    messages, _ = await socket.receive_all()
    assert stream_bytes(decoded(V5, messages), Channel.STDOUT) == b"ab"


@pytest.mark.trio
async def test_pings_are_answered_mid_session(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["cat"], stdin="true", stdout="true")
    assert await socket.receive() == bytes((Channel.STDOUT,))
    assert await socket.ping(b"keepalive-1") == b"keepalive-1"
    await socket.send(bytes((Channel.CLOSE, Channel.STDIN)))
    messages, closed = await socket.receive_all()
    assert json.loads(decoded(V5, messages)[-1][1])["status"] == "Success"
    assert closed.code == 1000


@pytest.mark.trio
async def test_a_text_frame_on_a_binary_protocol_ends_the_session(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["sleep", "1000"], stdin="true", stdout="true")
    assert await socket.receive() == bytes((Channel.STDOUT,))
    await socket.send("\x00text")
    messages, closed = await socket.receive_all()
    assert (messages, closed.code) == ([], 1002)
    await sandbox.wait_processes_reaped()


@pytest.mark.trio
async def test_oversized_frame_ends_the_session(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["sleep", "1000"], stdin="true", stdout="true")
    assert await socket.receive() == bytes((Channel.STDOUT,))
    await socket.send(bytes((Channel.STDIN,)) + bytes(MAX_CLIENT_FRAME_BYTES))
    messages, closed = await socket.receive_all()
    assert messages == []
    assert closed.code == 1009
    await sandbox.wait_processes_reaped()


@pytest.mark.trio
async def test_messages_to_server_channels_are_dropped(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["cat"], stdin="true", stdout="true")
    for channel in (Channel.STDOUT, Channel.STDERR, Channel.ERROR, 9, 200):
        await socket.send(bytes((channel,)) + b"ignored")
    await socket.send(encode_message(V5, Channel.STDIN, b"kept"))
    await socket.send(bytes((Channel.CLOSE, Channel.STDIN)))
    messages, _ = await socket.receive_all()
    assert stream_bytes(decoded(V5, messages), Channel.STDOUT) == b"kept"


@pytest.mark.trio
@pytest.mark.parametrize("protocol", [Subprotocol.V4_BASE64, Subprotocol.BASE64])
async def test_base64_protocols_use_text_frames(sandbox: Sandbox, protocol: Subprotocol) -> None:
    payload = bytes(range(256))
    socket = await open_exec(sandbox, ["cat"], [protocol.value], stdin="true", stdout="true")
    assert socket.subprotocol == protocol.value
    assert await socket.receive() == "1"  # '0'+1, then the base64 of nothing
    await socket.send(encode_message(protocol, Channel.STDIN, payload))
    received = b""
    while received != payload:
        message = await socket.receive()
        assert isinstance(message, str)
        item = decode_message(protocol, message)
        assert item is not None
        received += item[1]
    await socket.close()
    await socket.receive_all()
    await end_left_processes(sandbox)


@pytest.mark.trio
@pytest.mark.parametrize("protocol", [Subprotocol.LEGACY, Subprotocol.BASE64])
async def test_pre_v4_sends_nothing_on_success_and_text_on_failure(
    sandbox: Sandbox, protocol: Subprotocol
) -> None:
    success = await open_exec(sandbox, ["true"], [protocol.value])
    messages, closed = await success.receive_all()
    assert [ch for ch, _ in decoded(protocol, messages)] == [Channel.STDOUT]
    assert closed.code == 1000
    failure = await open_exec(sandbox, ["sh", "-c", "exit 3"], [protocol.value])
    messages, _ = await failure.receive_all()
    channel, text = decoded(protocol, messages)[-1]
    assert channel == Channel.ERROR
    assert text == b"command terminated with non-zero exit code: exit status 3"
    assert isinstance(parse_status(protocol, text), Error)


@pytest.mark.trio
async def test_no_subprotocol_offered_gets_legacy_with_an_empty_header(sandbox: Sandbox) -> None:
    target = exec_target(ready_web_pod(sandbox.cluster), ["printf", "x"], stdout="true")
    socket = await connect(sandbox, target, None)
    assert isinstance(socket, RawWebSocket)
    assert socket.subprotocol == ""
    messages, _ = await socket.receive_all()
    assert messages == [b"\x01", b"\x01x"]


@pytest.mark.trio
@pytest.mark.parametrize(
    ("offer_v5", "offered", "chosen"),
    [
        (True, ["v5.channel.k8s.io", "v4.channel.k8s.io"], "v5.channel.k8s.io"),
        # The v5 path answers whenever v5 is offered anywhere, and knows only v5.
        (True, ["v4.channel.k8s.io", "v5.channel.k8s.io"], "v5.channel.k8s.io"),
        (True, ["x.example", "v4.base64.channel.k8s.io"], "v4.base64.channel.k8s.io"),
        (False, ["v5.channel.k8s.io", "v4.channel.k8s.io"], "v4.channel.k8s.io"),
        (False, ["channel.k8s.io", "v4.channel.k8s.io"], "channel.k8s.io"),
        (
            True,
            ["base64url.bearer.authorization.k8s.io.dG9rZW4", "v4.channel.k8s.io"],
            "v4.channel.k8s.io",
        ),
    ],
)
async def test_first_client_preferred_supported_protocol(
    offer_v5: bool, offered: list[str], chosen: str
) -> None:
    async with serve_sandbox(offer_v5=offer_v5) as sandbox:
        socket = await open_exec(sandbox, ["true"], offered)
        assert socket.subprotocol == chosen
        await socket.receive_all()


@pytest.mark.trio
@pytest.mark.parametrize(
    ("offer_v5", "offered"),
    [(False, ["v5.channel.k8s.io"]), (True, ["v6.channel.k8s.io", "SPDY/3.1"])],
)
async def test_no_common_protocol_is_403_with_an_empty_body(
    offer_v5: bool, offered: list[str]
) -> None:
    async with serve_sandbox(offer_v5=offer_v5) as sandbox:
        target = exec_target(ready_web_pod(sandbox.cluster), ["true"], stdout="true")
        answer = await connect(sandbox, target, offered)
    assert isinstance(answer, Rejected)
    assert (answer.status, answer.body) == (403, b"")


@pytest.mark.trio
async def test_flags_follow_the_api_servers_boolean_rule(sandbox: Sandbox) -> None:
    # "False" (the official Python client's spelling) is false; an empty value is true.
    socket = await open_exec(
        sandbox, ["sh", "-c", "printf o; printf e >&2"], stdout="", stderr="False", stdin="0"
    )
    messages, _ = await socket.receive_all()
    items = decoded(V5, messages)
    assert stream_bytes(items, Channel.STDOUT) == b"o"
    assert stream_bytes(items, Channel.STDERR) == b""


@pytest.mark.trio
async def test_tty_runs_under_a_terminal_that_follows_resize(sandbox: Sandbox) -> None:
    socket = await open_exec(
        sandbox,
        ["sh", "-c", "read line; stty size; echo err >&2; test -t 0 && echo tty"],
        stdin="true",
        stdout="true",
        stderr="true",
        tty="true",
    )
    assert await socket.receive() == bytes((Channel.STDOUT,))
    await socket.send(encode_message(V5, Channel.RESIZE, b'{"Width":100,"Height":40}\n'))
    await socket.send(encode_message(V5, Channel.STDIN, b"go\n"))
    messages, _ = await socket.receive_all()
    items = decoded(V5, messages)
    output = stream_bytes(items, Channel.STDOUT)
    assert b"40 100\r\n" in output
    assert b"err\r\n" in output, "with a TTY stderr is merged into stdout"
    assert b"tty\r\n" in output
    assert stream_bytes(items, Channel.STDERR) == b""
    assert json.loads(items[-1][1])["status"] == "Success"


@pytest.mark.trio
async def test_bad_resize_json_ends_the_session(sandbox: Sandbox) -> None:
    socket = await open_exec(sandbox, ["sleep", "1000"], stdin="true", stdout="true", tty="true")
    assert await socket.receive() == bytes((Channel.STDOUT,))
    await socket.send(encode_message(V5, Channel.RESIZE, b'{"Width":'))
    messages, closed = await socket.receive_all()
    assert (messages, closed.code) == ([], 1002)
    await sandbox.wait_processes_reaped()


@pytest.mark.trio
async def test_output_is_complete_and_binary_safe_under_volume(sandbox: Sandbox) -> None:
    size = 3 * 1024 * 1024
    socket = await open_exec(sandbox, ["head", "-c", str(size), "/dev/urandom"], stdout="true")
    messages, _ = await socket.receive_all()
    items = decoded(V5, messages)
    assert len(stream_bytes(items, Channel.STDOUT)) == size
    assert max(len(p) for _, p in items) <= 32 * 1024


@pytest.mark.trio
async def test_orphans_holding_the_output_do_not_hold_the_session(sandbox: Sandbox) -> None:
    with trio.fail_after(30):
        socket = await open_exec(sandbox, ["sh", "-c", "sleep 1000 & echo started"])
        messages, closed = await socket.receive_all()
    assert stream_bytes(decoded(V5, messages), Channel.STDOUT) == b"started\n"
    assert closed.code == 1000


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def started_pid(socket: RawWebSocket) -> int:
    """Read the pid a ``sh -c 'echo $$; exec sleep 1000'`` prints first."""
    text = b""
    while not text.endswith(b"\n"):
        message = await socket.receive()
        assert isinstance(message, bytes)
        text += message[1:]
    return int(text)


@pytest.mark.trio
@pytest.mark.parametrize("how", ["close", "vanish"])
async def test_client_leaving_leaves_the_process_running(sandbox: Sandbox, how: str) -> None:
    # As a real cluster does: the protocol has no signal channel (issue 20), and a client that
    # leaves processes behind must show on the sandbox too.
    socket = await open_exec(sandbox, ["sh", "-c", "echo $$; exec sleep 1000"])
    pid = await started_pid(socket)
    assert sandbox.live_processes == 1
    if how == "close":
        await socket.close()
        _, closed = await socket.receive_all()
        assert closed.code == 1000  # the server has seen the close
    else:
        await socket.vanish()
    # A second session is served after the first one's end was read: the sleep still runs.
    probe = await open_exec(sandbox, ["kill", "-0", str(pid)])
    messages, _ = await probe.receive_all()
    assert any(isinstance(m, bytes) and b'"Success"' in m for m in messages)  # kill -0: alive
    assert pid_exists(pid)
    assert sandbox.live_processes == 1
    await end_left_processes(sandbox)
    assert not pid_exists(pid)


@pytest.mark.trio
async def test_stopping_the_server_kills_and_reaps_running_processes() -> None:
    async with serve_sandbox() as sandbox:
        sockets = [
            await open_exec(sandbox, ["sh", "-c", "echo $$; exec sleep 1000"]) for _ in range(3)
        ]
        pids = [await started_pid(socket) for socket in sockets]
        assert sandbox.live_processes == 3
    assert sandbox.live_processes == 0
    for socket in sockets:
        await socket.vanish()
    assert not any(pid_exists(pid) for pid in pids)


@pytest.mark.trio
async def test_no_process_leaks_across_many_sessions(sandbox: Sandbox) -> None:
    async def one(index: int) -> None:
        socket = await open_exec(
            sandbox, ["sh", "-c", "echo $$; exec cat"], stdin="true", stdout="true"
        )
        await started_pid(socket)
        match index % 4:
            case 0:
                await socket.send(bytes((Channel.CLOSE, Channel.STDIN)))
                await socket.receive_all()
            case 1:
                await socket.close()
                await socket.receive_all()
            case 2:
                await socket.vanish()
            case _:
                await socket.send(bytes((Channel.CLOSE, 1, 2)))
                await socket.receive_all()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for index in range(40):
                nursery.start_soon(one, index)
    # The sessions whose client closed or vanished left their cat running (as on a real
    # cluster); the rest ended their process.
    await end_left_processes(sandbox)
    assert sandbox.live_processes == 0


@pytest.mark.trio
async def test_clients_closing_amid_output_never_break_the_server(sandbox: Sandbox) -> None:
    # Races the client's Close against output, exit and status; the server must keep serving.
    async def one(index: int) -> None:
        socket = await open_exec(sandbox, ["sh", "-c", "head -c 200000 /dev/zero"])
        for _ in range(index % 5):
            await socket.receive()
        await socket.close()
        await socket.receive_all()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for index in range(30):
                nursery.start_soon(one, index)
        await sandbox.wait_processes_reaped()
    socket = await open_exec(sandbox, ["printf", "still serving"])
    messages, _ = await socket.receive_all()
    assert stream_bytes(decoded(V5, messages), Channel.STDOUT) == b"still serving"
