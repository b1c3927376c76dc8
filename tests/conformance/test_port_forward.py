"""Port-forward (issue 36) on both runtimes and both transports, against the sandbox.

Two sandboxes: one serving the tunnel (``SPDY/3.1+portforward.k8s.io``) and the legacy
channels, one without the tunnel (a cluster without the ``PortForwardWebsockets`` gate: the
kubelet's 400 ``query parameter "port" is required``). Each pod's ports are listeners of the
test's own (the sandbox maps them per pod): port 8080 echoes upper-cased and half-closes after
the client's end of stream, port 9000 says which pod answered.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import socket
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import anyio
import anyio.abc
import pytest

from kuber_exec_core import ExecError, ExecErrorCode, Workspace
from kuber_exec_sandbox import Cluster, PodSpec, Sandbox, run_sandbox_in_thread
from support import backend_for

from .proxy import FreezingProxy

pytestmark = pytest.mark.anyio

WORKSPACE = Workspace(project="pf", uid="pf-uid")
TRANSPORTS = ["tunnel", "legacy"]


def _cluster() -> Cluster:
    cluster = Cluster()
    cluster.add_deployment(
        "pf",
        "web",
        workspace_uid=WORKSPACE.uid,
        pods=[PodSpec(name="web-a"), PodSpec(name="web-b")],
    )
    cluster.add_deployment("pf", "foreign", workspace_uid="someone-else", pods=[PodSpec()])
    return cluster


@pytest.fixture(scope="module")
def with_tunnel() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(_cluster()) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def without_tunnel() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(_cluster(), portforward_tunnel=False) as sandbox:
        yield sandbox


async def _echo(client: anyio.abc.SocketStream) -> None:
    async with client:
        try:
            async for data in client:
                await client.send(data.upper())
            await client.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # The forward dropped this connection (some tests do so on purpose); anyio's trio
            # backend lets a half-close of a reset socket raise a bare OSError (ENOTCONN).
            pass


async def _whoami(name: str, client: anyio.abc.SocketStream) -> None:
    async with client:
        await client.send(name.encode())


def _port_of(listener: Any) -> int:
    return int(listener.extra(anyio.abc.SocketAttribute.local_port))


@contextlib.asynccontextmanager
async def pod_listeners(*sandboxes: Sandbox) -> AsyncIterator[None]:
    """Give every pod of the ``web`` Deployment its listeners while the block runs."""
    async with contextlib.AsyncExitStack() as stack:
        serving: list[tuple[anyio.abc.Listener[Any], Any]] = []
        for sandbox in sandboxes:
            web = sandbox.cluster.deployment("pf", "web")
            assert web is not None
            for pod in sandbox.cluster.pods_of(web):
                for port, handler in ((8080, _echo), (9000, functools.partial(_whoami, pod.name))):
                    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
                    await stack.enter_async_context(listener)
                    serving.append((listener, handler))
                    pod.ports[port] = ("127.0.0.1", _port_of(listener))
        async with anyio.create_task_group() as tasks:
            for serve, handler in serving:
                tasks.start_soon(serve.serve, handler)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()


@pytest.fixture
async def pods(with_tunnel: Sandbox, without_tunnel: Sandbox) -> AsyncIterator[None]:
    async with pod_listeners(with_tunnel, without_tunnel):
        yield


@pytest.fixture
async def service(adapter: ModuleType, with_tunnel: Sandbox) -> AsyncIterator[Any]:
    async with backend_for(adapter, with_tunnel) as backend:
        yield adapter.ExecService(backend)


async def send_and_drain(stream: anyio.abc.ByteStream, payload: bytes) -> None:
    await stream.send(payload)
    while True:
        await stream.receive()


async def exchange(stream: anyio.abc.ByteStream, payload: bytes, *, half_close: bool) -> bytes:
    """Send ``payload``, then read the echo (to its end with half-close, else its length)."""
    received = bytearray()
    async with anyio.create_task_group() as tasks:

        async def send() -> None:
            await stream.send(payload)
            if half_close:
                await stream.send_eof()

        tasks.start_soon(send)
        while len(received) < len(payload) or half_close:
            try:
                received += await stream.receive()
            except anyio.EndOfStream:
                break
    return bytes(received)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_connection_echoes_through_the_forward(
    adapter: ModuleType, service: Any, pods: None, transport: str
) -> None:
    async with adapter.PortForward(service, WORKSPACE, "web", transport=transport) as forward:
        assert forward.target.pod == "web-a"  # ranked as an exec's target
        assert forward.transport_in_use in (None, "legacy")
        with anyio.fail_after(10):
            stream = await forward.connect(8080)
            async with stream:
                answer = await exchange(stream, b"hello", half_close=transport == "tunnel")
        assert forward.transport_in_use == transport
    assert answer == b"HELLO"


async def test_half_close_on_the_tunnel_reaches_the_pod_and_comes_back(
    adapter: ModuleType, service: Any, pods: None
) -> None:
    async with adapter.PortForward(service, WORKSPACE, "web", transport="tunnel") as forward:
        with anyio.fail_after(10):
            async with await forward.connect(8080) as stream:
                await stream.send(b"abc")
                await stream.send_eof()
                got = b""
                async for data in stream:  # ends: the pod half-closed after ours
                    got += data
    assert got == b"ABC"


async def test_one_tunnel_carries_a_large_transfer_and_many_connections(
    adapter: ModuleType, service: Any, pods: None
) -> None:
    big = bytes(range(256)) * 32 * 1024  # 8 MiB
    async with adapter.PortForward(service, WORKSPACE, "web", transport="tunnel") as forward:
        with anyio.fail_after(60):
            async with await forward.connect(8080) as stream:
                answer = await exchange(stream, big, half_close=True)
            assert hashlib.sha256(answer).digest() == hashlib.sha256(big.upper()).digest()
            results: list[bytes] = []

            async def one(i: int) -> None:
                async with await forward.connect(8080) as stream:
                    results.append(await exchange(stream, b"c%d" % i, half_close=True))

            async with anyio.create_task_group() as tasks:
                for i in range(100):
                    tasks.start_soon(one, i)
    assert sorted(results) == sorted(b"C%d" % i for i in range(100))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_nothing_listening_fails_that_connection_and_the_forward_lives_on(
    adapter: ModuleType, service: Any, pods: None, transport: str
) -> None:
    async with adapter.PortForward(service, WORKSPACE, "web", transport=transport) as forward:
        with anyio.fail_after(10):
            stream = await forward.connect(7777)
            async with stream:
                with pytest.raises(ExecError) as caught:
                    await stream.receive()
            assert caught.value.code is ExecErrorCode.FAILED
            assert caught.value.message.startswith("error forwarding port 7777 to pod ")
            assert "connection refused" in caught.value.message
            async with await forward.connect(8080) as stream:
                assert await exchange(stream, b"ok", half_close=False) == b"OK"


async def test_auto_falls_back_to_the_legacy_channels_on_the_400(
    adapter: ModuleType, without_tunnel: Sandbox, pods: None
) -> None:
    async with backend_for(adapter, without_tunnel) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web") as forward:
            with anyio.fail_after(10):
                async with await forward.connect(8080) as stream:
                    assert await exchange(stream, b"fallback", half_close=False) == b"FALLBACK"
            assert forward.transport == "legacy"
            assert forward.transport_in_use == "legacy"
        async with adapter.PortForward(service, WORKSPACE, "web", transport="tunnel") as forward:
            with pytest.raises(ExecError) as caught:
                await forward.connect(8080)
            assert caught.value.http_status == 400


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_local_listener_forwards_each_accepted_connection(
    adapter: ModuleType, service: Any, pods: None, transport: str
) -> None:
    async with (
        adapter.PortForward(service, WORKSPACE, "web", transport=transport) as forward,
        forward.listen([(0, 8080), (0, 9000)]) as bound,
    ):
        assert [b.remote_port for b in bound] == [8080, 9000]
        assert all(b.address == "127.0.0.1" and b.local_port > 0 for b in bound)
        with anyio.fail_after(10):
            for i in range(3):
                async with await anyio.connect_tcp("127.0.0.1", bound[0].local_port) as client:
                    assert (
                        await exchange(client, b"local%d" % i, half_close=False) == b"LOCAL%d" % i
                    )
            async with await anyio.connect_tcp("127.0.0.1", bound[1].local_port) as client:
                got = b""
                async for data in client:
                    got += data
            assert got == b"web-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_connection_leaves_an_audit_record(
    adapter: ModuleType, service: Any, pods: None, transport: str
) -> None:
    records: list[Any] = []
    async with adapter.PortForward(
        service, WORKSPACE, "web", transport=transport, audit=records.append
    ) as forward:
        with anyio.fail_after(10):
            async with await forward.connect(8080) as stream:
                await exchange(stream, b"12345", half_close=False)
            async with await forward.connect(7777) as stream:
                with pytest.raises(ExecError):
                    await stream.receive()
    assert [
        (r.pod, r.port, r.transport, r.bytes_to_pod, r.bytes_from_pod, r.outcome) for r in records
    ] == [
        ("web-a", 8080, transport, 5, 5, "closed"),
        ("web-a", 7777, transport, 0, 0, "failed"),
    ]
    assert records[1].error.startswith("error forwarding port 7777")
    assert records[0].workspace_uid == WORKSPACE.uid


@pytest.mark.parametrize("port", [0, -1, 65536, "80"])
async def test_a_port_outside_1_to_65535_is_invalid(
    adapter: ModuleType, service: Any, port: object
) -> None:
    async with adapter.PortForward(service, WORKSPACE, "web") as forward:
        with pytest.raises(ExecError) as caught:
            await forward.connect(port)
        assert caught.value.code is ExecErrorCode.INVALID
        with pytest.raises(ExecError) as caught:
            async with forward.listen([(0, port)]):
                pass
        assert caught.value.code is ExecErrorCode.INVALID


async def test_another_workspaces_deployment_is_refused_before_any_upgrade(
    adapter: ModuleType, service: Any
) -> None:
    with pytest.raises(ExecError) as caught:
        async with adapter.PortForward(service, WORKSPACE, "foreign"):
            pass
    assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN
    with pytest.raises(ExecError) as caught:
        async with adapter.PortForward(service, WORKSPACE, "missing"):
            pass
    assert caught.value.code is ExecErrorCode.TARGET_NOT_FOUND


async def test_the_connection_limit_refuses_one_more(
    adapter: ModuleType, service: Any, pods: None
) -> None:
    async with adapter.PortForward(service, WORKSPACE, "web", max_connections=2) as forward:
        with anyio.fail_after(10):
            first = await forward.connect(8080)
            second = await forward.connect(8080)
            with pytest.raises(ExecError, match="already has 2 connections open"):
                await forward.connect(8080)
            await first.aclose()
            third = await forward.connect(8080)
            await second.aclose()
            await third.aclose()


@pytest.fixture
def doomed() -> Iterator[Sandbox]:
    """A sandbox of the test's own: the test deletes a pod."""
    with run_sandbox_in_thread(_cluster()) as sandbox:
        yield sandbox


