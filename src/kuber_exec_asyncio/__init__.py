"""kuber-exec for asyncio apps: ``ExecService`` over a real Kubernetes API server.

The rules live in ``kuber_exec_core`` and the service in ``kuber_exec_anyio``; this package binds
them to the websockets library for the exec
WebSocket. It exports the same names as every other runtime binding.
"""

from kuber_exec_anyio import BINDING_NAMES as _BINDING_NAMES
from kuber_exec_anyio.binding import *  # noqa: F403

from ._binding import KubernetesBackend as KubernetesBackend
from ._binding import connect_exec as connect_exec

__all__ = [*_BINDING_NAMES, "KubernetesBackend", "connect_exec"]
