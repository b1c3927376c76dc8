"""The browser terminal's echo without a browser: a WebSocket client typing into the app.

Part of ``browser_keystroke.py``: it splits the page's "send to echo" into the app's own path
(the bridge, the exec session to the pod, the pod's TTY and back) and what the browser adds
(its network process and the message task). The client speaks the page's protocol
(``kuber-exec.terminal.v1``, the token as a ``bearer.`` subprotocol), sends one byte at a time
at the shell's prompt and times the first output message after it; between keystrokes it waits
for any late output and kills the line (Ctrl-U) now and then.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time

import websockets

PROTOCOL = "kuber-exec.terminal.v1"
LINE_KEYS = 20
_QUIET_SECONDS = 0.05


async def _drain(socket: websockets.ClientConnection, quiet: float) -> None:
    """Read until nothing came for ``quiet`` seconds."""
    while True:
        try:
            await asyncio.wait_for(socket.recv(), quiet)
        except TimeoutError:
            return


async def _echoes(base: str, token: str, keys: int) -> tuple[list[float], list[float]]:
    host = base.split("//", 1)[1].rstrip("/")
    url = f"ws://{host}/ws?deployment=web&cols=80&rows=24"
    echo: list[float] = []
    pong: list[float] = []
    offered = [websockets.Subprotocol(PROTOCOL), websockets.Subprotocol("bearer." + token)]
    async with websockets.connect(url, subprotocols=offered, compression=None) as socket:
        while True:
            message = await socket.recv()
            if isinstance(message, str) and json.loads(message)["type"] == "open":
                break
        await _drain(socket, 0.5)  # The shell's prompt.
        for key in range(keys):
            if key % LINE_KEYS == LINE_KEYS - 1:
                await socket.send(b"\x15")
            await _drain(socket, _QUIET_SECONDS)
            started = time.perf_counter()
            await socket.send(b"a")
            while not isinstance(await socket.recv(), bytes):
                pass
            echo.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await socket.send(json.dumps({"type": "ping"}))
            while True:
                message = await socket.recv()
                if isinstance(message, str) and json.loads(message)["type"] == "pong":
                    break
            pong.append((time.perf_counter() - started) * 1000)
    return echo, pong


def app_echo(base: str, token: str, keys: int) -> dict[str, float]:
    """Medians (ms): a keystroke's echo and a ping's pong, from a client on loopback.

    Runs its own event loop in a thread (the caller may be inside Playwright's).
    """
    found: dict[str, float] = {}
    failure: list[BaseException] = []

    def measure() -> None:
        try:
            echo, pong = asyncio.run(_echoes(base, token, keys))
            found["echo_ms"] = round(statistics.median(echo), 2)
            found["ping_ms"] = round(statistics.median(pong), 2)
        except BaseException as error:  # Re-raised in the caller's thread.
            failure.append(error)

    thread = threading.Thread(target=measure, name="app-echo")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return found
