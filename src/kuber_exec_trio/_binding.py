"""The trio binding: the shared backend and ``connect_exec`` over its own trio transport."""

from __future__ import annotations

from kuber_exec_anyio import KubernetesBackend as _KubernetesBackend
from kuber_exec_anyio.transport import ExecConnector

from ._transport import open_trio_transport

__all__ = ["KubernetesBackend", "connect_exec"]


class KubernetesBackend(_KubernetesBackend):
    """:class:`kuber_exec_anyio.KubernetesBackend` over the trio WebSocket transport."""

    default_transport = open_trio_transport


#: Open one exec WebSocket (an API server's or a container runtime's streaming URL).
connect_exec = ExecConnector(open_trio_transport)
