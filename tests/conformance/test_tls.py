"""TLS: verified by default, with the kubeconfig's CA and client certificate, on REST, the watch
cache and exec.

A TLS-terminating proxy (a real TLS server on loopback) stands in front of the sandbox; the
certificates are made for each run with the openssl command line.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import os
import shutil
import ssl
import subprocess
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from kuber_exec_core import DEFAULT_SUBPROTOCOLS, ExecError, ExecErrorCode, ExecRequest, Workspace
from kuber_exec_sandbox import Sandbox

from .proxy import FreezingProxy

pytestmark = pytest.mark.anyio

REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"),
    deployment="web",
    command=["echo", "over tls"],
)


def _self_signed(directory: Path, name: str, subject_alt_name: str | None) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    command = [
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", str(key), "-out", str(cert), "-subj", f"/CN=kuber-exec-test-{name}",
    ]  # fmt: skip
    if subject_alt_name:
        command += ["-addext", f"subjectAltName={subject_alt_name}"]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        reason = "the openssl command line is needed to make test certificates"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    directory = tmp_path_factory.mktemp("tls")
    server_cert, server_key = _self_signed(directory, "server", "IP:127.0.0.1")
    client_cert, client_key = _self_signed(directory, "client", None)
    return {
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
    }


def server_context(certificates: dict[str, Path], *, client_certificates: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates["server_cert"], certificates["server_key"])
    if client_certificates:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certificates["client_cert"])
    return context


def kubeconfig(directory: Path, url: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "tls", "cluster": {"server": url, **cluster}}],
                "users": [{"name": "tls", "user": user}],
                "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "tls"}}],
                "current-context": "tls",
            }
        )
    )
    return str(path)


def data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def execute(adapter: Any, config_path: str) -> Any:
    async with adapter.KubernetesBackend.from_kubeconfig(config_path) as backend:
        return await adapter.ExecService(backend).execute(REQUEST)


async def test_the_kubeconfig_ca_verifies_rest_and_exec(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path], tmp_path: Path
) -> None:
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=False))
    async with proxy.running():
        ca = {"certificate-authority-data": data(certificates["server_cert"])}
        result = await execute(adapter, kubeconfig(tmp_path, proxy.url, ca, {}))
    assert result.stdout == b"over tls\n"


async def test_an_unknown_server_certificate_is_refused(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path], tmp_path: Path
) -> None:
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=False))
    async with proxy.running():
        with pytest.raises(ExecError) as caught:
            await execute(adapter, kubeconfig(tmp_path, proxy.url, {}, {}))
    assert caught.value.code is ExecErrorCode.FAILED
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message


async def test_insecure_skip_tls_verify_is_an_explicit_opt_out(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path], tmp_path: Path
) -> None:
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=False))
    async with proxy.running():
        insecure = {"insecure-skip-tls-verify": True}
        result = await execute(adapter, kubeconfig(tmp_path, proxy.url, insecure, {}))
    assert result.stdout == b"over tls\n"


async def test_client_certificate_from_the_kubeconfig(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path], tmp_path: Path
) -> None:
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=True))
    ca = {"certificate-authority-data": data(certificates["server_cert"])}
    user = {
        "client-certificate-data": data(certificates["client_cert"]),
        "client-key-data": data(certificates["client_key"]),
    }
    (tmp_path / "no-cert").mkdir()
    async with proxy.running():
        result = await execute(adapter, kubeconfig(tmp_path, proxy.url, ca, user))
        without_certificate = kubeconfig(tmp_path / "no-cert", proxy.url, ca, {})
        with pytest.raises(ExecError) as caught:
            await execute(adapter, without_certificate)
    assert result.stdout == b"over tls\n"
    assert caught.value.code is ExecErrorCode.FAILED
    key_text = certificates["client_key"].read_text()
    assert key_text.splitlines()[1] not in caught.value.message


async def test_the_exec_websocket_verifies_the_server_by_default(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path]
) -> None:
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=False))
    async with proxy.running():
        url = proxy.url.replace("https://", "wss://") + (
            "/api/v1/namespaces/demo/pods/anything/exec?command=true&stdout=true"
        )
        with pytest.raises(ExecError) as caught:
            async with adapter.connect_exec(url, DEFAULT_SUBPROTOCOLS):
                pass
    assert caught.value.code is ExecErrorCode.FAILED
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message


class _Warnings(logging.Handler):
    """Collects the ``kuber_exec`` logger's warnings; ``arrived`` is set by the first one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.arrived = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.arrived.set()


