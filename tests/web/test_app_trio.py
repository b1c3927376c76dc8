"""The same app on trio: hypercorn's trio server, kuber_exec_trio's service, a trio client."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from trio_websocket import open_websocket_url

import kuber_exec_trio as adapter
from kuber_exec_sandbox import Sandbox
from kuber_exec_web import PROTOCOL, create_app, token_authorizer
from support import DEMO

pytestmark = pytest.mark.anyio
TOKEN = "trio-test-token"


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _control(ws: Any) -> dict[str, Any]:
    while True:
        message = await ws.get_message()
        if isinstance(message, str) and json.loads(message)["type"] not in ("ping", "viewers"):
            return dict(json.loads(message))


async def test_a_terminal_under_hypercorn_on_trio(sandbox: Sandbox) -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        app = create_app(
            adapter.ExecService(backend), token_authorizer(TOKEN, DEMO), default_deployment="web"
        )
        async with trio.open_nursery() as nursery:
            shutdown = trio.Event()
            bound = await nursery.start(
                lambda task_status: serve(
                    app,  # type: ignore[arg-type]
                    config,
                    shutdown_trigger=shutdown.wait,
                    task_status=task_status,
                )
            )
            address = bound[0].removeprefix("http://")
            with trio.fail_after(30):
                async with open_websocket_url(
                    f"ws://{address}/ws?deployment=web",
                    subprotocols=[PROTOCOL, f"bearer.{TOKEN}"],
                    extra_headers=[(b"Origin", f"http://{address}".encode())],
                ) as ws:
                    assert (await _control(ws))["type"] == "open"
                    await ws.send_message(b"echo trio $((2 + 2))\r")
                    output = b""
                    while b"trio 4\r\n" not in output:
                        message = await ws.get_message()
                        if isinstance(message, bytes):
                            output += message
                    await ws.send_message(b"exit 9\r")
                    assert await _control(ws) == {"type": "exit", "code": 9}
                async with open_websocket_url(
                    f"ws://{address}/ws?deployment=other",
                    subprotocols=[PROTOCOL, f"bearer.{TOKEN}"],
                    extra_headers=[(b"Origin", f"http://{address}".encode())],
                ) as ws:
                    refused = await _control(ws)
                    assert refused["code"] == "EXEC_TARGET_FORBIDDEN"
            shutdown.set()


async def test_a_dropped_terminal_resumes_under_hypercorn_on_trio(sandbox: Sandbox) -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        app = create_app(
            adapter.ExecService(backend),
            token_authorizer(TOKEN, DEMO),
            default_deployment="web",
            ring_bytes=8192,
            reconnect_grace=10.0,
        )
        async with trio.open_nursery() as nursery:
            shutdown = trio.Event()
            bound = await nursery.start(
                lambda task_status: serve(
                    app,  # type: ignore[arg-type]
                    config,
                    shutdown_trigger=shutdown.wait,
                    task_status=task_status,
                )
            )
            address = bound[0].removeprefix("http://")
            origin = [(b"Origin", f"http://{address}".encode())]
            screen = b""

            async def read_one(ws: Any) -> None:
                nonlocal screen
                message = await ws.get_message()
                if isinstance(message, bytes):
                    screen += message
                    ack = {"type": "ack", "bytes": len(message), "offset": len(screen)}
                    await ws.send_message(json.dumps(ack))

            async def read_until(ws: Any, needle: bytes) -> None:
                while needle not in screen:
                    await read_one(ws)

            with trio.fail_after(60):
                async with open_websocket_url(
                    f"ws://{address}/ws?deployment=web",
                    subprotocols=[PROTOCOL, f"bearer.{TOKEN}"],
                    extra_headers=origin,
                ) as ws:
                    opened = await _control(ws)
                    assert opened["offset"] == 0
                    await ws.send_message(b"export T=trio38; echo pid=$$=dip\r")
                    while (found := re.search(rb"pid=(\d+)=dip", screen)) is None:
                        await read_one(ws)
                    pid = found.group(1)
                    await ws.send_message(b"seq 1 20000; echo E''ND\r")
                    await read_until(ws, b"\r\n500\r\n")
                    # The network drops: the TCP connection ends without a close frame.
                    await ws._stream.aclose()
                async with open_websocket_url(
                    f"ws://{address}/ws?session={opened['session']}&resume={len(screen)}",
                    subprotocols=[PROTOCOL, f"bearer.{TOKEN}", f"viewer.{opened['key']}"],
                    extra_headers=origin,
                ) as ws:
                    again = await _control(ws)
                    assert (again["type"], again["offset"]) == ("open", len(screen))
                    await read_until(ws, b"END")
                    await ws.send_message(b"echo $$ $T\r")
                    await read_until(ws, pid + b" trio38\r\n")
                    await ws.send_message(b"exit 2\r")
                    assert await _control(ws) == {"type": "exit", "code": 2}
            numbers = b"".join(b"%d\r\n" % n for n in range(1, 20001))
            assert numbers in screen, "a byte was lost or repeated across the drop"
            shutdown.set()
