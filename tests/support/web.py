"""Helpers of the browser terminal's tests: a service on a sandbox, and a WebSocket client that
speaks the page's subprotocol (kuber-exec.terminal.v1)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any, cast

from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Origin, Subprotocol

from kuber_exec_sandbox import Sandbox
from kuber_exec_web import PROTOCOL

__all__ = ["TOKEN", "control", "output_until", "service_for", "terminal"]

#: The bearer token the tests' authorizers accept for the demo workspace.
TOKEN = "s3cret-token-for-tests"


@asynccontextmanager
async def service_for(adapter: ModuleType, sandbox: Sandbox, **options: Any) -> AsyncIterator[Any]:
    """The adapter's ``ExecService`` on ``sandbox``, with ``options`` (audit, session_limits)."""
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        yield adapter.ExecService(backend, **options)


def terminal(
    address: str,
    query: str = "deployment=web",
    token: str | None = TOKEN,
    *,
    subprotocols_extra: list[str] | None = None,
    **options: Any,
) -> Any:
    """A WebSocket client of the terminal at ``address`` (use it as an async context);
    ``subprotocols_extra``: more subprotocols offered (``viewer.<key>``, ``join.<token>``)."""
    protocols = [Subprotocol(PROTOCOL)]
    if token is not None:
        protocols.append(Subprotocol(f"bearer.{token}"))
    protocols.extend(Subprotocol(extra) for extra in subprotocols_extra or ())
    options.setdefault("origin", Origin(f"http://{address}"))
    return connect(f"ws://{address}/ws?{query}", subprotocols=protocols, **options)


async def control(ws: ClientConnection) -> dict[str, Any]:
    """The next JSON message, skipping output, pings and the list of viewers."""
    while True:
        message = await ws.recv()
        if isinstance(message, str):
            value = cast(dict[str, Any], json.loads(message))
            if value["type"] not in ("ping", "viewers"):
                return value


async def output_until(ws: ClientConnection, needle: bytes) -> bytes:
    """Output (each piece acknowledged) until ``needle`` has arrived; fails if the terminal
    ends first."""
    received = b""
    while needle not in received:
        message = await ws.recv()
        if isinstance(message, bytes):
            received += message
            await ws.send(json.dumps({"type": "ack", "bytes": len(message)}))
        elif json.loads(message)["type"] in ("exit", "error"):
            raise AssertionError(f"ended before {needle!r}: {message} after {received!r}")
    return received