async def test_the_watch_cache_reads_with_the_kubeconfig_tls_settings(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path], tmp_path: Path
) -> None:
    # The cache's own HTTP client: the kubeconfig's CA and client certificate, as for REST.
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=True))
    ca = {"certificate-authority-data": data(certificates["server_cert"])}
    user = {
        "client-certificate-data": data(certificates["client_cert"]),
        "client-key-data": data(certificates["client_key"]),
    }
    async with (
        proxy.running(),
        adapter.KubernetesBackend.from_kubeconfig(kubeconfig(tmp_path, proxy.url, ca, user)) as b,
        b.watch(["demo"]) as cache,
    ):
        with anyio.fail_after(10):
            await cache.wait_synced()
        target = await adapter.ExecService(b).resolve_target(REQUEST)
    assert target.namespace == "demo"


async def test_the_watch_cache_verifies_the_server_by_default(
    adapter: Any, sandbox: Sandbox, certificates: dict[str, Path], tmp_path: Path
) -> None:
    proxy = FreezingProxy(sandbox.url, server_context(certificates, client_certificates=False))
    warnings = _Warnings()
    logger = logging.getLogger("kuber_exec")
    logger.addHandler(warnings)
    try:
        async with (
            proxy.running(),
            adapter.KubernetesBackend.from_kubeconfig(kubeconfig(tmp_path, proxy.url, {}, {})) as b,
            b.watch(["demo"]) as cache,
        ):
            with anyio.fail_after(10):
                await warnings.arrived.wait()
            assert not cache.synced()
    finally:
        logger.removeHandler(warnings)
    assert "CERTIFICATE_VERIFY_FAILED" in warnings.messages[0]


class _HandshakeHolder:
    """A loopback TCP server that reads each client's TLS ClientHello and never answers it: a
    client that has reached the server is inside its TLS handshake until it gives up.

    ``in_handshake`` is set once ``clients`` ClientHellos have arrived; ``all_hung_up`` once
    that many clients have closed their end.
    """

    def __init__(self, clients: int) -> None:
        self.url = ""
        self.in_handshake = anyio.Event()
        self.all_hung_up = anyio.Event()
        self._clients = clients
        self._hellos = 0
        self._hung_up = 0

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                await stream.receive()
                self._hellos += 1
                if self._hellos == self._clients:
                    self.in_handshake.set()
                async for _ in stream:
                    pass  # Nothing more comes before the client closes.
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
        self._hung_up += 1
        if self._hung_up == self._clients:
            self.all_hung_up.set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[_HandshakeHolder]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.url = f"https://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, self._handle)
            try:
                yield self
            finally:
                tasks.cancel_scope.cancel()


#: The watch cache's connections per namespace: one each for Deployments, ReplicaSets and Pods.
WATCHED_KINDS = 3


async def _read_rest(adapter: Any, holder: _HandshakeHolder, config_path: str) -> None:
    async with (
        adapter.KubernetesBackend.from_kubeconfig(config_path) as backend,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(backend.get_deployment, "demo", "web")
        with anyio.fail_after(10):
            await holder.in_handshake.wait()
        tasks.cancel_scope.cancel()


async def _watch(adapter: Any, holder: _HandshakeHolder, config_path: str) -> None:
    async with (
        adapter.KubernetesBackend.from_kubeconfig(config_path) as backend,
        backend.watch(["demo"]),
    ):
        with anyio.fail_after(10):
            await holder.in_handshake.wait()


async def _open_exec(adapter: Any, holder: _HandshakeHolder, config_path: str) -> None:
    url = holder.url.replace("https://", "wss://") + "/api/v1/namespaces/demo/pods/p/exec"

    async def connect() -> None:
        async with adapter.connect_exec(url + "?command=true&stdout=true", DEFAULT_SUBPROTOCOLS):
            pass

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(connect)
        with anyio.fail_after(10):
            await holder.in_handshake.wait()
        tasks.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("reader", "clients"),
    [(_read_rest, 1), (_watch, WATCHED_KINDS), (_open_exec, 1)],
    ids=["rest", "watch", "exec"],
)
async def test_a_connection_cancelled_in_its_tls_handshake_is_closed(
    adapter: Any, reader: Any, clients: int, tmp_path: Path
) -> None:
    # Cancelled while the server holds the ClientHello unanswered, each TLS client closes its
    # socket at once; httpcore alone leaves it to the garbage collector
    # (kuber_exec_anyio._kubernetes._http_network).
    holder = _HandshakeHolder(clients)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with holder.running():
            await reader(adapter, holder, kubeconfig(tmp_path, holder.url, {}, {}))
            gc.collect()  # A socket only the garbage collector would close warns now.
            with anyio.fail_after(10):
                await holder.all_hung_up.wait()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
