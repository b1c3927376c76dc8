"""Opening the exec connection, with the one retry a stale cached target may get.

A target resolved from a watch cache may name a pod that has just gone (the cache hears of it a
moment later). The API server then refuses the exec upgrade with 404: the command never started,
so running it on a freshly resolved pod is safe. That decision needs two things only the backend
knows (whether its cache answered, and what its refusal looks like) and one only the service has
(the request, to resolve again with every targeting rule), so the service asks the backend's
optional ``retarget`` hook (``KubernetesBackend.retarget``): a new target to retry on once, or
``None`` (raise the refusal). Nothing is retried once the connection has opened: from then on the
command may have started.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from kuber_exec_core import (
    ExecError,
    ExecLimits,
    ExecRequest,
    ExecStreams,
    ResolvedTarget,
    Subprotocol,
)

from ._backend import Backend, ExecConnection

__all__ = ["Retarget", "open_exec"]

logger = logging.getLogger("kuber_exec")

#: ``KubernetesBackend.retarget``'s shape: (request, limits, refused target, refusal) -> target.
Retarget = Callable[
    [ExecRequest, ExecLimits, ResolvedTarget, ExecError], Awaitable[ResolvedTarget | None]
]


@asynccontextmanager
async def open_exec(
    backend: Backend,
    request: ExecRequest,
    limits: ExecLimits,
    target: ResolvedTarget,
    streams: ExecStreams,
    subprotocols: Sequence[Subprotocol],
    retargeted: Callable[[ResolvedTarget], None],
    *,
    command: Sequence[str] | None = None,
) -> AsyncIterator[tuple[ResolvedTarget, ExecConnection]]:
    """``backend.exec(target, ...)``; after a refusal the backend's ``retarget`` hook accepts,
    once more on the target it gives (``retargeted`` is told first). Yields the target the
    connection is for, and the connection. ``command``: the argv to run (default the
    request's; the service passes the supervised form).

    Raises (on entry):
        ExecError: the refusal (when not retried, or the retry's own), or what resolving again
            raised (the current answer for ``request``: e.g. ``EXEC_TARGET_NOT_READY``).
    """
    argv = request.command if command is None else command
    # Plain nested blocks, not an exit stack (a measurable share of a short exec; issue 19):
    # ``opened`` tells a refusal on entry, the only thing retried, from the caller's errors.
    opened = False
    try:
        async with backend.exec(target, argv, streams, subprotocols) as connection:
            opened = True
            yield target, connection
            return
    except ExecError as error:
        if opened:
            raise
        refusal = error
    retarget: Retarget | None = getattr(backend, "retarget", None)
    fresh = None if retarget is None else await retarget(request, limits, target, refusal)
    if fresh is None:
        raise refusal
    logger.info(
        "exec into %s/%s was refused (%s); retrying once on pod %s",
        target.namespace,
        target.pod,
        refusal.message,
        fresh.pod,
    )
    retargeted(fresh)
    async with backend.exec(fresh, argv, streams, subprotocols) as connection:
        yield fresh, connection