async def test_the_forward_moves_to_the_next_ready_pod_when_its_pod_goes_away(
    adapter: ModuleType, doomed: Sandbox
) -> None:
    sandbox = doomed
    async with pod_listeners(sandbox), backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web", transport="tunnel") as forward:
            with anyio.fail_after(20):
                held = await forward.connect(8080)
                sandbox.cluster.delete_pod("pf", "web-a")
                with pytest.raises(ExecError) as caught:
                    await held.receive()
                assert caught.value.code is ExecErrorCode.FAILED
                await held.aclose()
                async with await forward.connect(9000) as stream:
                    got = b""
                    async for data in stream:
                        got += data
                assert got == b"web-b"
                assert forward.target.pod == "web-b"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_server_ending_with_its_pod_is_an_error_and_the_next_connection_moves(
    adapter: ModuleType, doomed: Sandbox, transport: str
) -> None:
    # A kubelet keeps a deleted pod's tunnel (and takes its legacy upgrades) while the pod is
    # terminating; a server in the pod dies with it, and its connections end as cleanly as when
    # the server closes one. The forward reads the pod at such an end: terminating, so that
    # end is an error, and the next connection goes to the next ready pod.
    sandbox = doomed
    async with pod_listeners(sandbox), backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web", transport=transport) as forward:
            with anyio.fail_after(20):
                async with await forward.connect(9000) as stream:
                    assert await read_to_end(stream) == b"web-a"  # a running pod: a clean end
                _start_deleting(sandbox, "web-a")
                async with await forward.connect(9000) as stream:
                    assert await stream.receive() == b"web-a"
                    with pytest.raises(ExecError) as caught:
                        await stream.receive()
                assert caught.value.code is ExecErrorCode.FAILED
                assert caught.value.message == (
                    "the connection to port 9000 ended: pod web-a is being deleted"
                )
                async with await forward.connect(9000) as stream:
                    assert await read_to_end(stream) == b"web-b"
                assert forward.target.pod == "web-b"


