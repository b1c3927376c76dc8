"""The backend seam (what the service needs from a cluster), shared by both runtimes.

A backend reads Deployments and pods and opens exec connections; everything else (validation,
ownership, ranking, the channel protocol, caps, frame order) happens in the core, so a backend
can be swapped (a real API server, an in-memory test double) without changing any rule.

The protocols only describe awaitables: the same seam serves trio and asyncio. Besides its
three methods, a backend may offer the optional hooks of :class:`BackendHooks`; the service
reads them through :func:`backend_hooks`, and without them it does what their defaults say.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

import anyio.abc

from kuber_exec_core import (
    Deployment,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecRequest,
    ExecStreams,
    LabelSelector,
    Pod,
    ResolvedTarget,
    Subprotocol,
)
from kuber_exec_core.channels import Message
from kuber_exec_core.kube import ApiResponse

from ._kubernetes._rest import RestClient

if TYPE_CHECKING:
    from ._kubernetes._lease_slots import ClusterSlots

__all__ = [
    "Backend",
    "BackendHooks",
    "ConnectionEnd",
    "ExecConnection",
    "StreamedAnswer",
    "backend_hooks",
]


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


class BackendHooks:
    """The optional parts of a backend, each with what ``ExecService`` does without it.

    A :class:`Backend` needs only its three methods. A backend that can do more derives from
    this class and overrides the hooks it has (``KubernetesBackend`` and ``MemoryBackend`` do);
    the service reads every hook through :func:`backend_hooks`, so a backend that does not
    derive from it gets these defaults, whatever attributes it has.
    """

    #: Whether the server behind the backend runs the commands: the service then starts each
    #: one supervised and cleans up after an interrupted one (docs/cleanup.md). ``False`` for
    #: a backend that plays scripts (``MemoryBackend``): no shell, no processes.
    runs_commands: bool = True

    #: Session slots held as Leases across replicas (``KubernetesBackend(cluster_slots=...)``),
    #: taken over :meth:`rest_client`; ``None``: the per-workspace limit of
    #: ``SessionLimits`` is counted in this process.
    cluster_slots: ClusterSlots | None = None

    def rest_client(self) -> RestClient:
        """The REST client the Lease slots of :attr:`cluster_slots` use, called when a slot is
        taken (the backend is open by then). A backend that sets :attr:`cluster_slots` must
        override it.

        Raises:
            ExecError: ``EXEC_FAILED``: this backend has no REST client (the default), or it
                is not open.
        """
        raise ExecError(ExecErrorCode.FAILED, f"{type(self).__name__} has no REST client")

    def background_tasks(self) -> anyio.abc.TaskGroup | None:
        """A task group that outlives single calls, for work that goes on after its caller
        returned (a cleanup not finished within its caller's bound, docs/cleanup.md), or
        ``None`` (the default): nothing outlives its call, so such work is bounded by its
        caller's wait and what is left then is given up. The service starts tasks in it from
        any of its calls; the backend decides how long they may live (``KubernetesBackend``:
        while its ``async with`` block runs, and a short time after it, then cancelled).
        """
        return None

    def resolve_cached(self, request: ExecRequest, limits: ExecLimits) -> ResolvedTarget | None:
        """The target of a plain resolution of ``request`` in one step (from a watch cache), or
        ``None`` (the default): resolve through ``get_deployment`` and ``list_pods``.

        Raises:
            ExecError: what resolving through the reads raises for the same state.
        """
        return None

    async def retarget(
        self, request: ExecRequest, limits: ExecLimits, target: ResolvedTarget, error: ExecError
    ) -> ResolvedTarget | None:
        """The target to retry on after the exec upgrade for ``target`` was refused with
        ``error`` on entry (the command never started), or ``None`` (the default): raise
        ``error``. Called at most once per exec, never after the connection opened.
        """
        return None

    # Attach, logs and debug containers (docs/debug.md): a backend without them refuses clearly.

    def attach(
        self, target: ResolvedTarget, streams: ExecStreams, subprotocols: Sequence[Subprotocol]
    ) -> AbstractAsyncContextManager[ExecConnection]:
        """Open the ``pods/attach`` WebSocket to ``target``'s container (exec's wire, no
        command); leaving the context closes it and leaves the process running.

        Raises (on entry):
            ExecError: ``EXEC_FAILED`` here (the default: this backend cannot attach); a
                backend's own: the upgrade was refused or the server could not be reached.
        """
        raise ExecError(ExecErrorCode.FAILED, f"{type(self).__name__} cannot attach")

    async def api_request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> ApiResponse:
        """One request to the API server (``path`` with its query), acting as the exec's user;
        the answer whatever its status.

        Raises:
            ExecError: ``EXEC_FAILED``: no REST API here (the default), or the server could
                not be reached.
        """
        raise ExecError(ExecErrorCode.FAILED, f"{type(self).__name__} has no Kubernetes API")

    def api_stream(self, path: str) -> AbstractAsyncContextManager[StreamedAnswer]:
        """A streamed ``GET`` of ``path`` (a log, a watch): the answer's status, and for a
        ``200`` its body as it comes.

        Raises (on entry):
            ExecError: ``EXEC_FAILED``: no REST API here (the default), or no answer.
        """
        raise ExecError(ExecErrorCode.FAILED, f"{type(self).__name__} has no Kubernetes API")


class StreamedAnswer(Protocol):
    """A streamed answer: its HTTP status, and (for a 200) its body in chunks as they come."""

    @property
    def status(self) -> int:
        """The HTTP status."""
        ...

    @property
    def error_body(self) -> bytes:
        """For a status other than 200: the answer's body (at most 64 KiB), else empty."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body's chunks, as they arrive, until it ends."""
        ...


_NO_HOOKS = BackendHooks()


def backend_hooks(backend: object) -> BackendHooks:
    """``backend``'s optional hooks: the backend itself when it derives from
    :class:`BackendHooks`, else the defaults."""
    return backend if isinstance(backend, BackendHooks) else _NO_HOOKS


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
