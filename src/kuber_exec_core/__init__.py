"""kuber-exec's sans-IO core: every rule of exec, and no I/O.

Validation and limits, target selection over the Kubernetes API's objects, the
``*.channel.k8s.io`` codec (both sides), and the session state machine. Nothing here opens a
socket, reads a clock, starts a thread or imports trio or asyncio: the adapters
(``kuber_exec_trio``, ``kuber_exec_asyncio``) move the bytes and wait.
"""

from ._backend import Backend as Backend
from ._backend import ConnectionEnd as ConnectionEnd
from ._backend import ExecConnection as ExecConnection
from ._channels import MAX_CLIENT_PAYLOAD_BYTES as MAX_CLIENT_PAYLOAD_BYTES
from ._channels import Channel as Channel
from ._channels import Message as Message
from ._channels import decode_message as decode_message
from ._channels import encode_message as encode_message
from ._drivers import collect_execute as collect_execute
from ._drivers import pump_session as pump_session
from ._drivers import resolve_target as resolve_target
from ._drivers import send_quietly as send_quietly
from ._errors import ExecError as ExecError
from ._errors import ExecErrorCode as ExecErrorCode
from ._errors import ExecOutputLimitError as ExecOutputLimitError
from ._errors import ExecProtocolError as ExecProtocolError
from ._errors import StreamName as StreamName
from ._exec_url import ExecQuery as ExecQuery
from ._exec_url import ExecStreams as ExecStreams
from ._exec_url import exec_path as exec_path
from ._exec_url import parse_exec_flag as parse_exec_flag
from ._exec_url import parse_exec_query as parse_exec_query
from ._execute import ExecResult as ExecResult
from ._execute import ExecuteRun as ExecuteRun
from ._execute import OutputBuffer as OutputBuffer
from ._frames import ClientFrame as ClientFrame
from ._frames import Close as Close
from ._frames import Error as Error
from ._frames import Exit as Exit
from ._frames import Resize as Resize
from ._frames import ServerFrame as ServerFrame
from ._frames import Stderr as Stderr
from ._frames import Stdin as Stdin
from ._frames import Stdout as Stdout
from ._frames import TerminalFrame as TerminalFrame
from ._frames import stdin_bytes as stdin_bytes
from ._groups import single_exception as single_exception
from ._kube_api import ApiGet as ApiGet
from ._kube_api import ApiPlan as ApiPlan
from ._kube_api import ApiResponse as ApiResponse
from ._kube_api import DeploymentLookup as DeploymentLookup
from ._kube_api import PodListing as PodListing
from ._kube_api import api_error as api_error
from ._kube_api import exec_upgrade_error as exec_upgrade_error
from ._limits import DEFAULT_INTERACTIVE_QUEUE_CAPACITY as DEFAULT_INTERACTIVE_QUEUE_CAPACITY
from ._limits import DEFAULT_MAX_ARGUMENT_BYTES as DEFAULT_MAX_ARGUMENT_BYTES
from ._limits import DEFAULT_MAX_COMMAND_ARGUMENTS as DEFAULT_MAX_COMMAND_ARGUMENTS
from ._limits import DEFAULT_MAX_COMMAND_BYTES as DEFAULT_MAX_COMMAND_BYTES
from ._limits import DEFAULT_MAX_STDIN_FRAME_BYTES as DEFAULT_MAX_STDIN_FRAME_BYTES
from ._limits import DEFAULT_OUTPUT_CAP_BYTES as DEFAULT_OUTPUT_CAP_BYTES
from ._limits import ExecLimits as ExecLimits
from ._memory import ExecCall as ExecCall
from ._memory import MemoryBackend as MemoryBackend
from ._memory import MemoryExecConnection as MemoryExecConnection
from ._objects import Deployment as Deployment
from ._objects import OwnerReference as OwnerReference
from ._objects import Pod as Pod
from ._objects import PodContainer as PodContainer
from ._objects import PodRecord as PodRecord
from ._objects import ReplicaSet as ReplicaSet
from ._objects import load_json_object as load_json_object
from ._objects import parse_deployment as parse_deployment
from ._objects import parse_pod as parse_pod
from ._objects import parse_pod_list as parse_pod_list
from ._objects import parse_replica_set as parse_replica_set
from ._objects import resolve_pod_owners as resolve_pod_owners
from ._request import ExecRequest as ExecRequest
from ._request import Workspace as Workspace
from ._request import validate_output_cap as validate_output_cap
from ._request import validate_queue_capacity as validate_queue_capacity
from ._request import validate_request as validate_request
from ._resolution import FetchDeployment as FetchDeployment
from ._resolution import FetchPods as FetchPods
from ._resolution import ResolutionStep as ResolutionStep
from ._resolution import TargetResolution as TargetResolution
from ._resolution import TargetResolved as TargetResolved
from ._selection import EXEC_MANAGED_BY_LABEL as EXEC_MANAGED_BY_LABEL
from ._selection import EXEC_MANAGED_BY_VALUE as EXEC_MANAGED_BY_VALUE
from ._selection import EXEC_WORKSPACE_UID_LABEL as EXEC_WORKSPACE_UID_LABEL
from ._selection import check_deployment as check_deployment
from ._selection import choose_pod as choose_pod
from ._selection import rank_pods as rank_pods
from ._selector import LabelSelector as LabelSelector
from ._selector import Requirement as Requirement
from ._selector import SelectorOperator as SelectorOperator
from ._server import MAX_CLIENT_FRAME_BYTES as MAX_CLIENT_FRAME_BYTES
from ._server import ClientMessage as ClientMessage
from ._server import ResizeReceived as ResizeReceived
from ._server import ServerChannel as ServerChannel
from ._server import StdinClosed as StdinClosed
from ._server import StdinReceived as StdinReceived
from ._session import NEED_DATA as NEED_DATA
from ._session import SESSION_ENDED as SESSION_ENDED
from ._session import ExecSession as ExecSession
from ._session import SessionSignal as SessionSignal
from ._session import chunk_stdin as chunk_stdin
from ._state import REFUSALS as REFUSALS
from ._state import TRANSITIONS as TRANSITIONS
from ._state import SessionInput as SessionInput
from ._state import SessionState as SessionState
from ._state import state_diagram as state_diagram
from ._status import parse_status as parse_status
from ._status import status_exit_code as status_exit_code
from ._status import status_failure as status_failure
from ._status import status_success as status_success
from ._subprotocols import ALL_SUBPROTOCOLS as ALL_SUBPROTOCOLS
from ._subprotocols import DEFAULT_SUBPROTOCOLS as DEFAULT_SUBPROTOCOLS
from ._subprotocols import Subprotocol as Subprotocol
from ._subprotocols import accept_subprotocol as accept_subprotocol
from ._subprotocols import choose_subprotocol as choose_subprotocol
from ._subprotocols import parse_subprotocol_header as parse_subprotocol_header
from ._subprotocols import server_subprotocols as server_subprotocols
from ._target import ResolvedTarget as ResolvedTarget

