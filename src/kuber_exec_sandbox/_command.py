"""``kuber-exec sandbox``: serve the demo cluster until interrupted.

:func:`main` is the package's public entry point (``kuber_exec_sandbox.main``): the CLI dispatches
``kuber-exec sandbox ...`` to it, and ``python -m kuber_exec_sandbox`` runs it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys

import trio

from ._cluster import demo_cluster
from ._server import NonLoopbackError, serve_sandbox

__all__ = ["build_parser", "main", "serve_forever"]


async def serve_forever(
    port: int,
    kubeconfig_out: str | None,
    host: str,
    allow_non_loopback: bool,
    pre_v5: bool,
) -> None:
    """Serve :func:`demo_cluster` on ``host:port`` until SIGINT, SIGTERM or SIGHUP (or until
    cancelled), after printing how to use it.

    Raises:
        NonLoopbackError: ``host`` is not loopback and ``allow_non_loopback`` is false.
        OSError: the address cannot be bound.
    """
    cluster = demo_cluster()
    async with serve_sandbox(
        cluster,
        host=host,
        port=port,
        kubeconfig_path=kubeconfig_out,
        offer_v5=not pre_v5,
        allow_non_loopback=allow_non_loopback,
    ) as sandbox:
        web = cluster.deployment("demo", "web")
        ready = next((p.name for p in cluster.pods_of(web) if p.ready), None) if web else None
        kubeconfig = shlex.quote(str(sandbox.kubeconfig_path))
        print(f"kuber-exec sandbox API server: {sandbox.url}", flush=True)
        print(f"kubeconfig: {sandbox.kubeconfig_path}", flush=True)
        print(f"try: kubectl --kubeconfig {kubeconfig} exec deploy/web -- uname -a", flush=True)
        if ready:
            print(f"  or: kubectl --kubeconfig {kubeconfig} exec {ready} -- id", flush=True)
        if pre_v5:
            print("(pre-1.30 mode: no v5.channel.k8s.io; kubectl needs v5 here)", flush=True)
        # SIGTERM and SIGHUP too, and even when the shell started us with SIGINT ignored (a
        # background job): every way of stopping it kills and reaps the pods' processes.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            print("serving until Ctrl-C", flush=True)
            async for _ in signals:
                break


def build_parser() -> argparse.ArgumentParser:
    """The ``sandbox`` subcommand's arguments."""
    parser = argparse.ArgumentParser(
        prog="kuber-exec sandbox",
        description="Serve a loopback Kubernetes API (the demo cluster) that kubectl, the "
        "official client and kuber-exec can exec into; commands run as local processes.",
    )
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument("--kubeconfig-out", metavar="PATH", help="where to write the kubeconfig")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback)")
    parser.add_argument(
        "--allow-non-loopback",
        action="store_true",
        help="allow a non-loopback --host (anyone who can connect can run commands)",
    )
    parser.add_argument(
        "--pre-v5", action="store_true", help="behave as a pre-1.30 cluster (no v5 exec)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The sandbox's command line (``kuber-exec sandbox``): serve :func:`demo_cluster` on
    loopback until interrupted. ``argv`` defaults to ``sys.argv[1:]``; returns the process exit
    code (0 after Ctrl-C, 1 when the address cannot be bound, 2 on bad usage or a public host)."""
    args = build_parser().parse_args(argv)
    try:
        trio.run(
            serve_forever,
            args.port,
            args.kubeconfig_out,
            args.host,
            args.allow_non_loopback,
            args.pre_v5,
        )
    except KeyboardInterrupt:
        return 0
    except BaseExceptionGroup as group:
        # Ctrl-C inside the server's nursery arrives wrapped in an exception group.
        _, rest = group.split(KeyboardInterrupt)
        if rest is None:
            return 0
        raise
    except NonLoopbackError as error:
        print(f"kuber-exec sandbox: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"kuber-exec sandbox: cannot listen: {error}", file=sys.stderr)
        return 1
    return 0
