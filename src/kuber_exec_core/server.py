"""The server side of the channel protocol, for test servers (the sandbox) and round-trip tests.

It does what apimachinery's ``wsstream`` and the kubelet's remote-command handler do: parse the
exec query, pick the subprotocol the way the API server and the runtime's streaming server do,
decode client messages into events, and write Status bodies.
"""

from ._exec_url import ExecQuery as ExecQuery
from ._exec_url import parse_exec_flag as parse_exec_flag
from ._exec_url import parse_exec_query as parse_exec_query
from ._server import MAX_CLIENT_FRAME_BYTES as MAX_CLIENT_FRAME_BYTES
from ._server import ClientMessage as ClientMessage
from ._server import ResizeReceived as ResizeReceived
from ._server import ServerChannel as ServerChannel
from ._server import StdinClosed as StdinClosed
from ._server import StdinReceived as StdinReceived
from ._status import status_exit_code as status_exit_code
from ._status import status_failure as status_failure
from ._status import status_success as status_success
from ._subprotocols import server_subprotocols as server_subprotocols

__all__ = [
    "MAX_CLIENT_FRAME_BYTES",
    "ClientMessage",
    "ExecQuery",
    "ResizeReceived",
    "ServerChannel",
    "StdinClosed",
    "StdinReceived",
    "parse_exec_flag",
    "parse_exec_query",
    "server_subprotocols",
    "status_exit_code",
    "status_failure",
    "status_success",
]