__version__ = "0.1.0"

__all__ = [
    # errors
    "ExecError",
    "ExecErrorCode",
    "ExecOutputLimitError",
    "ExecProtocolError",
    "StreamName",
    # limits and requests
    "DEFAULT_INTERACTIVE_QUEUE_CAPACITY",
    "DEFAULT_MAX_ARGUMENT_BYTES",
    "DEFAULT_MAX_COMMAND_ARGUMENTS",
    "DEFAULT_MAX_COMMAND_BYTES",
    "DEFAULT_MAX_STDIN_FRAME_BYTES",
    "DEFAULT_OUTPUT_CAP_BYTES",
    "ExecLimits",
    "ExecRequest",
    "Workspace",
    "validate_output_cap",
    "validate_queue_capacity",
    "validate_request",
    # targeting
    "EXEC_MANAGED_BY_LABEL",
    "EXEC_MANAGED_BY_VALUE",
    "EXEC_WORKSPACE_UID_LABEL",
    "Deployment",
    "FetchDeployment",
    "FetchPods",
    "LabelSelector",
    "OwnerReference",
    "Pod",
    "PodContainer",
    "PodRecord",
    "ReplicaSet",
    "Requirement",
    "ResolutionStep",
    "ResolvedTarget",
    "SelectorOperator",
    "TargetResolution",
    "TargetResolved",
    "check_deployment",
    "choose_pod",
    "load_json_object",
    "parse_deployment",
    "parse_pod",
    "parse_pod_list",
    "parse_replica_set",
    "rank_pods",
    "resolve_pod_owners",
    # Kubernetes REST plans
    "ApiGet",
    "ApiPlan",
    "ApiResponse",
    "DeploymentLookup",
    "PodListing",
    "api_error",
    "exec_upgrade_error",
    # channel protocol
    "ALL_SUBPROTOCOLS",
    "DEFAULT_SUBPROTOCOLS",
    "MAX_CLIENT_PAYLOAD_BYTES",
    "Channel",
    "ExecStreams",
    "Message",
    "Subprotocol",
    "accept_subprotocol",
    "choose_subprotocol",
    "chunk_stdin",
    "decode_message",
    "encode_message",
    "exec_path",
    "ExecQuery",
    "parse_exec_flag",
    "parse_exec_query",
    "server_subprotocols",
    "MAX_CLIENT_FRAME_BYTES",
    "parse_status",
    "parse_subprotocol_header",
    # frames and sessions
    "NEED_DATA",
    "REFUSALS",
    "SESSION_ENDED",
    "TRANSITIONS",
    "ClientFrame",
    "Close",
    "Error",
    "ExecResult",
    "ExecSession",
    "ExecuteRun",
    "Exit",
    "OutputBuffer",
    "Resize",
    "ServerFrame",
    "SessionInput",
    "SessionSignal",
    "SessionState",
    "state_diagram",
    "Stderr",
    "Stdin",
    "Stdout",
    "TerminalFrame",
    # adapter seam
    "Backend",
    "ConnectionEnd",
    "ExecConnection",
    "single_exception",
    "collect_execute",
    "pump_session",
    "resolve_target",
    "send_quietly",
    # testing without sockets
    "ExecCall",
    "MemoryBackend",
    "MemoryExecConnection",
    "stdin_bytes",
    # server side
    "ClientMessage",
    "ResizeReceived",
    "ServerChannel",
    "StdinClosed",
    "StdinReceived",
    "status_exit_code",
    "status_failure",
    "status_success",
]
