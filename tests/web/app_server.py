"""Serving the browser terminal for tests: uvicorn in this asyncio loop, or the demo CLI.

``serve_app`` binds and listens on a loopback socket before uvicorn starts, so a client may
connect at once (the connection waits in the backlog until uvicorn accepts it): no waiting for
"started". ``DemoProcess`` runs ``kuber-exec web --sandbox`` as a child process and reads the URL
(and so the token) from the one line it prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import uvicorn

_URL_LINE = re.compile(r"Open:\s+(http://\S+)")


@asynccontextmanager
async def serve_app(app: Any, **config: Any) -> AsyncIterator[str]:
    """Serve the ASGI ``app`` on 127.0.0.1 (a free port) for the block; yields ``host:port``.

    ``config``: more ``uvicorn.Config`` options (e.g. ``ws_ping_interval=None``).
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    options: dict[str, Any] = {"lifespan": "off", "log_level": "warning", "access_log": False}
    uvicorn_config = uvicorn.Config(app, **{**options, **config})
    server = uvicorn.Server(uvicorn_config)
    task = asyncio.ensure_future(server.serve(sockets=[listener]))
    try:
        host, port = listener.getsockname()[:2]
        yield f"{host}:{port}"
    finally:
        server.should_exit = True
        await task
        listener.close()


class IdleCuttingProxy:
    """A loopback TCP proxy to ``target`` (``host:port``) that drops a connection once no byte
    crossed it for ``idle`` seconds, as proxies in front of web terminals do (often at 60 s)."""

    def __init__(self, target: str, idle: float) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.idle = idle
        self.cut = 0

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        upstream = await anyio.connect_tcp(*self.target)
        # One deadline for the connection, pushed back by every chunk either way.
        with anyio.CancelScope(deadline=anyio.current_time() + self.idle) as idle:

            async def pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    async for chunk in source:
                        idle.deadline = anyio.current_time() + self.idle
                        await sink.send(chunk)
                idle.cancel()  # One side closed: so does the proxy.

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pump, client, upstream)
                tasks.start_soon(pump, upstream, client)
        if idle.cancelled_caught and anyio.current_time() >= idle.deadline:
            self.cut += 1
        await anyio.aclose_forcefully(client)
        await anyio.aclose_forcefully(upstream)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Listen on 127.0.0.1 for the block; yields ``host:port``."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, self._handle)
            try:
                yield f"127.0.0.1:{port}"
            finally:
                tasks.cancel_scope.cancel()


class DemoProcess:
    """``kuber-exec web --sandbox`` in a child process; its URL, token, output and RSS."""

    def __init__(self, *options: str, audit_log: Path, command: tuple[str, ...] = ()) -> None:
        # ``command``: how to start kuber-exec (default: this interpreter's kuber_exec_cli).
        self.audit_log = audit_log
        self.process = subprocess.Popen(
            [
                *(command or (sys.executable, "-m", "kuber_exec_cli")),
                "web",
                "--sandbox",
                "--audit-log",
                str(audit_log),
                *options,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        # Drain stderr from a thread, so that a chatty server never blocks on a full pipe.
        self._stderr_thread = threading.Thread(
            target=self._drain, args=(self.process.stderr, self.stderr_lines), daemon=True
        )
        self._stderr_thread.start()
        url = None
        for line in self.process.stdout:
            self.stdout_lines.append(line)
            match = _URL_LINE.search(line)
            if match:
                url = match.group(1)
                break
        if url is None:
            self.stop()
            raise AssertionError(
                "kuber-exec web printed no URL:\n" + "".join(self.stdout_lines + self.stderr_lines)
            )
        self.url = url
        self.token = url.split("#token=", 1)[1]
        self.base = url.split("?", 1)[0]
        self._stdout_thread = threading.Thread(
            target=self._drain, args=(self.process.stdout, self.stdout_lines), daemon=True
        )
        self._stdout_thread.start()

    @staticmethod
    def _drain(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def audit_text(self) -> str:
        """The audit log as written so far (``""`` before the first event)."""
        try:
            return self.audit_log.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def rss_bytes(self) -> int:
        """The server process's resident set size now (VmRSS)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> int:
        """Ctrl-C the server, as a user would; returns its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for thread in ("_stderr_thread", "_stdout_thread"):
            if hasattr(self, thread):
                getattr(self, thread).join(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return self.process.returncode

    @property
    def output(self) -> str:
        """Everything it printed on stdout and stderr so far."""
        return "".join(self.stdout_lines) + "".join(self.stderr_lines)
