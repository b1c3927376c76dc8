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

import typing as _typing

from .lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
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

# Where each name lives: its module is imported on the name's first use (PEP 562), so that
# ``kuber-exec --help`` or a user of one submodule does not build every class of the core.
_HOMES: dict[str, tuple[str, ...]] = {
    "._errors": ("ExecError", "ExecErrorCode", "ExecOutputLimitError", "StreamName"),
    "._exec_url": ("ExecStreams",),
    "._execute": ("ExecResult", "ExecuteRun"),
    "._frames": (
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
    ),
    "._identity": ("Impersonation",),
    "._limits": ("ExecLimits",),
    "._objects": ("Deployment", "Pod", "PodContainer"),
    "._request": ("ExecRequest", "Workspace"),
    "._resolution": ("FetchDeployment", "FetchPods", "TargetResolution", "TargetResolved"),
    "._selection": ("EXEC_MANAGED_BY_LABEL", "EXEC_MANAGED_BY_VALUE", "EXEC_WORKSPACE_UID_LABEL"),
    "._selector": ("LabelSelector",),
    "._session": ("NEED_DATA", "SESSION_ENDED", "ExecSession"),
    "._subprotocols": ("DEFAULT_SUBPROTOCOLS", "Subprotocol"),
    "._target": ("ResolvedTarget",),
}

if not _typing.TYPE_CHECKING:  # a type checker sees the imports above, not a catch-all
    __getattr__, __dir__ = _lazy_exports(globals(), _HOMES)
