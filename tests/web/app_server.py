"""Serving the browser terminal for tests: uvicorn in this asyncio loop, or the demo CLI.

``serve_app`` binds and listens on a loopback socket before uvicorn starts, so a client may
connect at once (the connection waits in the backlog until uvicorn accepts it): no waiting for
"started". ``DemoProcess`` runs ``kuber-exec web --sandbox`` as a child process and reads the URL
(and so the token) from the one line it prints.
"""

from __future__ import annotations

import asyncio
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

import uvicorn

_URL_LINE = re.compile(r"Open:\s+(http://\S+)")


@asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """Serve the ASGI ``app`` on 127.0.0.1 (a free port) for the block; yields ``ws://host:port``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[listener]))
    try:
        host, port = listener.getsockname()[:2]
        yield f"{host}:{port}"
    finally:
        server.should_exit = True
        await task
        listener.close()


class DemoProcess:
    """``kuber-exec web --sandbox`` in a child process; its URL, token, output and RSS."""

    def __init__(self, *options: str, audit_log: Path) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kuber_exec_cli",
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
