"""``kuber-exec web --sandbox``: the browser terminal on the sandbox's demo workspace.

Starts the sandbox (a loopback Kubernetes API server whose pods run local processes) in a
thread, and serves :func:`~kuber_exec_web.create_app` with uvicorn on asyncio, on loopback only,
behind a random token that is printed once, in the URL's fragment (``#token=...``), so that it
never reaches a request line, an access log or a log of this program. Audit events go to a
JSON-lines file; the sessions run under :class:`~kuber_exec_asyncio.SessionLimits`.

Contract of :func:`main`: returns the exit status (0 after a clean stop, 125 for a usage
mistake, 130 after Ctrl-C); never raises for those.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import secrets
import socket
import sys
import tempfile
from collections.abc import Sequence
from typing import TextIO

import uvicorn

from kuber_exec_asyncio import (
    ClusterConfig,
    ExecError,
    ExecService,
    JsonLinesAuditLog,
    KubernetesBackend,
    SessionLimits,
    Workspace,
)

from ._app import AssetsMissingError, create_app
from ._authorize import token_authorizer

__all__ = ["DEMO_WORKSPACE", "build_parser", "main"]

#: The sandbox's demo workspace (``demo_cluster``: Deployment ``web`` is its own, ``other`` not).
DEMO_WORKSPACE = Workspace(project="demo", uid="demo-uid")
EXIT_USAGE = 125
EXIT_INTERRUPTED = 130

_log = logging.getLogger("kuber_exec_web")


def build_parser(prog: str = "kuber-exec web") -> argparse.ArgumentParser:
    """The command line of ``kuber-exec web``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "A browser terminal (xterm.js) into a workspace's Deployment pods. With --sandbox: "
            "the in-process sandbox's demo workspace (project demo, workspace uid demo-uid), "
            "served on loopback behind a random token printed once at start."
        ),
        epilog=(
            "For a real cluster, embed kuber_exec_web.create_app in your platform's ASGI app, "
            "with your own authorization callable (docs/web.md)."
        ),
    )
    parser.add_argument(
        "--sandbox", action="store_true", help="serve the sandbox's demo workspace (required)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: any free port)"
    )
    parser.add_argument(
        "--audit-log",
        default=os.path.join(tempfile.gettempdir(), "kuber-exec-web-audit.jsonl"),
        help="JSON-lines file the audit events are appended to (default: %(default)s)",
    )
    parser.add_argument(
        "--record-dir",
        metavar="DIR",
        help="record every terminal as asciicast v2 in DIR (created if missing; output and "
        "resizes, not keystrokes) and serve the replay page, /replay (default: no recording)",
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=4,
        help="terminals open at once per workspace (default %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=900.0,
        help="seconds without input or output before a terminal is closed (default %(default)g)",
    )
    parser.add_argument(
        "--max-duration",
        type=float,
        default=3600.0,
        help="seconds a terminal may stay open (default %(default)g)",
    )
    parser.add_argument(
        "--ping-interval",
        type=float,
        default=25.0,
        help="seconds between keep-alive pings, both ways, at most 30 (default %(default)g)",
    )
    return parser


def _loopback(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return address if address.is_loopback else None


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run ``kuber-exec web`` with ``argv`` (default ``sys.argv[1:]``); returns the status."""
    stdout = out if out is not None else sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    if not args.sandbox:
        parser.print_usage(sys.stderr)
        sys.stderr.write(
            "kuber-exec web: EXEC_INVALID: only --sandbox is served from the command line; for "
            "a real cluster, embed kuber_exec_web.create_app with your authorization callable "
            "(docs/web.md)\n"
        )
        return EXIT_USAGE
    address = _loopback(args.host)
    if address is None:
        sys.stderr.write(
            f"kuber-exec web: EXEC_INVALID: --host {args.host} is not a loopback address; the "
            "demo serves 127.0.0.1 or ::1 only\n"
        )
        return EXIT_USAGE
    try:
        limits = SessionLimits(
            max_sessions_per_workspace=args.max_sessions,
            idle_timeout=args.idle_timeout,
            max_duration=args.max_duration,
        )
        if not 0 < args.ping_interval <= 30:
            raise ValueError("--ping-interval must be more than 0 and at most 30")
    except (ValueError, ExecError) as error:
        message = error.message if isinstance(error, ExecError) else str(error)
        sys.stderr.write(f"kuber-exec web: EXEC_INVALID: {message}\n")
        return EXIT_USAGE
    try:
        # The sandbox (trio, in a thread) is the demo's cluster, not part of the web app: the web
        # extra does not install it.
        from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread
    except ImportError as error:
        sys.stderr.write(
            f"kuber-exec web: EXEC_FAILED: --sandbox needs the sandbox ({error}): "
            "pip install 'kuber-exec[web,sandbox]'\n"
        )
        return EXIT_USAGE
    _configure_logging()
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((str(address), args.port))
        listener.listen(128)  # The printed URL works from the moment it is printed.
        with (
            run_sandbox_in_thread(demo_cluster()) as sandbox,
            JsonLinesAuditLog(args.audit_log) as audit,
        ):
            asyncio.run(_serve(sandbox.url, listener, audit, limits, args, stdout))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except AssetsMissingError as error:
        # An ExecError: its str already starts with its code.
        sys.stderr.write(f"kuber-exec web: {error}\n")
        return EXIT_USAGE
    except OSError as error:
        sys.stderr.write(f"kuber-exec web: EXEC_FAILED: {error}\n")
        return EXIT_USAGE
    finally:
        listener.close()
    return 0


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
    for name in ("kuber_exec", "kuber_exec_web"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)


async def _serve(
    sandbox_url: str,
    listener: socket.socket,
    audit: JsonLinesAuditLog,
    limits: SessionLimits,
    args: argparse.Namespace,
    stdout: TextIO,
) -> None:
    token = secrets.token_urlsafe(24)
    async with KubernetesBackend(ClusterConfig(sandbox_url)) as backend:
        service = ExecService(backend, audit=audit, session_limits=limits)
        app = create_app(
            service,
            token_authorizer(token, DEMO_WORKSPACE),
            default_deployment="web",
            title="kuber-exec sandbox terminal",
            ping_interval=args.ping_interval,
            recordings=args.record_dir,
        )
        config = uvicorn.Config(
            app,
            log_level="info",
            lifespan="off",
            ws_ping_interval=min(20.0, args.ping_interval),
            ws_ping_timeout=20.0,
            timeout_graceful_shutdown=3,
        )
        server = uvicorn.Server(config)
        host, port = listener.getsockname()[:2]
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        recording = (
            f"  Recording: every terminal, in {args.record_dir}; replay at http://{netloc}/replay\n"
            if args.record_dir
            else ""
        )
        stdout.write(
            "kuber-exec web: a browser terminal into the sandbox's demo workspace\n"
            f"  (project {DEMO_WORKSPACE.project}, workspace uid {DEMO_WORKSPACE.uid}): its "
            "Deployment web runs `sh`,\n"
            "  Deployment other belongs to another workspace.\n"
            f"  Open:      http://{netloc}/?deployment=web#token={token}\n"
            "             (the token is printed only here and never logged)\n"
            f"  Audit log: {audit.path}\n"
            f"{recording}"
            f"  Limits:    {limits.max_sessions_per_workspace} terminals per workspace, idle "
            f"{limits.idle_timeout:g} s, at most {limits.max_duration:g} s each\n"
            "  Stop with Ctrl-C.\n"
        )
        stdout.flush()
        await server.serve(sockets=[listener])
