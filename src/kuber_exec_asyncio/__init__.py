"""kuber-exec for asyncio apps: ``ExecService`` over a real Kubernetes API server.

The rules live in ``kuber_exec_core``; this package moves bytes with asyncio, websockets and
httpx. The core's request, frame, result and error types are re-exported here for convenience.
"""

from kuber_exec_core import Backend as Backend
from kuber_exec_core import Close as Close
from kuber_exec_core import Error as Error
from kuber_exec_core import ExecConnection as ExecConnection
from kuber_exec_core import ExecError as ExecError
from kuber_exec_core import ExecErrorCode as ExecErrorCode
from kuber_exec_core import ExecLimits as ExecLimits
from kuber_exec_core import ExecOutputLimitError as ExecOutputLimitError
from kuber_exec_core import ExecRequest as ExecRequest
from kuber_exec_core import ExecResult as ExecResult
from kuber_exec_core import Exit as Exit
from kuber_exec_core import Resize as Resize
from kuber_exec_core import ResolvedTarget as ResolvedTarget
from kuber_exec_core import Stderr as Stderr
from kuber_exec_core import Stdin as Stdin
from kuber_exec_core import Stdout as Stdout
from kuber_exec_core import Workspace as Workspace
from kuber_exec_kube import ClusterConfig as ClusterConfig

from ._kubernetes import KubernetesBackend as KubernetesBackend
from ._service import ExecService as ExecService
from ._session import InteractiveSession as InteractiveSession
from ._websocket import connect_exec as connect_exec

__all__ = [
    # the service
    "Backend",
    "ClusterConfig",
    "ExecConnection",
    "ExecService",
    "InteractiveSession",
    "KubernetesBackend",
    "connect_exec",
    # re-exported from kuber_exec_core
    "Close",
    "Error",
    "ExecError",
    "ExecErrorCode",
    "ExecLimits",
    "ExecOutputLimitError",
    "ExecRequest",
    "ExecResult",
    "Exit",
    "Resize",
    "ResolvedTarget",
    "Stderr",
    "Stdin",
    "Stdout",
    "Workspace",
]
