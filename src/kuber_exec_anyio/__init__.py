"""kuber-exec's async layer: the service, sessions and backends, written once on anyio.

``ExecService``, ``InteractiveSession``, ``KubernetesBackend`` (kubeconfig loading and REST
over HTTP/1.1 on h11) and the exec connection logic run unchanged under trio and asyncio. The
one part that differs per runtime, the WebSocket library under the exec connection, is a
:data:`~kuber_exec_anyio.transport.TransportOpener`; ``kuber_exec_trio`` and
``kuber_exec_asyncio`` bind one and export the same names. Use those packages in an app; use
this one directly to plug in another WebSocket library (:mod:`kuber_exec_anyio.transport`).
"""

import typing as _typing

from kuber_exec_core.lazy import lazy_exports as _lazy_exports

# The names every binding exports are listed once, in ``binding``; this package exports them too,
# as lazily as ``binding`` does (importing the package imports none of their modules).
from . import binding as _binding
from ._backend import BackendHooks as BackendHooks
from ._cleanup import CleanupStatus as CleanupStatus
from ._kubernetes._backend import KubernetesBackend as KubernetesBackend

if _typing.TYPE_CHECKING:
    from .binding import *  # noqa: F403

#: What every runtime binding exports, besides its own ``KubernetesBackend`` and
#: ``connect_exec``: :mod:`kuber_exec_anyio.binding`'s names, in its order.
BINDING_NAMES: tuple[str, ...] = tuple(_binding.__all__)

__all__ = ["BINDING_NAMES", "BackendHooks", "CleanupStatus", "KubernetesBackend", *BINDING_NAMES]

if (
    not _typing.TYPE_CHECKING
):  # a type checker sees the star import above, not a catch-all __getattr__
    __getattr__, __dir__ = _lazy_exports(globals(), {".binding": BINDING_NAMES})
