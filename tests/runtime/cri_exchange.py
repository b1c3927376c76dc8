"""A raw exec WebSocket client for the runtime tests (``test_cri_harness``,
``test_client_runtime``): connect, read every message until the server closes."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from websockets.exceptions import ConnectionClosedOK
from websockets.sync.client import connect
from websockets.typing import Subprotocol

__all__ = ["binary", "exchange", "ws_url"]

# websockets >= 15 honours HTTP(S)_PROXY for ws:// URLs; these URLs are loopback-only.
_NO_PROXY: dict[str, Any] = (
    {"proxy": None} if "proxy" in inspect.signature(connect).parameters else {}
)


def ws_url(http_url: str) -> str:
    assert http_url.startswith("http://"), http_url
    return "ws://" + http_url.removeprefix("http://")


def exchange(url: str, protocols: list[str]) -> tuple[str | None, list[bytes | str], int | None]:
    """Connect, read every message until the server closes; return (subprotocol, messages, code)."""
    with connect(
        ws_url(url),
        subprotocols=[Subprotocol(p) for p in protocols],
        compression=None,
        open_timeout=10,
        close_timeout=5,
        **_NO_PROXY,
    ) as ws:
        messages: list[bytes | str] = []
        with contextlib.suppress(ConnectionClosedOK):
            while True:
                messages.append(ws.recv(timeout=30))
        return ws.subprotocol, messages, ws.close_code


def binary(messages: list[bytes | str]) -> list[bytes]:
    assert all(isinstance(m, bytes) for m in messages), messages
    return [m for m in messages if isinstance(m, bytes)]
