"""The shared close of an exec connection (``_connection._close``): the handshake is skipped
only when the transport says it is already over; the TCP connection is dropped either way.

The transport here records what the shared code asks of it (the seam under every runtime's
WebSocket library); the real libraries' closes are covered by tests/conformance/test_leaving.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kuber_exec_anyio._connection._connection import open_exec_connection
from kuber_exec_anyio.transport import TransportClosed, TransportOptions
from kuber_exec_core import Subprotocol
from kuber_exec_core.channels import Message


class RecordingTransport:
    """A WebSocket whose server has already sent everything: each call is recorded."""

    def __init__(self, handshake_done: bool | None) -> None:
        self.calls: list[str] = []
        if handshake_done is not None:
            self.closing_handshake_done = handshake_done

    @property
    def subprotocol(self) -> str | None:
        return Subprotocol.V5.value

    async def send(self, message: Message) -> None:
        self.calls.append("send")

    async def receive(self) -> Message:
        self.calls.append("receive")
        raise TransportClosed(clean=True)

    async def ping(self) -> None:
        self.calls.append("ping")

    async def aclose(self) -> bool:
        self.calls.append("aclose")
        return True

    def abort(self) -> None:
        self.calls.append("abort")


def opener(transport: RecordingTransport):  # type: ignore[no-untyped-def]
    @asynccontextmanager
    async def open_transport(options: TransportOptions) -> AsyncIterator[RecordingTransport]:
        yield transport

    return open_transport


@pytest.mark.parametrize(
    ("handshake_done", "handshake"),
    [(True, False), (False, True), (None, True)],
    ids=["done", "not-done", "transport-without-the-attribute"],
)
async def test_the_close_handshake_runs_unless_the_transport_says_it_is_over(
    anyio_backend: str, handshake_done: bool | None, handshake: bool
) -> None:
    transport = RecordingTransport(handshake_done)
    async with open_exec_connection(
        opener(transport), "ws://127.0.0.1:1/exec", [Subprotocol.V5], ping_interval=None
    ):
        pass
    assert ("aclose" in transport.calls) is handshake, transport.calls
    assert transport.calls[-1] == "abort"
