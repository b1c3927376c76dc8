"""Testing kit: property-test your exec handling without a cluster or sockets, on any runtime.

:class:`MemoryBackend` is a :class:`~kuber_exec_anyio.Backend` whose REST reads are answered by a
function (for instance ``DeploymentScenario.respond`` from ``kuber_exec_core.testing``'s
``deployment_scenarios()`` strategy) and whose execs replay scripted server messages (for
instance a ``ServerScript`` from ``server_scripts()``). Plug it into ``ExecService`` and test
your own code's handling of every outcome, under trio or asyncio. The strategies themselves live
in ``kuber_exec_core.testing`` (install the ``testing`` extra for hypothesis).

No sockets: the REST reads run the same core plans (``DeploymentLookup``, ``PodListing``) that a
real backend runs, against ``respond``; an exec negotiates its subprotocol like a real server
(first client-preferred match, else the empty-body 403) and replays the scripted server
messages, then ends the connection (cleanly or not). What the client sent is recorded for
assertions. Every await is an anyio checkpoint, so it runs (and yields to the scheduler) under
trio and asyncio alike; each adapter's ``testing`` module re-exports it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
import attrs

from kuber_exec_core import (
    Deployment,
    ExecError,
    ExecErrorCode,
    ExecStreams,
    LabelSelector,
    Pod,
    ResolvedTarget,
    Subprotocol,
)
from kuber_exec_core.channels import Message, choose_subprotocol
from kuber_exec_core.kube import (
    ApiGet,
    ApiPlan,
    ApiResponse,
    DeploymentLookup,
    PodListing,
    exec_upgrade_error,
)

from ._backend import BackendHooks

__all__ = ["ExecCall", "MemoryBackend", "MemoryExecConnection"]


@attrs.define
class ExecCall:
    """One exec the backend served: what was asked, and every message the client sent."""

    target: ResolvedTarget
    command: tuple[str, ...]
    streams: ExecStreams
    offered: tuple[Subprotocol, ...]
    subprotocol: Subprotocol
    sent: list[Message] = attrs.field(factory=list)


class MemoryExecConnection:
    """An :class:`~kuber_exec_anyio.ExecConnection` replaying scripted server messages."""

    def __init__(
        self,
        backend: MemoryBackend,
        call: ExecCall,
        messages: Sequence[Message],
        clean_close: bool,
    ) -> None:
        self._backend = backend
        self._call = call
        self._messages = list(messages)
        self._position = 0
        self._clean = clean_close
        self._ended = False
        self._closed_by_client = False

    @property
    def subprotocol(self) -> Subprotocol:
        return self._call.subprotocol

    @property
    def closed_cleanly(self) -> bool:
        return self._clean

    @property
    def close_reason(self) -> str | None:
        return None  # a scripted cut carries no reason, like a reset TCP connection

    async def send_message(self, message: Message) -> None:
        await self._backend.checkpoint()
        if self._closed_by_client:
            raise ExecError(ExecErrorCode.FAILED, "The exec connection closed while sending")
        self._call.sent.append(message)

    async def receive_message(self) -> Message | None:
        await self._backend.checkpoint()
        if self._closed_by_client or self._position >= len(self._messages):
            self._ended = True
            return None
        message = self._messages[self._position]
        self._position += 1
        return message

    def close(self) -> None:
        self._closed_by_client = True


Script = Sequence[Message] | Callable[[ExecCall], Sequence[Message]]


class MemoryBackend(BackendHooks):
    """A :class:`~kuber_exec_anyio.Backend` with no I/O.

    Args:
        respond: answers each REST ``ApiGet`` (404 ``Status`` for what does not exist).
        script: the server messages of every exec, or a function of the :class:`ExecCall`
            returning them (to script by command).
        subprotocols: what the fake server supports (v5 and v4 by default).
        clean_close: whether the connection ends with a Close frame after the script.

    Its server runs no commands (it plays scripts), so ``ExecService`` does not supervise the
    execs it sends here (:attr:`runs_commands`; docs/cleanup.md): a script sees the user's argv.
    """

    #: No shell runs behind this backend, so no supervised start and no cleanup exec
    #: (:attr:`BackendHooks.runs_commands`).
    runs_commands = False

    def __init__(
        self,
        respond: Callable[[ApiGet], ApiResponse],
        script: Script = (),
        *,
        subprotocols: Sequence[Subprotocol] = (Subprotocol.V5, Subprotocol.V4),
        clean_close: bool = True,
    ) -> None:
        self._respond = respond
        self._script = script
        self._subprotocols = tuple(subprotocols)
        self._clean_close = clean_close
        self.calls: list[ExecCall] = []
        self.requests: list[ApiGet] = []

    async def checkpoint(self) -> None:
        """Yield to the scheduler (and let a cancellation in), whichever runtime runs."""
        await anyio.lowlevel.checkpoint()

    async def _run(self, plan: ApiPlan[object]) -> object:
        while (request := plan.next_event()) is not None:
            await self.checkpoint()
            self.requests.append(request)
            plan.response_received(self._respond(request))
        return plan.result()

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        result = await self._run(DeploymentLookup(namespace, name))
        assert result is None or isinstance(result, Deployment)
        return result

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        result = await self._run(PodListing(namespace, selector))
        assert isinstance(result, tuple)
        return result

    @asynccontextmanager
    async def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AsyncIterator[MemoryExecConnection]:
        await self.checkpoint()
        offered = tuple(subprotocols)
        chosen = choose_subprotocol([p.value for p in offered], self._subprotocols)
        if chosen is None:
            raise exec_upgrade_error(403, b"", tuple(p.value for p in offered))
        call = ExecCall(
            target=target,
            command=tuple(command),
            streams=streams,
            offered=offered,
            subprotocol=chosen,
        )
        self.calls.append(call)
        script = self._script
        messages = script(call) if callable(script) else script
        connection = MemoryExecConnection(self, call, messages, self._clean_close)
        try:
            yield connection
        finally:
            connection.close()
