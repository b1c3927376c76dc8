"""The seed's default limits, each with its reason (see :class:`~kuber_exec_core.ExecLimits`), and
the service's session limits with their deadline arithmetic (:class:`SessionLimits`,
:class:`SessionDeadlines`), and the Lease arithmetic of cluster-wide limits: the replicas'
heartbeats and the workspaces' session records (:func:`record_name`, :func:`plan_changes`,
:func:`heartbeat_body`), and the per-session slot Leases of earlier versions
(:func:`slot_names`, :func:`lease_body`, :func:`is_expired`)."""

import typing as _typing

from ._limits import DEFAULT_INTERACTIVE_QUEUE_CAPACITY as DEFAULT_INTERACTIVE_QUEUE_CAPACITY
from ._limits import DEFAULT_MAX_ARGUMENT_BYTES as DEFAULT_MAX_ARGUMENT_BYTES
from ._limits import DEFAULT_MAX_COMMAND_ARGUMENTS as DEFAULT_MAX_COMMAND_ARGUMENTS
from ._limits import DEFAULT_MAX_COMMAND_BYTES as DEFAULT_MAX_COMMAND_BYTES
from ._limits import DEFAULT_MAX_STDIN_FRAME_BYTES as DEFAULT_MAX_STDIN_FRAME_BYTES
from ._limits import DEFAULT_OUTPUT_CAP_BYTES as DEFAULT_OUTPUT_CAP_BYTES
from ._limits import ExecLimits as ExecLimits
from ._session_limits import SessionDeadlines as SessionDeadlines
from ._session_limits import SessionLimits as SessionLimits
from .lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from ._lease_slots import format_micro_time as format_micro_time
    from ._lease_slots import is_expired as is_expired
    from ._lease_slots import lease_body as lease_body
    from ._lease_slots import parse_micro_time as parse_micro_time
    from ._lease_slots import slot_names as slot_names
    from ._lease_slots import transitions_of as transitions_of
    from ._session_record import CHANGED_ANNOTATION as CHANGED_ANNOTATION
    from ._session_record import IDLE_RECORD_SECONDS as IDLE_RECORD_SECONDS
    from ._session_record import MANAGED_BY as MANAGED_BY
    from ._session_record import MAX_RECORD_BYTES as MAX_RECORD_BYTES
    from ._session_record import PROJECT_ANNOTATION as PROJECT_ANNOTATION
    from ._session_record import RECORD_SHARDS as RECORD_SHARDS
    from ._session_record import ROLE_LABEL as ROLE_LABEL
    from ._session_record import SESSIONS_ANNOTATION as SESSIONS_ANNOTATION
    from ._session_record import UID_ANNOTATION as UID_ANNOTATION
    from ._session_record import WRITER_MEMORY_SECONDS as WRITER_MEMORY_SECONDS
    from ._session_record import Add as Add
    from ._session_record import Admission as Admission
    from ._session_record import Change as Change
    from ._session_record import Plan as Plan
    from ._session_record import Remove as Remove
    from ._session_record import SessionEntry as SessionEntry
    from ._session_record import SessionRecord as SessionRecord
    from ._session_record import SetTarget as SetTarget
    from ._session_record import heartbeat_body as heartbeat_body
    from ._session_record import heartbeat_expiries as heartbeat_expiries
    from ._session_record import heartbeat_name as heartbeat_name
    from ._session_record import plan_changes as plan_changes
    from ._session_record import record_body as record_body
    from ._session_record import record_name as record_name
    from ._session_record import shard_of as shard_of

__all__ = [
    "shard_of",
    "RECORD_SHARDS",
    "WRITER_MEMORY_SECONDS",
    "IDLE_RECORD_SECONDS",
    "CHANGED_ANNOTATION",
    "MANAGED_BY",
    "MAX_RECORD_BYTES",
    "PROJECT_ANNOTATION",
    "ROLE_LABEL",
    "SESSIONS_ANNOTATION",
    "UID_ANNOTATION",
    "Add",
    "Admission",
    "Change",
    "Plan",
    "Remove",
    "SessionEntry",
    "SessionRecord",
    "SetTarget",
    "heartbeat_body",
    "heartbeat_name",
    "heartbeat_expiries",
    "plan_changes",
    "record_body",
    "record_name",
    "DEFAULT_INTERACTIVE_QUEUE_CAPACITY",
    "DEFAULT_MAX_ARGUMENT_BYTES",
    "DEFAULT_MAX_COMMAND_ARGUMENTS",
    "DEFAULT_MAX_COMMAND_BYTES",
    "DEFAULT_MAX_STDIN_FRAME_BYTES",
    "DEFAULT_OUTPUT_CAP_BYTES",
    "ExecLimits",
    "SessionDeadlines",
    "SessionLimits",
    "format_micro_time",
    "is_expired",
    "lease_body",
    "parse_micro_time",
    "slot_names",
    "transitions_of",
]

# The Lease arithmetic of cluster-wide limits is imported on a name's first use (PEP 562):
# a service without ``cluster_slots`` (an exec from the command line) does not build its classes.
_HOMES: dict[str, tuple[str, ...]] = {
    "._lease_slots": (
        "format_micro_time",
        "is_expired",
        "lease_body",
        "parse_micro_time",
        "slot_names",
        "transitions_of",
    ),
    "._session_record": (
        "CHANGED_ANNOTATION",
        "IDLE_RECORD_SECONDS",
        "MANAGED_BY",
        "MAX_RECORD_BYTES",
        "PROJECT_ANNOTATION",
        "RECORD_SHARDS",
        "ROLE_LABEL",
        "SESSIONS_ANNOTATION",
        "UID_ANNOTATION",
        "WRITER_MEMORY_SECONDS",
        "Add",
        "Admission",
        "Change",
        "Plan",
        "Remove",
        "SessionEntry",
        "SessionRecord",
        "SetTarget",
        "heartbeat_body",
        "heartbeat_expiries",
        "heartbeat_name",
        "plan_changes",
        "record_body",
        "record_name",
        "shard_of",
    ),
}

if not _typing.TYPE_CHECKING:  # a type checker sees the imports above, not a catch-all
    __getattr__, __dir__ = _lazy_exports(globals(), _HOMES)
