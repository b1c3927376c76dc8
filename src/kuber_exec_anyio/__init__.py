"""kuber-exec's async layer: the service, sessions and backends, written once on anyio.

``ExecService``, ``InteractiveSession``, ``KubernetesBackend`` (kubeconfig loading and REST over
httpx) and the exec connection logic run unchanged under trio and asyncio. The one part that
differs per runtime, the WebSocket library under the exec connection, is a
:data:`~kuber_exec_anyio.transport.TransportOpener`; ``kuber_exec_trio`` and
``kuber_exec_asyncio`` bind one and export the same names. Use those packages in an app; use
this one directly to plug in another WebSocket library (:mod:`kuber_exec_anyio.transport`).
"""

from kuber_exec_core import Close as Close
from kuber_exec_core import Error as Error
from kuber_exec_core import ExecError as ExecError
from kuber_exec_core import ExecErrorCode as ExecErrorCode
from kuber_exec_core import ExecLimits as ExecLimits
from kuber_exec_core import ExecOutputLimitError as ExecOutputLimitError
from kuber_exec_core import ExecRequest as ExecRequest
from kuber_exec_core import ExecResult as ExecResult
from kuber_exec_core import Exit as Exit
from kuber_exec_core import Impersonation as Impersonation
from kuber_exec_core import Resize as Resize
from kuber_exec_core import ResolvedTarget as ResolvedTarget
from kuber_exec_core import Stderr as Stderr
from kuber_exec_core import Stdin as Stdin
from kuber_exec_core import Stdout as Stdout
from kuber_exec_core import Workspace as Workspace
from kuber_exec_core.copy import CopyError as CopyError
from kuber_exec_core.copy import CopyProblem as CopyProblem

from ._audit._log import JsonLinesAuditLog as JsonLinesAuditLog
from ._audit._record import AuditEvent as AuditEvent
from ._audit._recording import Recording as Recording
from ._audit._recording import RecordingSink as RecordingSink
from ._backend import Backend as Backend
from ._backend import BackendHooks as BackendHooks
from ._backend import ExecConnection as ExecConnection
from ._cleanup import CleanupStatus as CleanupStatus
from ._copy._common import DEFAULT_COPY_RETRIES as DEFAULT_COPY_RETRIES
from ._copy._common import CopyProgress as CopyProgress
from ._copy._common import CopyResult as CopyResult
from ._copy._common import CopyTarget as CopyTarget
from ._copy._download import copy_from_pod as copy_from_pod
from ._copy._download import download_stream as download_stream
from ._copy._upload import copy_to_pod as copy_to_pod
from ._copy._upload import upload_stream as upload_stream
from ._kubernetes._backend import KubernetesBackend as KubernetesBackend
from ._kubernetes._config import ClusterConfig as ClusterConfig
from ._kubernetes._lease_slots import ClusterSlots as ClusterSlots
from ._kubernetes._preflight import ExecPreflight as ExecPreflight
from ._limits import SessionLimits as SessionLimits
from ._service import ExecService as ExecService
from ._session import InteractiveSession as InteractiveSession

#: What every runtime binding exports, besides its own ``KubernetesBackend`` and
#: ``connect_exec``: the service, the seam, and the core's request, frame and error types.
BINDING_NAMES: tuple[str, ...] = (
    # the service
    "AuditEvent",
    "Backend",
    "ClusterConfig",
    "ClusterSlots",
    "ExecConnection",
    "ExecPreflight",
    "ExecService",
    "InteractiveSession",
    "JsonLinesAuditLog",
    "Recording",
    "RecordingSink",
    "SessionLimits",
    # copying files
    "CopyError",
    "CopyProblem",
    "CopyProgress",
    "CopyResult",
    "CopyTarget",
    "DEFAULT_COPY_RETRIES",
    "copy_from_pod",
    "copy_to_pod",
    "download_stream",
    "upload_stream",
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
    "Impersonation",
    "Resize",
    "ResolvedTarget",
    "Stderr",
    "Stdin",
    "Stdout",
    "Workspace",
)

__all__ = ["BINDING_NAMES", "BackendHooks", "CleanupStatus", "KubernetesBackend", *BINDING_NAMES]
