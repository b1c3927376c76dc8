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

import functools
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from kuber_exec_core import (
    ExecError,
    ExecLimits,
    ExecRequest,
    ExecStreams,
    ResolvedTarget,
    Subprotocol,
)

from ._backend import Backend, ExecConnection, backend_hooks
from ._connection._delegating import DelegatingBlock

__all__ = ["open_exec", "open_retargeted"]

logger = logging.getLogger("kuber_exec")


def open_exec(
    backend: Backend,
    request: ExecRequest,
    limits: ExecLimits,
    target: ResolvedTarget,
    streams: ExecStreams,
    subprotocols: Sequence[Subprotocol],
    retargeted: Callable[[ResolvedTarget], None],
    *,
    command: Sequence[str] | None = None,
) -> AbstractAsyncContextManager[tuple[ResolvedTarget, ExecConnection]]:
    """``backend.exec(target, ...)``; after a refusal the backend's ``retarget`` hook accepts,
    once more on the target it gives (``retargeted`` is told first). Yields the target the
    connection is for, and the connection. ``command``: the argv to run (default the
    request's; the service passes the supervised form).

    Raises (on entry):
        ExecError: the refusal (when not retried, or the retry's own), or what resolving again
            raised (the current answer for ``request``: e.g. ``EXEC_TARGET_NOT_READY``).
    """
    argv = request.command if command is None else command
    return DelegatingBlock(
        functools.partial(
            open_retargeted,
            backend,
            request,
            limits,
            target,
            argv,
            streams,
            subprotocols,
            retargeted,
        )
    )


async def open_retargeted(
    backend: Backend,
    request: ExecRequest,
    limits: ExecLimits,
    target: ResolvedTarget,
    argv: Sequence[str],
    streams: ExecStreams,
    subprotocols: Sequence[Subprotocol],
    retargeted: Callable[[ResolvedTarget], None],
) -> tuple[AbstractAsyncContextManager[Any], tuple[ResolvedTarget, ExecConnection]]:
    """:func:`open_exec`'s entry, for a block that holds the connection itself: the entered
    exec block (its ``__aexit__`` closes the connection), the target and the connection.
    Raises as :func:`open_exec` on entry."""
    # Only a refusal on entry is retried: once the connection has opened, the command may have
    # started.
    block = backend.exec(target, argv, streams, subprotocols)
    try:
        return block, (target, await block.__aenter__())
    except ExecError as error:
        refusal = error
    fresh = await backend_hooks(backend).retarget(request, limits, target, refusal)
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
    block = backend.exec(fresh, argv, streams, subprotocols)
    return block, (fresh, await block.__aenter__())
