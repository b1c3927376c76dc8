"""Port-forward through the whole real path (apiserver -> kubelet -> containerd) to the
``shell`` pod: on a current release over the tunnel (``SPDY/3.1+portforward.k8s.io``), on 1.20
over the legacy channels after the tunnel's upgrade is refused with 400. Both runtimes.

The pods run with ``hostNetwork: true``, so a port "in the pod" is a port of the cluster's
network namespace, where these tests run too: the echo server is the test's own, and an HTTP
server is busybox's ``httpd`` started in the pod by an exec.
"""

from __future__ import annotations

import hashlib
import json
import resource
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import anyio
import anyio.abc
import pytest

from support.sockets import echo_server

from .kube import WS_MAIN, Cluster, deployment, kubectl

pytestmark = pytest.mark.anyio


def workspace(adapter: ModuleType) -> Any:
    return adapter.Workspace(project="kx-target", uid=WS_MAIN)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """An echo server on the cluster network namespace's loopback: the pod's port. Threads and
    blocking sockets (``support.echo_server``): what it holds is bounded, so the memory the
    tests measure is the library's."""
    with echo_server() as port:
        yield port


async def read_all(stream: anyio.abc.ByteStream) -> bytes:
    received = bytearray()
    try:
        async for data in stream:
            received += data
    except anyio.EndOfStream:
        pass
    return bytes(received)


def expected_transport(server_minor: int) -> str:
    # The tunnel's gate (PortForwardWebsockets) is on by default from 1.31.
    return "tunnel" if server_minor >= 31 else "legacy"


async def test_a_connection_echoes_over_the_servers_transport(
    adapter: ModuleType, workloads: Any, admin_service: Any, echo_port: int, server_minor: int
) -> None:
    async with adapter.PortForward(admin_service, workspace(adapter), "shell") as forward:
        with anyio.fail_after(60):
            async with await forward.connect(echo_port) as stream:
                await stream.send(b"ping over the real path")
                if forward.transport_in_use == "tunnel":
                    await stream.send_eof()
                    assert await read_all(stream) == b"ping over the real path"
                else:
                    got = b""
                    while len(got) < 23:
                        got += await stream.receive()
                    assert got == b"ping over the real path"
        assert forward.transport_in_use == expected_transport(server_minor)


async def test_forcing_the_tunnel_on_an_old_server_is_its_400(
    adapter: ModuleType, workloads: Any, admin_service: Any, echo_port: int, server_minor: int
) -> None:
    if server_minor >= 31:
        pytest.skip("this server speaks the tunnel")
    async with adapter.PortForward(
        admin_service, workspace(adapter), "shell", transport="tunnel"
    ) as forward:
        with pytest.raises(adapter.ExecError) as caught:
            await forward.connect(echo_port)
    assert caught.value.http_status == 400


