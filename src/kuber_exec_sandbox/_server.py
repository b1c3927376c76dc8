"""``serve_sandbox``: the sandbox API server as an async context manager, and its kubeconfig.

The server's tasks (the listener, one task per connection, and inside each exec session its
reader and output pumps) all live in one nursery owned by the context manager: leaving the
``async with`` cancels them, and each exec session kills and reaps its process on the way out.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from kuber_exec_core import Subprotocol

from ._access import AccessPolicy
from ._attach import run_attach_session
from ._cluster import Cluster, demo_cluster
from ._exec import run_exec_session
from ._exec_request import ExecPlan
from ._http import ConnectionHandler
from ._leases import LeaseStore
from ._process import ChildProcess, ProcessRegistry
from ._runtime import ContainerRuntime
from ._watch import DEFAULT_BOOKMARK_INTERVAL, WatchHub
from ._websocket import WebSocket

__all__ = ["NonLoopbackError", "Sandbox", "serve_sandbox", "write_kubeconfig"]

CONTEXT_NAME = "kuber-exec-sandbox"
DEFAULT_NAMESPACE = "demo"


class NonLoopbackError(ValueError):
    """The sandbox was asked to listen on an address other hosts could reach."""


@attrs.define(kw_only=True)
class Sandbox:
    """A running sandbox.

    Attributes:
        url: ``http://HOST:PORT`` of the API server.
        kubeconfig_path: a kubeconfig whose current context points at it (namespace ``demo``).
        cluster: the served model (mutations show in the next answer).
        offer_v5: whether exec offers ``v5.channel.k8s.io`` (False: a pre-1.30 cluster).
        access: who may impersonate and exec, and the answers to access reviews (allows
            everything until ``access.enforce(...)``; see ``docs/sandbox.md``).
        leases: the ``coordination.k8s.io/v1`` Leases written through the API.
    """

    url: str
    kubeconfig_path: Path
    cluster: Cluster
    offer_v5: bool
    _registry: ProcessRegistry
    _watches: WatchHub | None = None
    _handler: ConnectionHandler | None = None
    access: AccessPolicy = attrs.field(factory=AccessPolicy)
    leases: LeaseStore = attrs.field(factory=LeaseStore)

    def set_token(self, token: str | None) -> None:
        """Require ``token`` from now on (``None``: any), as when credentials rotate; the
        kubeconfig is not rewritten. Safe from any thread (one attribute assignment)."""
        if self._handler is not None:
            self._handler.required_token = token

    @property
    def live_processes(self) -> int:
        """Child processes spawned by exec sessions and not yet reaped."""
        return len(self._registry)

    @property
    def open_watches(self) -> int:
        """Watch responses being streamed now (one per open ``?watch=1`` connection)."""
        return 0 if self._watches is None else self._watches.open

    async def wait_processes_reaped(self) -> None:
        """Return once every child process has been reaped (call on the sandbox's trio loop)."""
        await self._registry.wait_empty()


def check_host(host: str, *, allow_non_loopback: bool) -> None:
    """Refuse a non-loopback address unless explicitly allowed.

    Raises:
        NonLoopbackError: ``host`` is not ``localhost`` nor a loopback IP address.
    """
    if allow_non_loopback or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise NonLoopbackError(
            f"refusing to serve the sandbox on {host!r}: it runs commands for anyone who can "
            "connect and has no authentication; use a loopback address, or allow_non_loopback=True"
        )


def write_kubeconfig(
    path: Path, url: str, namespace: str = DEFAULT_NAMESPACE, token: str | None = None
) -> None:
    """Write a kubeconfig (JSON, which is YAML) for ``url``: one context; credentials only when
    the sandbox requires a ``token`` (the file is then readable by its owner only)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT_NAME, "user": {"token": token} if token else {}}],
        "contexts": [
            {
                "name": CONTEXT_NAME,
                "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    if token:
        path.chmod(0o600)


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@asynccontextmanager
async def serve_sandbox(
    cluster: Cluster | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    kubeconfig_path: str | os.PathLike[str] | None = None,
    offer_v5: bool = True,
    allow_non_loopback: bool = False,
    token: str | None = None,
    subprotocols: Sequence[Subprotocol] | None = None,
    bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
    portforward_tunnel: bool = True,
) -> AsyncIterator[Sandbox]:
    """Serve ``cluster`` (default: :func:`demo_cluster`) until the block ends.

    Args:
        host: the address to bind; a loopback one unless ``allow_non_loopback``.
        port: 0 picks a free port.
        kubeconfig_path: where to write the kubeconfig; default a temporary directory removed
            on exit. A given path is left in place.
        offer_v5: False behaves as a pre-1.30 cluster (exec offers no ``v5.channel.k8s.io``).
        token: when set, every request must carry it as a bearer token (401 otherwise), and the
            kubeconfig holds it; for testing that clients send credentials on every path.
        subprotocols: serve exec only in these (a server or proxy that speaks, say, only
            ``base64.channel.k8s.io``); an offer with none of them gets the empty-body 403.
            Default: what the cluster version serves (see ``offer_v5``).
        bookmark_interval: seconds between the ``BOOKMARK`` events of a watch that allows
            them (watches: see ``docs/sandbox.md``; every ``cluster.touch()`` wakes them).
        portforward_tunnel: False answers port-forward as a cluster without the tunnel
            (``SPDY/3.1+portforward.k8s.io``): the legacy channels only, and the 400
            ``query parameter "port" is required`` to an upgrade that names no port.

    Raises:
        NonLoopbackError: ``host`` is not loopback and ``allow_non_loopback`` is false.
        OSError: the address cannot be bound.

    On exit every connection is closed and every child process killed and reaped.
    """
    check_host(host, allow_non_loopback=allow_non_loopback)
    cluster = demo_cluster() if cluster is None else cluster
    registry = ProcessRegistry()
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    url = _url(host, bound[1])
    with tempfile.TemporaryDirectory(prefix="kuber-exec-sandbox-") as workdir:
        config = Path(kubeconfig_path) if kubeconfig_path else Path(workdir) / "kubeconfig"
        write_kubeconfig(config, url, token=token)
        pods_dir = Path(workdir) / "pods"
        pods_dir.mkdir()

        abandoned: list[trio.Nursery] = []

        def abandon(child: ChildProcess, plan: ExecPlan) -> None:
            pod = plan.pod
            abandoned[0].start_soon(
                child.run_abandoned,
                lambda: plan.faults.process_ended(pod.namespace, pod.name, child.pid),
            )

        runtime = ContainerRuntime(cluster, registry, str(pods_dir))

        async def run_exec(websocket: WebSocket, plan: ExecPlan) -> None:
            if plan.attach:
                await run_attach_session(
                    websocket, plan, runtime.container(plan.pod, plan.container)
                )
                return
            await run_exec_session(
                websocket,
                plan,
                registry=registry,
                cwd=str(pods_dir),
                abandon=lambda child: abandon(child, plan),
            )

        handler = ConnectionHandler(
            cluster=cluster,
            offer_v5=offer_v5,
            only_subprotocols=None if subprotocols is None else tuple(subprotocols),
            required_token=token,
            server_address=url.removeprefix("http://"),
            run_exec=run_exec,
            bookmark_interval=bookmark_interval,
            runtime=runtime,
            portforward_tunnel=portforward_tunnel,
        )
        # Touches may come from any thread (a test's, while this runs in a background one).
        trio_token = trio.lowlevel.current_trio_token()
        stop_waking = cluster.add_listener(handler.watches.waker(trio_token))
        stop_runtime = cluster.add_listener(runtime.waker(trio_token))
        sandbox = Sandbox(
            url=url,
            kubeconfig_path=config,
            cluster=cluster,
            offer_v5=offer_v5,
            registry=registry,
            watches=handler.watches,
            handler=handler,
            access=handler.access,
            leases=handler.leases,
        )
        with registry:  # its watchdog outlives every child, and stops after them
            async with trio.open_nursery() as nursery:
                # Processes whose clients went away run here until they end or the server stops.
                abandoned.append(nursery)
                # The containers' main processes start before the first request is served.
                await nursery.start(runtime.run)
                nursery.start_soon(trio.serve_listeners, handler, listeners)
                try:
                    yield sandbox
                finally:
                    stop_waking()
                    stop_runtime()
                    nursery.cancel_scope.cancel()
