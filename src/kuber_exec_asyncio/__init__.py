"""kuber-exec for asyncio apps: ``ExecService`` over a real Kubernetes API server.

The rules live in ``kuber_exec_core`` and the service in ``kuber_exec_anyio``; this package binds
them to the websockets library for the exec
WebSocket. It exports the same names as every other runtime binding.
"""

import typing as _typing

from kuber_exec_anyio import BINDING_NAMES as _BINDING_NAMES
from kuber_exec_anyio.transport import lazy_exports as _lazy_exports

from ._binding import KubernetesBackend as KubernetesBackend
from ._binding import connect_exec as connect_exec

if _typing.TYPE_CHECKING:
    from kuber_exec_anyio.binding import *  # noqa: F403

__all__ = [*_BINDING_NAMES, "KubernetesBackend", "connect_exec"]

# The shared names are imported on first use (kuber_exec_anyio.binding says why). A type checker
# sees the star import above, not a catch-all __getattr__.
if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(globals(), {"kuber_exec_anyio.binding": _BINDING_NAMES})
