"""The browser terminal for the shared-terminal tests, on either runtime, as a child process.

    python tests/web/shared_server.py web --sandbox --audit-log FILE [--runtime asyncio|trio]
        [--record-dir DIR] [--grace S] [--ping-interval S] [--kubeconfig-url URL]
        [--token T] [--join-secret HEX] [--replica] [--cluster-slots NAMESPACE]
        [--lease-duration S]

Serves ``create_app`` on 127.0.0.1 (a free port) with uvicorn (asyncio) or hypercorn (trio),
behind a random token printed once in the same ``Open: URL#token=`` line as ``kuber-exec web``
(so ``DemoProcess`` drives it). With ``--kubeconfig-url`` it uses that (already running)
sandbox API server instead of starting its own: replicas share one cluster. With
``--cluster-slots`` its backend lists every session in the namespace's session records
(``ClusterSlots``, heartbeats every ``--lease-duration / 3`` s), so that a surviving replica
cleans up after a killed one.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread
from kuber_exec_web import create_app, token_authorizer
from kuber_exec_web.demo import DEMO_WORKSPACE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("web", choices=["web"])
    parser.add_argument("--sandbox", action="store_true")
    parser.add_argument("--audit-log", required=True)
    parser.add_argument("--runtime", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--record-dir", default=None)
    parser.add_argument("--grace", type=float, default=60.0)
    parser.add_argument("--ping-interval", type=float, default=25.0)
    parser.add_argument("--kubeconfig-url", default=None)
    parser.add_argument("--token", default=None)
    parser.add_argument("--join-secret", default=None)
    parser.add_argument("--replica", action="store_true", help="relay to other replicas")
    parser.add_argument("--cluster-slots", default=None, help="ClusterSlots in this namespace")
    parser.add_argument("--lease-duration", type=int, default=15)
    parser.add_argument("--log-file", default=None, help="the library's debug log, for a soak")
    return parser


@contextlib.contextmanager
def _cluster(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with run_sandbox_in_thread(demo_cluster()) as sandbox:
        yield sandbox.url


def _slots(adapter: Any, args: argparse.Namespace) -> Any:
    """The replicas' shared session records (``ClusterSlots``), when asked for: a killed
    replica's sessions are then cleaned up by a survivor."""
    if args.cluster_slots is None:
        return None
    return adapter.ClusterSlots(args.cluster_slots, duration=args.lease_duration)


def _app(
    adapter: Any, backend: Any, audit: Any, args: argparse.Namespace, token: str, port: int
) -> Any:
    return create_app(
        adapter.ExecService(backend, audit=audit),
        token_authorizer(token, DEMO_WORKSPACE),
        default_deployment="web",
        ping_interval=args.ping_interval,
        recordings=args.record_dir,
        reconnect_grace=args.grace,
        join_secret=None if args.join_secret is None else bytes.fromhex(args.join_secret),
        replica_address=f"127.0.0.1:{port}" if args.replica else None,
    )


def main() -> int:
    args = _parser().parse_args()
    if args.log_file is not None:
        import logging

        handler = logging.FileHandler(args.log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        for name, level in (("kuber_exec", logging.INFO), ("kuber_exec_web", logging.DEBUG)):
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(level)
    token = args.token or secrets.token_urlsafe(24)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]

    def announce() -> None:
        print(f"  Open:      http://127.0.0.1:{port}/?deployment=web#token={token}", flush=True)

    with _cluster(args.kubeconfig_url) as url:
        if args.runtime == "asyncio":
            import asyncio

            import uvicorn

            import kuber_exec_asyncio as adapter

            async def serve_asyncio() -> None:
                with adapter.JsonLinesAuditLog(args.audit_log) as audit:
                    async with adapter.KubernetesBackend(
                        adapter.ClusterConfig(url), cluster_slots=_slots(adapter, args)
                    ) as backend:
                        app = _app(adapter, backend, audit, args, token, port)
                        config = uvicorn.Config(
                            app, lifespan="off", log_level="warning", timeout_graceful_shutdown=3
                        )
                        announce()
                        await uvicorn.Server(config).serve(sockets=[listener])

            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(serve_asyncio())
            return 130
        import trio
        from hypercorn.config import Config
        from hypercorn.trio import serve

        import kuber_exec_trio as adapter_trio

        async def serve_trio() -> None:
            with adapter_trio.JsonLinesAuditLog(args.audit_log) as audit:
                async with adapter_trio.KubernetesBackend(
                    adapter_trio.ClusterConfig(url), cluster_slots=_slots(adapter_trio, args)
                ) as backend:
                    app = _app(adapter_trio, backend, audit, args, token, port)
                    config = Config()
                    config.bind = [f"fd://{listener.fileno()}"]
                    config.accesslog = None
                    config.graceful_timeout = 3
                    stop = trio.Event()

                    async def on_signal() -> None:
                        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                            async for _ in signals:
                                stop.set()
                                return

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(on_signal)
                        announce()
                        await serve(app, config, shutdown_trigger=stop.wait)
                        nursery.cancel_scope.cancel()

        trio.run(serve_trio)
        return 130


if __name__ == "__main__":
    sys.exit(main())
