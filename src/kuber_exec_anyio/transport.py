"""For WebSocket transport implementers: the seam under every exec connection.

A runtime binding implements :class:`WebSocketTransport` and a :data:`TransportOpener`, then
gets a complete ``connect_exec`` from :func:`open_exec_connection` and a complete backend by
passing the opener to ``KubernetesBackend(config, transport=...)``. Its package re-exports the
shared names (:mod:`kuber_exec_anyio.binding`) lazily with :func:`lazy_exports`, as
``kuber_exec_trio`` and ``kuber_exec_asyncio`` do.
"""

from kuber_exec_core.lazy import lazy_exports as lazy_exports

from ._connection._connection import DEFAULT_CLOSE_TIMEOUT as DEFAULT_CLOSE_TIMEOUT
from ._connection._connection import DEFAULT_PING_INTERVAL as DEFAULT_PING_INTERVAL
from ._connection._connection import DEFAULT_PONG_TIMEOUT as DEFAULT_PONG_TIMEOUT
from ._connection._connection import ConnectOptions as ConnectOptions
from ._connection._connection import ExecConnector as ExecConnector
from ._connection._connection import WebSocketExecConnection as WebSocketExecConnection
from ._connection._connection import open_exec_connection as open_exec_connection
from ._connection._transport import CLOSE_MESSAGE_TOO_BIG as CLOSE_MESSAGE_TOO_BIG
from ._connection._transport import MAX_SERVER_MESSAGE_BYTES as MAX_SERVER_MESSAGE_BYTES
from ._connection._transport import NoDebugLogger as NoDebugLogger
from ._connection._transport import TransportClosed as TransportClosed
from ._connection._transport import TransportOpener as TransportOpener
from ._connection._transport import TransportOptions as TransportOptions
from ._connection._transport import WebSocketTransport as WebSocketTransport
from ._connection._transport import describe_error as describe_error
from ._connection._transport import message_too_big as message_too_big
from ._groups import single_exception as single_exception

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_PING_INTERVAL",
    "DEFAULT_PONG_TIMEOUT",
    "CLOSE_MESSAGE_TOO_BIG",
    "MAX_SERVER_MESSAGE_BYTES",
    "ConnectOptions",
    "ExecConnector",
    "NoDebugLogger",
    "TransportClosed",
    "TransportOpener",
    "TransportOptions",
    "WebSocketExecConnection",
    "WebSocketTransport",
    "describe_error",
    "lazy_exports",
    "message_too_big",
    "open_exec_connection",
    "single_exception",
]
