"""What every runtime binding exports, besides its own ``KubernetesBackend`` and
``connect_exec``: the service, the backend seam, copying files, and the core's request, frame
and error types.

A binding re-exports this module whole (``from kuber_exec_anyio.binding import *``), so the
names are listed here once, in ``__all__``: adding one here adds it to ``kuber_exec_trio``,
``kuber_exec_asyncio`` and :data:`kuber_exec_anyio.BINDING_NAMES` together. The module holds
nothing else: every public name it imports is in ``__all__`` (``tests/test_architecture.py``).

The names are lazy (PEP 562): a name's module is imported when the name is first used, so an
app that only execs never imports port-forward, copying, debug containers or shared sessions
(``kuber_exec_core.lazy``). Type checkers read the imports under ``TYPE_CHECKING``; the table
``_HOMES`` says the same for the runtime, and ``tests/test_architecture.py`` keeps them equal.
"""

import typing as _typing

from kuber_exec_core.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
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
    from kuber_exec_core.debug import ContainerRequest as ContainerRequest
    from kuber_exec_core.debug import DebugContainer as DebugContainer
    from kuber_exec_core.debug import DebugPolicy as DebugPolicy
    from kuber_exec_core.debug import DebugProfile as DebugProfile
    from kuber_exec_core.debug import EphemeralStatus as EphemeralStatus
    from kuber_exec_core.debug import LogOptions as LogOptions
    from kuber_exec_core.sharing import Chunk as Chunk
    from kuber_exec_core.sharing import Missed as Missed
    from kuber_exec_core.sharing import Role as Role

    from ._audit._log import JsonLinesAuditLog as JsonLinesAuditLog
    from ._audit._record import AuditEvent as AuditEvent
    from ._audit._recording import Recording as Recording
    from ._audit._recording import RecordingSink as RecordingSink
    from ._backend import Backend as Backend
    from ._backend import ExecConnection as ExecConnection
    from ._copy._common import DEFAULT_COPY_RETRIES as DEFAULT_COPY_RETRIES
    from ._copy._common import CopyProgress as CopyProgress
    from ._copy._common import CopyResult as CopyResult
    from ._copy._common import CopyTarget as CopyTarget
    from ._copy._download import copy_from_pod as copy_from_pod
    from ._copy._download import download_stream as download_stream
    from ._copy._upload import copy_to_pod as copy_to_pod
    from ._copy._upload import upload_stream as upload_stream
    from ._debug._attach import open_attach as open_attach
    from ._debug._debug import DebugSession as DebugSession
    from ._debug._debug import open_debug as open_debug
    from ._debug._logs import LogStream as LogStream
    from ._debug._logs import stream_logs as stream_logs
    from ._kubernetes._config import ClusterConfig as ClusterConfig
    from ._kubernetes._lease_slots import ClusterSlots as ClusterSlots
    from ._kubernetes._preflight import ExecPreflight as ExecPreflight
    from ._limits import SessionLimits as SessionLimits
    from ._portforward._forward import BoundPort as BoundPort
    from ._portforward._forward import PortForward as PortForward
    from ._portforward._forward import PortForwardRecord as PortForwardRecord
    from ._service import ExecService as ExecService
    from ._session import InteractiveSession as InteractiveSession
    from ._shared import SessionHost as SessionHost
    from ._shared import SharedSession as SharedSession
    from ._shared import Viewer as Viewer

#: Where each exported name lives (a leading dot: this package).
_HOMES: dict[str, tuple[str, ...]] = {
    "kuber_exec_core": (
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
    ),
    "kuber_exec_core.copy": ("CopyError", "CopyProblem"),
    "kuber_exec_core.debug": (
        "ContainerRequest",
        "DebugContainer",
        "DebugPolicy",
        "DebugProfile",
        "EphemeralStatus",
        "LogOptions",
    ),
    "kuber_exec_core.sharing": ("Chunk", "Missed", "Role"),
    "._audit._log": ("JsonLinesAuditLog",),
    "._audit._record": ("AuditEvent",),
    "._audit._recording": ("Recording", "RecordingSink"),
    "._backend": ("Backend", "ExecConnection"),
    "._copy._common": ("DEFAULT_COPY_RETRIES", "CopyProgress", "CopyResult", "CopyTarget"),
    "._copy._download": ("copy_from_pod", "download_stream"),
    "._copy._upload": ("copy_to_pod", "upload_stream"),
    "._debug._attach": ("open_attach",),
    "._debug._debug": ("DebugSession", "open_debug"),
    "._debug._logs": ("LogStream", "stream_logs"),
    "._kubernetes._config": ("ClusterConfig",),
    "._kubernetes._lease_slots": ("ClusterSlots",),
    "._kubernetes._preflight": ("ExecPreflight",),
    "._limits": ("SessionLimits",),
    "._portforward._forward": ("BoundPort", "PortForward", "PortForwardRecord"),
    "._service": ("ExecService",),
    "._session": ("InteractiveSession",),
    "._shared": ("SessionHost", "SharedSession", "Viewer"),
}

__all__ = [
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
    # shared sessions
    "Chunk",
    "Missed",
    "Role",
    "SessionHost",
    "SharedSession",
    "Viewer",
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
    # attach, logs and debug containers
    "ContainerRequest",
    "DebugContainer",
    "DebugPolicy",
    "DebugProfile",
    "DebugSession",
    "EphemeralStatus",
    "LogOptions",
    "LogStream",
    "open_attach",
    "open_debug",
    "stream_logs",
    # port-forward
    "BoundPort",
    "PortForward",
    "PortForwardRecord",
    # the core's request, frame and error types
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
]

if not _typing.TYPE_CHECKING:  # a type checker sees the imports above, not a catch-all
    __getattr__, __dir__ = _lazy_exports(globals(), _HOMES)
