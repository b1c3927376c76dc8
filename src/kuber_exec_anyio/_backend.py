"""The backend seam (what the service needs from a cluster), shared by both runtimes.

A backend reads Deployments and pods and opens exec connections; everything else (validation,
ownership, ranking, the channel protocol, caps, frame order) happens in the core, so a backend
can be swapped (a real API server, an in-memory test double) without changing any rule.

The protocols only describe awaitables: the same seam serves trio and asyncio.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from kuber_exec_core import Deployment, ExecStreams, LabelSelector, Pod, ResolvedTarget, Subprotocol
from kuber_exec_core.channels import Message

__all__ = ["Backend", "ConnectionEnd", "ExecConnection"]


class ExecConnection(Protocol):
    """One open exec WebSocket: whole messages in and out, never fragmented."""

    @property
    def subprotocol(self) -> Subprotocol:
        """The subprotocol the server chose (checked against the offer)."""
        ...

    @property
    def closed_cleanly(self) -> bool:
        """After ``receive_message`` returned ``None``: whether a Close frame arrived."""
        ...

    @property
    def close_reason(self) -> str | None:
        """After ``receive_message`` returned ``None``: why, if known (e.g. a keepalive timeout)."""
        ...

    async def send_message(self, message: Message) -> None:
        """Send one whole message. Raises ``ExecError(EXEC_FAILED)`` once the connection is gone."""
        ...

    async def receive_message(self) -> Message | None:
        """The next whole message, or ``None`` once the connection has ended."""
        ...


class Backend(Protocol):
    """What ``ExecService`` needs from a cluster."""

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        """The Deployment, or ``None`` when it does not exist."""
        ...

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        """The pods matching ``selector``, each with its owning Deployment uid resolved through
        its ReplicaSet's controller reference (``None`` when it has none)."""
        ...

    def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AbstractAsyncContextManager[ExecConnection]:
        """Open the exec WebSocket; leaving the context closes it.

        Raises (on entry):
            ExecError: the upgrade was refused or the server could not be reached.
        """
        ...


class ConnectionEnd:
    """How an exec connection ended, for :class:`ExecConnection` implementations to inherit.

    It holds the negotiated ``subprotocol`` and, once ``_end`` is called (first call wins),
    ``closed_cleanly`` and ``close_reason``; the transports only decide when and why.
    """

    def __init__(self, subprotocol: Subprotocol) -> None:
        self._subprotocol = subprotocol
        self._closed = False
        self._clean = False
        self._reason: str | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._subprotocol.value} closed={self._closed}>"

    @property
    def subprotocol(self) -> Subprotocol:
        """The subprotocol the server chose."""
        return self._subprotocol

    @property
    def closed_cleanly(self) -> bool:
        """Whether a Close frame ended the connection (meaningful once it has ended)."""
        return self._clean

    @property
    def close_reason(self) -> str | None:
        """Why the connection ended, when this side knows more than the close itself."""
        return self._reason

    def _end(self, *, clean: bool, reason: str | None) -> None:
        if not self._closed:
            self._closed = True
            self._clean = clean
            self._reason = reason
