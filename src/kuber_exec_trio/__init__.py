"""kuber-exec for trio apps: ``ExecService`` over a real Kubernetes API server.

The rules live in ``kuber_exec_core`` and the service in ``kuber_exec_anyio``; this package binds
them to trio for the exec WebSocket: its own transport on ``websockets``' sans-IO protocol, read
in the receiving task. It exports the same names as every other runtime binding.
"""

from kuber_exec_anyio import BINDING_NAMES as _BINDING_NAMES
from kuber_exec_anyio import DEFAULT_COPY_RETRIES as DEFAULT_COPY_RETRIES
from kuber_exec_anyio import AuditEvent as AuditEvent
from kuber_exec_anyio import Backend as Backend
from kuber_exec_anyio import Close as Close
from kuber_exec_anyio import ClusterConfig as ClusterConfig
from kuber_exec_anyio import ClusterSlots as ClusterSlots
from kuber_exec_anyio import CopyError as CopyError
from kuber_exec_anyio import CopyProblem as CopyProblem
from kuber_exec_anyio import CopyProgress as CopyProgress
from kuber_exec_anyio import CopyResult as CopyResult
from kuber_exec_anyio import CopyTarget as CopyTarget
from kuber_exec_anyio import Error as Error
from kuber_exec_anyio import ExecConnection as ExecConnection
from kuber_exec_anyio import ExecError as ExecError
from kuber_exec_anyio import ExecErrorCode as ExecErrorCode
from kuber_exec_anyio import ExecLimits as ExecLimits
from kuber_exec_anyio import ExecOutputLimitError as ExecOutputLimitError
from kuber_exec_anyio import ExecPreflight as ExecPreflight
from kuber_exec_anyio import ExecRequest as ExecRequest
from kuber_exec_anyio import ExecResult as ExecResult
from kuber_exec_anyio import ExecService as ExecService
from kuber_exec_anyio import Exit as Exit
from kuber_exec_anyio import Impersonation as Impersonation
from kuber_exec_anyio import InteractiveSession as InteractiveSession
from kuber_exec_anyio import JsonLinesAuditLog as JsonLinesAuditLog
from kuber_exec_anyio import Recording as Recording
from kuber_exec_anyio import RecordingSink as RecordingSink
from kuber_exec_anyio import Resize as Resize
from kuber_exec_anyio import ResolvedTarget as ResolvedTarget
from kuber_exec_anyio import SessionLimits as SessionLimits
from kuber_exec_anyio import Stderr as Stderr
from kuber_exec_anyio import Stdin as Stdin
from kuber_exec_anyio import Stdout as Stdout
from kuber_exec_anyio import Workspace as Workspace
from kuber_exec_anyio import copy_from_pod as copy_from_pod
from kuber_exec_anyio import copy_to_pod as copy_to_pod
from kuber_exec_anyio import download_stream as download_stream
from kuber_exec_anyio import upload_stream as upload_stream

from ._binding import KubernetesBackend as KubernetesBackend
from ._binding import connect_exec as connect_exec

__all__ = [*_BINDING_NAMES, "KubernetesBackend", "connect_exec"]
