"""``kuber-exec port-forward`` end to end: a separate process against the in-process sandbox,
whose pod port maps to an echo server of the test's."""

from __future__ import annotations

import signal
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from kuber_exec_sandbox import PodObject, Sandbox

from .clirun import run_cli, spawn_cli


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data.upper())


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _web_pod(sandbox: Sandbox) -> PodObject:
    web = sandbox.cluster.deployment("demo", "web")
    assert web is not None
    return next(p for p in sandbox.cluster.pods_of(web) if p.ready)


def _cluster_args(sandbox: Sandbox) -> list[str]:
    return [
        "--kubeconfig",
        str(sandbox.kubeconfig_path),
        "--project",
        "demo",
        "--workspace-uid",
        "demo-uid",
    ]


def test_it_prints_the_bound_addresses_forwards_and_ends_cleanly_on_ctrl_c(
    sandbox: Sandbox, echo_port: int
) -> None:
    pod = _web_pod(sandbox)
    pod.ports[8080] = ("127.0.0.1", echo_port)
    with spawn_cli("port-forward", *_cluster_args(sandbox), "web", ":8080", "0:8080") as process:
        assert process.stdout is not None
        lines = [process.stdout.readline().decode() for _ in range(2)]
        ports = []
        for line in lines:
            assert line.startswith("Forwarding from 127.0.0.1:"), lines
            assert line.endswith(" -> 8080\n")
            ports.append(int(line.split(":")[1].split(" ")[0]))
        for port in ports:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(b"hello")
                client.shutdown(socket.SHUT_WR)
                received = b""
                while data := client.recv(65536):
                    received += data
            assert received == b"HELLO"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert process.stderr is not None
        assert process.stderr.read() == b""


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("0", "'0': REMOTE must be"),
        ("70000", "'70000': REMOTE must be"),
        ("a:80", "'a:80' is not [LOCAL:]REMOTE"),
    ],
)
def test_a_bad_port_is_a_usage_error(sandbox: Sandbox, spec: str, words: str) -> None:
    done = run_cli("port-forward", *_cluster_args(sandbox), "web", spec)
    assert done.returncode == 125
    assert done.stderr.decode().startswith("usage: kuber-exec port-forward")
    assert f"kuber-exec: EXEC_INVALID: {words}" in done.stderr.decode()


def test_another_workspaces_deployment_is_refused(sandbox: Sandbox) -> None:
    done = run_cli("port-forward", *_cluster_args(sandbox), "other", "8080")
    assert done.returncode == 125
    assert done.stderr.decode().startswith("kuber-exec: EXEC_TARGET_FORBIDDEN: ")
    assert done.stdout == b""
