"""The browser terminal's file transfer: throughput and the server's memory, one run.

Starts ``kuber-exec web --sandbox`` (the app and the sandbox in one child process), opens a
terminal over its WebSocket, ``cd``s it into a temporary directory, then uploads a file of
random bytes through ``POST /files`` (streamed from disk by httpx) and downloads it back through
``GET /files`` (streamed to disk). Reports MB/s each way and the server's peak RSS (``VmHWM``)
above its RSS once the terminal was open:

    python benchmarks/web_file_transfer.py            # 64 MB
    python benchmarks/web_file_transfer.py --full     # 200 MB

Both ends are this machine (the sandbox's pods are local processes). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

_URL = re.compile(r"Open:\s+(http://[^/]+/)\S*#token=(\S+)")
MB = 1_000_000


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


async def _measure(base: str, token: str, pid: int, size: int, work: Path) -> dict[str, float]:
    address = base.removeprefix("http://").rstrip("/")
    source = work / "source.bin"
    with source.open("wb") as out:
        for _ in range(size // MB):
            out.write(os.urandom(MB))
    protocols = [Subprotocol("kuber-exec.terminal.v1"), Subprotocol(f"bearer.{token}")]
    async with (
        connect(f"ws://{address}/ws?deployment=web", subprotocols=protocols) as ws,
        httpx.AsyncClient(base_url=base, timeout=600) as http,
    ):
        terminal = None
        while terminal is None:
            message = await ws.recv()
            if isinstance(message, str) and json.loads(message)["type"] == "open":
                terminal = json.loads(message)["terminal"]
        remote = work / "remote"
        remote.mkdir()
        await ws.send(f"cd {remote}\r".encode())
        await asyncio.sleep(0.5)  # A benchmark: the shell's cd needs no exact synchronisation.
        baseline = _kib(pid, "VmRSS")
        headers = {"authorization": f"Bearer {token}"}

        async def pieces() -> AsyncIterator[bytes]:
            with source.open("rb") as file:
                while piece := file.read(256 * 1024):
                    yield piece

        started = time.monotonic()
        answer = await http.post(
            "/files",
            params={"terminal": terminal, "name": "up.bin"},
            content=pieces(),
            headers={**headers, "content-length": str(size)},
        )
        up = time.monotonic() - started
        answer.raise_for_status()
        peak_up = _kib(pid, "VmHWM")
        started = time.monotonic()
        digest = hashlib.sha256()
        async with http.stream(
            "GET", "/files", params={"terminal": terminal, "path": "up.bin"}, headers=headers
        ) as response:
            response.raise_for_status()
            async for piece in response.aiter_bytes():
                digest.update(piece)
        down = time.monotonic() - started
        peak = _kib(pid, "VmHWM")
    assert digest.hexdigest() == answer.json()["sha256"], "the download differs from the upload"
    return {
        "mb": size / MB,
        "upload_mb_per_s": round(size / MB / up, 1),
        "download_mb_per_s": round(size / MB / down, 1),
        "peak_rss_above_baseline_mib_upload": round((peak_up - baseline) / 1024, 1),
        "peak_rss_above_baseline_mib": round((peak - baseline) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="200 MB instead of 64 MB")
    size = (200 if parser.parse_args().full else 64) * MB
    server = subprocess.Popen(
        [sys.executable, "-m", "kuber_exec_cli", "web", "--sandbox"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        for line in server.stdout:
            match = _URL.search(line)
            if match:
                break
        else:
            raise SystemExit("kuber-exec web printed no URL")
        with tempfile.TemporaryDirectory() as work:
            figures = asyncio.run(
                _measure(match.group(1), match.group(2), server.pid, size, Path(work))
            )
        print(json.dumps(figures, indent=2))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
