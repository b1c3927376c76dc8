"""The same app on trio: hypercorn's trio server, kuber_exec_trio's service, a trio client."""

from __future__ import annotations

import json
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
        if isinstance(message, str) and json.loads(message)["type"] != "ping":
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
