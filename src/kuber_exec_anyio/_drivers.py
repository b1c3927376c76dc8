"""Runtime-neutral drivers: coroutines that only await the backend seam's protocols.

They start no tasks and touch no socket themselves: every await is on a ``Backend`` or
``ExecConnection`` method or on a callback (and one anyio deadline, :data:`STATUS_END_TIMEOUT`),
so the same code runs under trio and asyncio. Keeping them here is what lets the two adapters
differ only in runtime idioms.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio

from kuber_exec_core import (
    NEED_DATA,
    SESSION_ENDED,
    Deployment,
    ExecError,
    ExecLimits,
    ExecRequest,
    ExecResult,
    ExecSession,
    ExecuteRun,
    FetchDeployment,
    FetchPods,
    LabelSelector,
    Pod,
    ResolvedTarget,
    ServerFrame,
    TargetResolution,
    TargetResolved,
)
from kuber_exec_core.channels import Message

from ._backend import ExecConnection, backend_hooks

__all__ = [
    "STATUS_END_TIMEOUT",
    "await_start",
    "collect_execute",
    "pump_session",
    "resolve_target",
    "send_quietly",
]

#: Once part of a status has arrived (pre-v4 failure text, which ends only with the connection,
#: or the start of a v4/v5 Status split over messages), how long to wait for the rest before
#: ending the run with what arrived. A whole v4/v5 Status ends the run at once.
STATUS_END_TIMEOUT = 2.0


class TargetReader(Protocol):
    """The reads resolution needs: a :class:`Backend`, or the REST client alone (to resolve
    again over REST when a cached answer was stale)."""

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None: ...

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]: ...


async def resolve_target(
    backend: TargetReader, request: ExecRequest, limits: ExecLimits, *, avoid: str | None = None
) -> ResolvedTarget:
    """Run a :class:`TargetResolution` against ``backend``'s reads (``avoid``: a pod to rank
    last). A backend whose hooks resolve from a cache (``BackendHooks.resolve_cached``:
    ``KubernetesBackend`` with a watch cache) answers a plain resolution in one step when it
    can.

    Raises:
        ExecError: the seed's validation and targeting errors, or the backend's.
    """
    if avoid is None:
        target: ResolvedTarget | None = backend_hooks(backend).resolve_cached(request, limits)
        if target is not None:
            return target
    plan = TargetResolution(request, limits, avoid=avoid)
    while True:
        match plan.next_event():
            case FetchDeployment(namespace=namespace, name=name):
                plan.deployment_received(await backend.get_deployment(namespace, name))
            case FetchPods(namespace=namespace, selector=selector):
                plan.pods_received(await backend.list_pods(namespace, selector))
            case TargetResolved(target=target):
                return target


async def _feed(session: ExecSession, connection: ExecConnection) -> None:
    message: Message | None = None
    if session.status_pending:
        # A server that sent its status and never closes must not hold the run open.
        with anyio.move_on_after(STATUS_END_TIMEOUT) as deadline:
            message = await connection.receive_message()
        if deadline.cancelled_caught:
            session.connection_closed(
                clean=False,
                reason=f"the exec status did not end within {STATUS_END_TIMEOUT:g} s",
            )
            return
    else:
        message = await connection.receive_message()
    if message is None:
        session.connection_closed(clean=connection.closed_cleanly, reason=connection.close_reason)
    else:
        session.receive_message(message)


async def collect_execute(run: ExecuteRun, connection: ExecConnection) -> ExecResult:
    """Feed ``run`` from ``connection`` until it has a result.

    Raises:
        ExecOutputLimitError, ExecError: as :meth:`ExecuteRun.next_event`.
    """
    while (outcome := run.next_event()) is NEED_DATA:
        await _feed(run.session, connection)
    assert isinstance(outcome, ExecResult)
    return outcome


async def await_start(session: ExecSession, connection: ExecConnection) -> list[ServerFrame]:
    """Read until a supervised session's start mark is read or it has ended, or its first frame
    arrives (output before the mark ends the wait: it is not held back). Returns the frames
    pulled on the way, for the consumer to get first (at most one, and the terminal frame)."""
    frames: list[ServerFrame] = []
    while session.awaiting_start_mark and not frames:
        event = session.next_event()
        if event is NEED_DATA:
            # Decoding the last message may have read the mark: then nothing more is awaited.
            if session.awaiting_start_mark:
                await _feed(session, connection)
        elif event is not SESSION_ENDED:
            frames.append(event)
    return frames


async def send_quietly(connection: ExecConnection, messages: Sequence[Message]) -> None:
    """Send ``messages``; stop silently if the connection is gone.

    For ``execute``'s stdin: a process that exits without reading all of it closes the
    connection, and the status (not the failed send) says how the run ended.
    """
    try:
        for message in messages:
            await connection.send_message(message)
    except ExecError:
        return


async def pump_session(
    session: ExecSession,
    connection: ExecConnection,
    deliver: Callable[[ServerFrame], Awaitable[bool]],
) -> None:
    """The interactive reader loop: next event; if it needs data, await a message and feed it.

    ``deliver`` hands a frame to the consumer (blocking while its bounded queue is full, which is
    the backpressure) and returns ``False`` when the consumer is gone. Returns after the
    terminal frame, a client close, or a gone consumer.
    """
    while True:
        event = session.next_event()
        if event is NEED_DATA:
            await _feed(session, connection)
        elif event is SESSION_ENDED or not await deliver(event):
            return