async def test_a_connection_is_checked_against_its_own_pod_when_the_target_moves_meanwhile(
    adapter: ModuleType, doomed: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found in CI under load: a background revalidation moved the forward's target to web-b
    # while a connection was opening on web-a's tunnel; that connection then had no pod to
    # check its end against, and the end of a deleted pod's server read as a clean one. Here
    # the move is made to happen exactly there, after the tunnel accepted the connection.
    from kuber_exec_anyio._portforward import _forward, _tunnel

    sandbox = doomed
    async with pod_listeners(sandbox), backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web", transport="tunnel") as forward:
            with anyio.fail_after(20):
                async with await forward.connect(9000) as stream:
                    assert await read_to_end(stream) == b"web-a"
                _start_deleting(sandbox, "web-a")
                real_open = _tunnel.TunnelConnection.open
                moved: list[bool] = []

                async def open_then_move(self: Any, port: int) -> Any:
                    opened = await real_open(self, port)
                    forward._recheck = True
                    moved.append(await forward._follow_the_target())
                    return opened

                monkeypatch.setattr(_tunnel.TunnelConnection, "open", open_then_move)
                monkeypatch.setattr(_forward, "_REVALIDATE_INTERVAL", 3600.0)
                async with await forward.connect(9000) as stream:
                    assert moved == [True]
                    assert forward.target.pod == "web-b"
                    assert await stream.receive() == b"web-a"
                    with pytest.raises(ExecError) as caught:
                        await stream.receive()
                assert caught.value.message == (
                    "the connection to port 9000 ended: pod web-a is being deleted"
                )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_new_connections_leave_a_terminating_pod_within_about_a_second(
    adapter: ModuleType, doomed: Sandbox, transport: str
) -> None:
    # The pod's connections still open (a real kubelet serves a deleted pod's tunnel for up to
    # a minute; here its server ends them, which reads as a failure), and there is no watch
    # cache: new connections have the target resolved again in the background at most once a
    # second, and so leave the pod soon after it starts terminating.
    sandbox = doomed
    async with pod_listeners(sandbox), backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web", transport=transport) as forward:
            with anyio.fail_after(40):
                async with await forward.connect(9000) as stream:
                    assert await read_to_end(stream) == b"web-a"
                _start_deleting(sandbox, "web-a")
                answers: list[bytes] = []
                started = anyio.current_time()
                while not answers or answers[-1] != b"web-b":
                    async with await forward.connect(9000) as stream:
                        try:
                            answers.append(await read_to_end(stream))
                        except ExecError as error:
                            # Still on web-a: its end reads as the pod's (see above).
                            answers.append(error.message.encode())
                    await anyio.sleep(0.05)  # pace the attempts
                took = anyio.current_time() - started
    failed = b"the connection to port 9000 ended: pod web-a is being deleted"
    assert set(answers) <= {failed, b"web-b"}
    assert took < 10, took  # about a second, with room for a loaded machine
    assert forward.target.pod == "web-b"


def _start_deleting(sandbox: Sandbox, name: str) -> None:
    """Mark pod ``name`` of the ``web`` Deployment as being deleted (its deletion timestamp)."""
    with sandbox.cluster.changing():
        pod = sandbox.cluster.pod("pf", name)
        assert pod is not None
        pod.deletion_timestamp = "2026-01-01T00:00:00Z"


async def read_to_end(stream: anyio.abc.ByteStream) -> bytes:
    received = bytearray()
    with contextlib.suppress(anyio.EndOfStream):
        while True:
            received += await stream.receive()
    return bytes(received)


async def test_with_the_watch_cache_new_connections_leave_a_terminating_pod(
    adapter: ModuleType, doomed: Sandbox
) -> None:
    sandbox = doomed
    async with (
        pod_listeners(sandbox),
        backend_for(adapter, sandbox) as backend,
        backend.watch(["pf"]) as cache,
    ):
        with anyio.fail_after(20):
            await cache.wait_synced()
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web", transport="tunnel") as forward:
            with anyio.fail_after(20):
                held = await forward.connect(8080)
                _start_deleting(sandbox, "web-a")
                await cache.wait_until(
                    lambda store: (
                        store.namespace("pf").pods.items["web-a"].deletion_timestamp is not None
                    )
                )
                async with await forward.connect(9000) as stream:
                    assert await stream.receive() == b"web-b"
                # The terminating pod still serves what it had.
                await held.send(b"still")
                assert await held.receive() == b"STILL"
                await held.aclose()


async def test_a_refused_upgrade_is_the_servers_rbac_answer(
    adapter: ModuleType, doomed: Sandbox
) -> None:
    from kuber_exec_sandbox import AccessRule

    doomed.access.enforce(
        [
            AccessRule(verbs=("get", "list", "watch"), resource="*"),
            AccessRule(verbs=("get", "create"), resource="pods", subresource="exec"),
        ]
    )
    async with backend_for(adapter, doomed) as backend:
        service = adapter.ExecService(backend)
        for transport in TRANSPORTS:
            async with adapter.PortForward(service, WORKSPACE, "web", transport=transport) as pf:
                with pytest.raises(ExecError) as caught:
                    await pf.connect(8080)
            assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN
            assert caught.value.http_status == 403
            assert 'cannot get resource "pods/portforward"' in caught.value.message


async def test_a_slow_reader_holds_the_pod_back_and_memory_stays_flat(
    adapter: ModuleType, doomed: Sandbox
) -> None:
    """The pod's side writes as fast as it can; we read nothing for a while: what piles up is
    bounded by the windows (ours 256 KiB, then the sandbox's and the sockets' buffers)."""
    sandbox = doomed
    written = [0]

    async def firehose(client: anyio.abc.SocketStream) -> None:
        chunk = b"x" * 65536
        async with client:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                while True:
                    await client.send(chunk)
                    written[0] += len(chunk)

    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(listener.serve, firehose)
        web = sandbox.cluster.deployment("pf", "web")
        assert web is not None
        for pod in sandbox.cluster.pods_of(web):
            pod.ports[8080] = ("127.0.0.1", _port_of(listener))
        async with backend_for(adapter, sandbox) as backend:
            service = adapter.ExecService(backend)
            async with adapter.PortForward(
                service, WORKSPACE, "web", transport="tunnel"
            ) as forward:
                with anyio.fail_after(30):
                    stream = await forward.connect(8080)
                    first = await stream.receive()
                    # Wait until the writer is stuck: its count stops moving.
                    last = -1
                    while written[0] != last:
                        last = written[0]
                        await anyio.sleep(0.3)
                    buffered = len(stream._inner._connection.buffer)
                    assert buffered <= 256 * 1024
                    assert written[0] < 32 * 1024 * 1024  # held back, not buffered somewhere
                    # Reading again lets it flow.
                    total = len(first)
                    while total < last + 1024 * 1024:
                        total += len(await stream.receive())
                    await stream.aclose()
        tasks.cancel_scope.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_fast_local_client_is_held_back_when_the_pod_reads_nothing(
    adapter: ModuleType, doomed: Sandbox, transport: str
) -> None:
    """A local client writes into a listener as fast as it can; the pod's side never reads (a
    listening socket nobody accepts from). The client must be held back by TCP once the
    buffers on the way are full: on asyncio, anyio's accepted streams read their socket into
    an unbounded queue, which kept this process reading all 256 MiB."""
    web = doomed.cluster.deployment("pf", "web")
    assert web is not None
    deaf = socket.create_server(("127.0.0.1", 0))
    written = [0]
    with deaf:
        for pod in doomed.cluster.pods_of(web):
            pod.ports[8080] = ("127.0.0.1", deaf.getsockname()[1])
        async with (
            backend_for(adapter, doomed) as backend,
            adapter.PortForward(
                adapter.ExecService(backend), WORKSPACE, "web", transport=transport
            ) as forward,
            forward.listen([(0, 8080)]) as bound,
            await anyio.connect_tcp("127.0.0.1", bound[0].local_port) as client,
            anyio.create_task_group() as tasks,
        ):

            async def flood() -> None:
                chunk = b"x" * 65536
                with contextlib.suppress(anyio.BrokenResourceError):
                    while written[0] < 256 * 1024 * 1024:
                        await client.send(chunk)
                        written[0] += len(chunk)

            tasks.start_soon(flood)
            with anyio.fail_after(60):
                # Wait until the client is stuck (its count stops moving) or sent it all.
                last = -1
                while written[0] != last:
                    last = written[0]
                    await anyio.sleep(0.3)
            tasks.cancel_scope.cancel()
    assert 0 < written[0] < 32 * 1024 * 1024


async def test_the_preflight_reviews_pods_portforward_before_the_upgrade(
    adapter: ModuleType, doomed: Sandbox
) -> None:
    from kuber_exec_sandbox import AccessRule

    doomed.access.enforce(
        [
            AccessRule(verbs=("get", "list", "watch"), resource="*"),
            AccessRule(verbs=("create",), resource="selfsubjectaccessreviews"),
            AccessRule(verbs=("get", "create"), resource="pods", subresource="exec"),
        ]
    )
    async with backend_for(adapter, doomed, preflight=adapter.ExecPreflight()) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web") as forward:
            with pytest.raises(ExecError) as caught:
                await forward.connect(8080)
    assert caught.value.code is ExecErrorCode.TARGET_FORBIDDEN
    assert caught.value.http_status is None  # the review said no: no upgrade was tried
    assert "may not get pods/portforward in namespace 'pf'" in caught.value.message


async def test_a_forward_holds_one_of_its_workspaces_session_slots(
    adapter: ModuleType, with_tunnel: Sandbox
) -> None:
    async with backend_for(adapter, with_tunnel) as backend:
        service = adapter.ExecService(
            backend, session_limits=adapter.SessionLimits(max_sessions_per_workspace=1)
        )
        async with adapter.PortForward(service, WORKSPACE, "web"):
            with pytest.raises(ExecError) as caught:
                async with adapter.PortForward(service, WORKSPACE, "web"):
                    pass
            assert caught.value.code is ExecErrorCode.ABORTED
        async with adapter.PortForward(service, WORKSPACE, "web"):
            pass  # given back


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_dropped_websocket_fails_its_connections_and_the_next_one_reconnects(
    adapter: ModuleType, doomed: Sandbox, transport: str
) -> None:
    async with pod_listeners(doomed), backend_for(adapter, doomed) as backend:
        service = adapter.ExecService(backend)
        async with adapter.PortForward(service, WORKSPACE, "web", transport=transport) as pf:
            with anyio.fail_after(20):
                doomed.cluster.faults.drop_port_forward_after(200_000)
                stream = await pf.connect(8080)
                with pytest.raises(ExecError) as caught:
                    await send_and_drain(stream, b"z" * 1_000_000)
                assert caught.value.code is ExecErrorCode.FAILED
                await stream.aclose()
                assert doomed.cluster.faults.dropped_forwards == 1
                async with await pf.connect(8080) as again:
                    assert await exchange(again, b"back", half_close=False) == b"BACK"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_short_connections_through_a_listener_never_hang_or_leak(
    adapter: ModuleType, service: Any, pods: None, transport: str
) -> None:
    """Each connection closes while the next opens: the frames of one must never be lost with
    the other's cancellation (one writer task sends every frame of the tunnel), and each must
    end (on the legacy channels the local end ends it: the pod cannot be told), or the limit
    of 50 open connections refuses the 51st."""
    async with (
        adapter.PortForward(
            service, WORKSPACE, "web", transport=transport, max_connections=50
        ) as forward,
        forward.listen([(0, 8080)]) as bound,
    ):
        for i in range(600):
            with anyio.fail_after(5):
                async with await anyio.connect_tcp("127.0.0.1", bound[0].local_port) as client:
                    await client.send(b"%d" % i)
                    assert await client.receive() == b"%d" % i


async def test_concurrent_first_connections_all_fall_back(
    adapter: ModuleType, without_tunnel: Sandbox, pods: None
) -> None:
    """Found on a real 1.20: 200 connections at once each tried the tunnel; those refused
    after the first switched to the legacy channels must switch too, not fail."""
    async with backend_for(adapter, without_tunnel) as backend:
        service = adapter.ExecService(backend)
        answers: list[bytes] = []
        async with adapter.PortForward(service, WORKSPACE, "web") as forward:

            async def one(i: int) -> None:
                async with await forward.connect(8080) as stream:
                    answers.append(await exchange(stream, b"c%d" % i, half_close=False))

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tasks:
                    for i in range(50):
                        tasks.start_soon(one, i)
    assert sorted(answers) == sorted(b"C%d" % i for i in range(50))


async def test_legacy_connections_are_pinged_and_live_on_while_pongs_come(
    adapter: ModuleType, service: Any, pods: None
) -> None:
    # Pings every 20 ms, each to be answered within 200 ms: an idle legacy connection sees
    # many over half a second (every one answered, or it would be dropped) and still echoes.
    async with adapter.PortForward(
        service, WORKSPACE, "web", transport="legacy", ping_interval=0.02, pong_timeout=0.2
    ) as forward:
        with anyio.fail_after(10):
            async with await forward.connect(8080) as stream:
                with anyio.move_on_after(0.5):
                    await stream.receive()  # nothing comes: the reader waits, pinged
                assert await exchange(stream, b"alive", half_close=False) == b"ALIVE"


async def test_a_legacy_connection_whose_pongs_stop_fails_saying_so(
    adapter: ModuleType, with_tunnel: Sandbox, pods: None
) -> None:
    proxy = FreezingProxy(with_tunnel.url)
    async with (
        proxy.running(),
        adapter.KubernetesBackend(adapter.ClusterConfig(proxy.url)) as backend,
    ):
        service = adapter.ExecService(backend)
        async with adapter.PortForward(
            service, WORKSPACE, "web", transport="legacy", ping_interval=0.05, pong_timeout=0.3
        ) as forward:
            with anyio.fail_after(10):
                async with await forward.connect(8080) as stream:
                    assert await exchange(stream, b"x", half_close=False) == b"X"
                    proxy.freeze()
                    with pytest.raises(ExecError) as caught:
                        await stream.receive()
    assert caught.value.code is ExecErrorCode.FAILED
    assert caught.value.message == (
        "the connection to port 8080 broke: no pong from the server within 0.3 s"
    )
