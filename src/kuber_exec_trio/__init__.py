"""kuber-exec for trio apps: ``ExecService`` over a real Kubernetes API server.

The rules live in ``kuber_exec_core`` and the service in ``kuber_exec_anyio``; this package binds
them to trio for the exec WebSocket: its own transport on ``websockets``' sans-IO protocol, read
in the receiving task. It exports the same names as every other runtime binding.
"""

import typing as _typing

from kuber_exec_anyio import BINDING_NAMES as _BINDING_NAMES
from kuber_exec_anyio import binding as _shared

from ._binding import KubernetesBackend as KubernetesBackend
from ._binding import connect_exec as connect_exec

if _typing.TYPE_CHECKING:
    from kuber_exec_anyio.binding import *  # noqa: F403

__all__ = [*_BINDING_NAMES, "KubernetesBackend", "connect_exec"]

if not _typing.TYPE_CHECKING:  # a type checker sees the star import, not a catch-all

    def __getattr__(name: str) -> object:
        # The shared names are imported on first use (kuber_exec_anyio.binding says why),
        # then kept here: later uses are plain global lookups.
        if name not in _BINDING_NAMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = globals()[name] = getattr(_shared, name)
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_BINDING_NAMES})
