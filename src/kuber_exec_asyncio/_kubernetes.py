"""``KubernetesBackend``: the backend that talks to a real API server, on asyncio.

REST reads and configuration are runtime-neutral (``kuber_exec_kube``); the exec WebSocket is
this adapter's ``connect_exec`` over the ``websockets`` library's asyncio client.
"""

from __future__ import annotations

from kuber_exec_kube import KubernetesBackendBase

from ._connection import AsyncioWebSocketExecConnection
from ._websocket import connect_exec

__all__ = ["KubernetesBackend"]


class KubernetesBackend(KubernetesBackendBase[AsyncioWebSocketExecConnection]):
    """A :class:`~kuber_exec_asyncio.Backend` for a real API server.

    Use it as an async context manager (it owns a pooled HTTP client)::

        async with KubernetesBackend.from_kubeconfig() as backend:
            service = ExecService(backend)

    Args:
        config: where the API server is and how to authenticate (a ``ClusterConfig``).
        request_timeout: seconds for each REST read and for the WebSocket connect.
        ping_interval, pong_timeout: keepalive; ``ping_interval=None`` disables it.
    """

    _connect_exec = staticmethod(connect_exec)