async def test_a_gibibyte_through_one_connection_keeps_every_byte_in_flat_memory(
    adapter: ModuleType, workloads: Any, admin_service: Any, echo_port: int
) -> None:
    # 1024 MiB out and the same back through one connection, each side hashed as it streams;
    # the process's peak RSS grows by far less than what went through (backpressure: nothing
    # piles up anywhere).
    size = 1024 * 1024 * 1024
    block = bytes(range(256)) * 1024
    peak_before = _peak_rss()
    async with adapter.PortForward(admin_service, workspace(adapter), "shell") as forward:
        with anyio.fail_after(900):
            async with await forward.connect(echo_port) as stream:
                sent = hashlib.sha256()
                received = hashlib.sha256()
                count = 0

                async def send() -> None:
                    for _ in range(size // len(block)):
                        await stream.send(block)
                        sent.update(block)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(send)
                    while count < size:
                        data = await stream.receive()
                        received.update(data)
                        count += len(data)
    assert count == size
    assert received.hexdigest() == sent.hexdigest()
    assert _peak_rss() - peak_before < 128 * 1024 * 1024


def _peak_rss() -> int:
    """This process's peak resident set, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def test_two_hundred_concurrent_connections(
    adapter: ModuleType, workloads: Any, admin_service: Any, echo_port: int
) -> None:
    answers: list[bytes] = []
    async with adapter.PortForward(admin_service, workspace(adapter), "shell") as forward:
        with anyio.fail_after(180):

            async def one(i: int) -> None:
                payload = b"connection %d" % i
                async with await forward.connect(echo_port) as stream:
                    await stream.send(payload)
                    got = b""
                    while len(got) < len(payload):
                        got += await stream.receive()
                    answers.append(got)

            async with anyio.create_task_group() as tasks:
                for i in range(200):
                    tasks.start_soon(one, i)
    assert sorted(answers) == sorted(b"connection %d" % i for i in range(200))


async def test_nothing_listening_fails_with_the_kubelets_message(
    adapter: ModuleType, workloads: Any, admin_service: Any, echo_port: int
) -> None:
    async with adapter.PortForward(admin_service, workspace(adapter), "shell") as forward:
        with anyio.fail_after(60):
            async with await forward.connect(1) as stream:
                with pytest.raises(adapter.ExecError) as caught:
                    await read_all(stream)
            assert "1" in caught.value.message
            # The forward lives on.
            async with await forward.connect(echo_port) as stream:
                await stream.send(b"x")
                assert await stream.receive() == b"x"


async def test_an_http_server_in_the_pod_answers_through_a_local_listener(
    adapter: ModuleType, workloads: Any, admin_service: Any
) -> None:
    root = f"/tmp/kx-http-{uuid.uuid4().hex}"
    body = uuid.uuid4().hex
    # A port of this run's own: the pods share the node's network (hostNetwork).
    http_port = 18_000 + uuid.uuid4().int % 1000
    started = await admin_service.execute(
        adapter.ExecRequest(
            workspace=workspace(adapter),
            deployment="shell",
            command=[
                "sh",
                "-c",
                f"mkdir -p {root} && echo {body} > {root}/index.html && "
                f"(httpd -p 127.0.0.1:{http_port} -h {root} || busybox httpd -p "
                f"127.0.0.1:{http_port} -h {root})",
            ],
        )
    )
    assert started.exit_code == 0, started.stderr_text
    try:
        async with (
            adapter.PortForward(admin_service, workspace(adapter), "shell") as forward,
            forward.listen([(0, http_port)]) as bound,
        ):
            with anyio.fail_after(60):
                async with await anyio.connect_tcp("127.0.0.1", bound[0].local_port) as client:
                    await client.send(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
                    answer = await read_all(client)
        assert answer.startswith(b"HTTP/1.")
        assert body.encode() in answer
    finally:
        await admin_service.execute(
            adapter.ExecRequest(
                workspace=workspace(adapter),
                deployment="shell",
                command=[
                    "sh",
                    "-c",
                    f"for p in $(pidof httpd); do kill $p; done; rm -rf {root}",
                ],
            )
        )


async def test_a_deleted_pod_fails_its_connections_and_new_ones_reach_the_next_pod(
    anyio_backend: str,
    adapter: ModuleType,
    cluster: Cluster,
    workloads: Any,
    admin_service: Any,
    echo_port: int,
) -> None:
    # A Deployment of its own with two replicas: the forward's pod runs an echo server of its
    # own (busybox nc, killed with the pod), and the other replica is ready to take over. The
    # pod is deleted while a connection to its server is busy: that connection fails with an
    # ExecError; the next connection goes to the other pod with nothing done by the caller.
    name = f"pf-move-{anyio_backend}"
    ns = cluster.main_ns
    manifest = deployment(name, namespace=ns, image=cluster.image, workspace=WS_MAIN, replicas=2)
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest).encode())
    try:
        kubectl(cluster, "rollout", "status", f"deployment/{name}", "-n", ns,
                "--timeout=120s", timeout=130)  # fmt: skip
        # hostNetwork: the pod's port is this namespace's, so a port of this run's own.
        pod_port = 19_000 + uuid.uuid4().int % 1000
        async with adapter.PortForward(admin_service, workspace(adapter), name) as forward:
            with anyio.fail_after(120):
                async with await forward.connect(echo_port) as stream:
                    await stream.send(b"before")
                    assert await _read_exactly(stream, 6) == b"before"
                doomed = forward.target.pod
                kubectl(cluster, "exec", "-n", ns, doomed, "--", "sh", "-c",
                        f"nc -ll -p {pod_port} -e cat </dev/null >/dev/null 2>&1 &")  # fmt: skip
                await _wait_listening(pod_port)
                held = await forward.connect(pod_port)
                await held.send(b"held")
                assert await _read_exactly(held, 4) == b"held"
                kubectl(cluster, "delete", "pod", doomed, "-n", ns, "--wait=false")
                with pytest.raises(adapter.ExecError) as caught:
                    await _echo_until_it_ends(held)
                await held.aclose()
                # Ours (the pod read at the clean end: "is being deleted", "is gone"), or the
                # kubelet's when the dying server reset the connection.
                assert caught.value.code is adapter.ExecErrorCode.FAILED
                message = caught.value.message
                assert f"pod {doomed} is" in message or "connection reset by peer" in message
                async with await forward.connect(echo_port) as stream:
                    await stream.send(b"after")
                    assert await _read_exactly(stream, 5) == b"after"
                assert forward.target.pod != doomed
    finally:
        kubectl(cluster, "delete", "deployment", name, "-n", ns, "--wait=false")


async def _echo_until_it_ends(stream: anyio.abc.ByteStream) -> None:
    """Keep a round trip going until the stream ends (what ended it propagates)."""
    while True:
        await stream.send(b"x" * 1024)
        await stream.receive()


async def _read_exactly(stream: anyio.abc.ByteStream, size: int) -> bytes:
    got = b""
    while len(got) < size:
        got += await stream.receive()
    return got


async def _wait_listening(port: int) -> None:
    """Until something accepts on ``127.0.0.1:port`` (the pod's server, on the node's network)."""
    while True:
        try:
            client = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(0.1)
            continue
        await client.aclose()
        return
