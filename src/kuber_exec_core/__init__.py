"""kuber-exec's sans-IO core: every rule of exec, and no I/O.

Validation and limits, target selection over the Kubernetes API's objects, the
``*.channel.k8s.io`` codec, and the session state machine. Nothing here opens a socket, reads a
clock, starts a thread or imports trio or asyncio: the async layer (``kuber_exec_anyio``, bound
to a runtime by ``kuber_exec_trio`` and ``kuber_exec_asyncio``) moves the bytes and waits.

Every core object is driven the same way, as in h11: feed it what arrived (a method named after
the fact: ``receive_message``, ``deployment_received``, ``response_received`` …), then call
``next_event()`` until it returns ``NEED_DATA`` (feed more) or its final value.

The top level holds what a user of the sans-IO core needs. More specialised parts live in named
submodules: :mod:`kuber_exec_core.state` (the session's state table), :mod:`.channels` (the wire
codec), :mod:`.kube` (the Kubernetes objects and the REST reads as plans), :mod:`.server` (the
server side of the protocol, for test servers), :mod:`.limits` (the seed's default limits),
:mod:`.validation` (the request checks), :mod:`.watch` (the watch cache), :mod:`.asciicast`
(terminal recordings) and :mod:`.testing` (hypothesis strategies).
"""

from typing import TYPE_CHECKING

from ._errors import ExecError as ExecError
from ._errors import ExecErrorCode as ExecErrorCode
from ._errors import ExecOutputLimitError as ExecOutputLimitError
from ._errors import StreamName as StreamName
from ._exec_url import ExecStreams as ExecStreams
from ._execute import ExecResult as ExecResult
from ._execute import ExecuteRun as ExecuteRun
from ._frames import ClientFrame as ClientFrame
from ._frames import Close as Close
from ._frames import Error as Error
from ._frames import Exit as Exit
from ._frames import Resize as Resize
from ._frames import ServerFrame as ServerFrame
from ._frames import Stderr as Stderr
from ._frames import Stdin as Stdin
from ._frames import Stdout as Stdout
from ._frames import stdin_bytes as stdin_bytes
from ._identity import Impersonation as Impersonation
from ._limits import ExecLimits as ExecLimits
from ._objects import Deployment as Deployment
from ._objects import Pod as Pod
from ._objects import PodContainer as PodContainer
from ._request import ExecRequest as ExecRequest
from ._request import Workspace as Workspace
from ._resolution import FetchDeployment as FetchDeployment
from ._resolution import FetchPods as FetchPods
from ._resolution import TargetResolution as TargetResolution
from ._resolution import TargetResolved as TargetResolved
from ._selection import EXEC_MANAGED_BY_LABEL as EXEC_MANAGED_BY_LABEL
from ._selection import EXEC_MANAGED_BY_VALUE as EXEC_MANAGED_BY_VALUE
from ._selection import EXEC_WORKSPACE_UID_LABEL as EXEC_WORKSPACE_UID_LABEL
from ._selector import LabelSelector as LabelSelector
from ._session import NEED_DATA as NEED_DATA
from ._session import SESSION_ENDED as SESSION_ENDED
from ._session import ExecSession as ExecSession
from ._subprotocols import DEFAULT_SUBPROTOCOLS as DEFAULT_SUBPROTOCOLS
from ._subprotocols import Subprotocol as Subprotocol
from ._target import ResolvedTarget as ResolvedTarget

__version__ = "0.1.0"

# The names that were top-level before the surface was trimmed to what a sans-IO user needs, by
# the submodule each lives in now: they still resolve from here (with a DeprecationWarning naming
# their home) so that existing code keeps working. The list is history, not a lookup: a name that
# was never top-level (``Guard``, or one added to a submodule later) is an AttributeError here.
# Type checkers see only the real surface.
_MOVED: dict[str, tuple[str, ...]] = {
    "limits": (
        "DEFAULT_INTERACTIVE_QUEUE_CAPACITY",
        "DEFAULT_MAX_ARGUMENT_BYTES",
        "DEFAULT_MAX_COMMAND_ARGUMENTS",
        "DEFAULT_MAX_COMMAND_BYTES",
        "DEFAULT_MAX_STDIN_FRAME_BYTES",
        "DEFAULT_OUTPUT_CAP_BYTES",
    ),
    "validation": (
        "validate_flag",
        "validate_output_cap",
        "validate_queue_capacity",
        "validate_request",
        "validate_request_type",
        "validate_subprotocols",
    ),
    "state": (
        "REFUSALS",
        "SessionInput",
        "SessionSignal",
        "SessionState",
        "TRANSITIONS",
        "state_diagram",
    ),
    "channels": (
        "ALL_SUBPROTOCOLS",
        "Channel",
        "ExecProtocolError",
        "MAX_CLIENT_PAYLOAD_BYTES",
        "Message",
        "TerminalFrame",
        "accept_subprotocol",
        "choose_subprotocol",
        "chunk_stdin",
        "decode_message",
        "encode_message",
        "parse_status",
        "parse_subprotocol_header",
    ),
    "kube": (
        "ApiGet",
        "ApiPlan",
        "ApiResponse",
        "DeploymentLookup",
        "OwnerReference",
        "PodListing",
        "PodRecord",
        "ReplicaSet",
        "Requirement",
        "ResolutionStep",
        "SelectorOperator",
        "api_error",
        "check_deployment",
        "choose_pod",
        "exec_path",
        "exec_upgrade_error",
        "load_json_object",
        "parse_deployment",
        "parse_pod",
        "parse_pod_list",
        "parse_replica_set",
        "rank_pods",
        "resolve_pod_owners",
    ),
    "server": (
        "ClientMessage",
        "ExecQuery",
        "MAX_CLIENT_FRAME_BYTES",
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
    ),
}
_HOMES = {name: home for home, names in _MOVED.items() for name in names}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        import importlib
        import warnings

        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'kuber_exec_core' has no attribute {name!r}")
        warnings.warn(
            f"kuber_exec_core.{name} moved to kuber_exec_core.{home}.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"kuber_exec_core.{home}"), name)


__all__ = [
    # errors
    "ExecError",
    "ExecErrorCode",
    "ExecOutputLimitError",
    "StreamName",
    # limits and requests
    "ExecLimits",
    "ExecRequest",
    "Impersonation",
    "Workspace",
    # targeting
    "EXEC_MANAGED_BY_LABEL",
    "EXEC_MANAGED_BY_VALUE",
    "EXEC_WORKSPACE_UID_LABEL",
    "Deployment",
    "FetchDeployment",
    "FetchPods",
    "LabelSelector",
    "Pod",
    "PodContainer",
    "ResolvedTarget",
    "TargetResolution",
    "TargetResolved",
    # frames
    "ClientFrame",
    "Close",
    "Error",
    "Exit",
    "Resize",
    "ServerFrame",
    "Stderr",
    "Stdin",
    "Stdout",
    "stdin_bytes",
    # sessions and subprotocols
    "DEFAULT_SUBPROTOCOLS",
    "NEED_DATA",
    "SESSION_ENDED",
    "ExecResult",
    "ExecSession",
    "ExecStreams",
    "ExecuteRun",
    "Subprotocol",
]
