"""Starting and stopping the sandbox; HTTP-level bad input; exec refusals before the upgrade."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from kuber_exec_core import Subprotocol
from kuber_exec_core.channels import Channel, decode_message
from kuber_exec_sandbox import (
    Cluster,
    NonLoopbackError,
    PodSpec,
    Sandbox,
    demo_cluster,
    run_sandbox_in_thread,
    serve_sandbox,
)
from support.sandbox import exec_target, ready_web_pod

from .wsclient import RawWebSocket, Rejected, connect


@pytest.mark.trio
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com", "::"])
async def test_non_loopback_hosts_are_refused(host: str) -> None:
    with pytest.raises(NonLoopbackError, match="allow_non_loopback"):
        async with serve_sandbox(host=host):
            pass  # pragma: no cover


@pytest.mark.trio
async def test_kubeconfig_points_at_the_server(tmp_path: Path) -> None:
    path = tmp_path / "out" / "kubeconfig"
    async with serve_sandbox(kubeconfig_path=path) as sandbox:
        assert sandbox.kubeconfig_path == path
        config = json.loads(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == sandbox.url
    (context,) = config["contexts"]
    assert config["current-context"] == context["name"]
    assert context["context"]["namespace"] == "demo"
    assert config["users"][0]["user"] == {}
    assert path.exists(), "a kubeconfig path given by the caller is left in place"


def test_thread_runner_serves_and_stops() -> None:
    import httpx

    with run_sandbox_in_thread() as sandbox:
        assert httpx.get(f"{sandbox.url}/version").json()["major"] == "1"
        default_config = sandbox.kubeconfig_path
        assert default_config.exists()
    assert not default_config.exists(), "the temporary kubeconfig is removed"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sandbox.url}/version")


def test_thread_runner_reports_start_errors() -> None:
    with pytest.raises(NonLoopbackError), run_sandbox_in_thread(host="0.0.0.0"):
        pass  # pragma: no cover


async def raw_http(sandbox: Sandbox, request: bytes) -> bytes:
    host, port = sandbox.url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(request)
        answer = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    return answer


@pytest.mark.trio
@pytest.mark.parametrize(
    "request_bytes",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET /version HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"GET /version HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 200_000 + b"\r\n\r\n",
    ],
)
async def test_malformed_http_gets_400_and_a_closed_connection(
    sandbox: Sandbox, request_bytes: bytes
) -> None:
    answer = await raw_http(sandbox, request_bytes)
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 431 ")), answer[:80]


@pytest.mark.trio
async def test_keep_alive_serves_several_requests(sandbox: Sandbox) -> None:
    request = b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
    answer = await raw_http(
        sandbox, request * 2 + b"GET /api HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert answer.count(b"HTTP/1.1 200 ") == 3


@pytest.mark.trio
async def test_bearer_tokens_are_accepted_and_never_logged(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "s3cr3t-token-value"
    target = exec_target(ready_web_pod(sandbox.cluster), ["true"], stdout="true")
    socket = await connect(
        sandbox,
        target,
        ["v5.channel.k8s.io", "base64url.bearer.authorization.k8s.io.czNjcjN0"],
        extra_headers=[("Authorization", f"Bearer {secret}")],
    )
    assert isinstance(socket, RawWebSocket)
    assert socket.subprotocol == "v5.channel.k8s.io"
    await socket.receive_all()
    answer = await raw_http(
        sandbox,
        f"GET /api/v1/namespaces/demo/pods HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}"
        "\r\nConnection: close\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert caplog.records, "requests are logged at debug level"
    assert secret not in caplog.text
    assert "czNjcjN0" not in caplog.text


def unusual_cluster() -> Cluster:
    cluster = demo_cluster()
    cluster.add_deployment(
        "demo", "crash", workspace_uid="demo-uid", pods=[PodSpec(name="crash-1", running=False)]
    )
    cluster.add_deployment(
        "demo",
        "pending",
        workspace_uid="demo-uid",
        pods=[PodSpec(name="pending-1", scheduled=False, phase="Pending", running=False)],
    )
    cluster.add_deployment(
        "demo", "two", workspace_uid="demo-uid", containers=("a", "b"), pods=[PodSpec(name="two-1")]
    )
    return cluster


@pytest.mark.trio
@pytest.mark.parametrize(
    ("pod", "query", "offer_v5", "method", "status", "message"),
    [
        ("nope", {"stdout": "1"}, True, "GET", 404, 'pods "nope" not found'),
        (
            "READY",
            {"stdout": "1", "container": "x"},
            True,
            "GET",
            400,
            "container x is not valid for pod READY",
        ),
        (
            "two-1",
            {"stdout": "1"},
            True,
            "GET",
            400,
            "a container name must be specified for pod two-1, choose one of: [a b]",
        ),
        (
            "pending-1",
            {"stdout": "1"},
            True,
            "GET",
            400,
            "pod pending-1 does not have a host assigned",
        ),
        (
            "READY",
            {"tty": "1"},
            True,
            "GET",
            400,
            "you must specify at least 1 of stdin, stdout, stderr",
        ),
        ("READY", {"stdout": "1"}, True, "POST", 405, None),
        ("READY", {"stdout": "1"}, True, "PUT", 405, None),
        ("crash-1", {"stdout": "1"}, False, "GET", 500, None),
    ],
)
async def test_exec_refusals_before_the_upgrade(
    pod: str, query: dict[str, str], offer_v5: bool, method: str, status: int, message: str | None
) -> None:
    async with serve_sandbox(unusual_cluster(), offer_v5=offer_v5) as sandbox:
        ready = ready_web_pod(sandbox.cluster)
        pod = ready if pod == "READY" else pod
        target = exec_target(pod, ["true"], **query)
        answer = await connect(
            sandbox, target, ["v5.channel.k8s.io", "v4.channel.k8s.io"], method=method
        )
    assert isinstance(answer, Rejected)
    assert answer.status == status
    if status == 500:
        # The kubelet's plain-text answer on the legacy path.
        assert answer.body == b'container not found ("app")'
    elif message is not None:
        assert json.loads(answer.body)["message"] == message.replace("READY", ready)


@pytest.mark.trio
async def test_a_stopped_container_on_the_v5_path_is_an_internal_error_status() -> None:
    async with serve_sandbox(unusual_cluster()) as sandbox:
        target = exec_target("crash-1", ["true"], stdout="1")
        socket = await connect(sandbox, target, ["v5.channel.k8s.io"])
        assert isinstance(socket, RawWebSocket)
        messages, closed = await socket.receive_all()
    decoded = [decode_message(Subprotocol.V5, m) for m in messages]
    assert decoded[0] == (Channel.STDOUT, b"")
    assert decoded[-1] is not None
    status = json.loads(decoded[-1][1])
    assert status["reason"] == "InternalError"
    assert status["message"] == (
        'Internal error occurred: unable to upgrade connection: container not found ("app")'
    )
    assert closed.code == 1000


@pytest.mark.trio
async def test_exec_without_websocket_upgrade_is_400(sandbox: Sandbox) -> None:
    target = exec_target(ready_web_pod(sandbox.cluster), ["true"], stdout="1")
    answer = await raw_http(
        sandbox, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 400 ")


@pytest.mark.trio
async def test_bad_websocket_version_is_400(sandbox: Sandbox) -> None:
    target = exec_target(ready_web_pod(sandbox.cluster), ["true"], stdout="1")
    request = (
        f"GET {target} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n"
        "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
    )
    answer = await raw_http(sandbox, request.encode())
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert sandbox.live_processes == 0


def test_sandbox_command_prints_a_kubectl_line_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kuber_exec_sandbox",
            "--kubeconfig-out",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("serving until Ctrl-C"):
                break
        assert any(f"kubeconfig: {kubeconfig}" in line for line in lines), lines
        assert any(line.startswith("try: kubectl --kubeconfig ") for line in lines)
        assert kubeconfig.exists()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        process.stderr.close()


def test_sandbox_command_refuses_a_public_host() -> None:
    from kuber_exec_sandbox import main

    assert main(["--host", "0.0.0.0"]) == 2
