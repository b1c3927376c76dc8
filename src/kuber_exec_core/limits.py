"""The seed's default limits, each with its reason (see :class:`~kuber_exec_core.ExecLimits`), and
the service's session limits with their deadline arithmetic (:class:`SessionLimits`,
:class:`SessionDeadlines`), and the Lease arithmetic of cluster-wide session slots
(:func:`slot_names`, :func:`lease_body`, :func:`is_expired`)."""

from ._lease_slots import format_micro_time as format_micro_time
from ._lease_slots import is_expired as is_expired
from ._lease_slots import lease_body as lease_body
from ._lease_slots import parse_micro_time as parse_micro_time
from ._lease_slots import slot_names as slot_names
from ._lease_slots import transitions_of as transitions_of
from ._limits import DEFAULT_INTERACTIVE_QUEUE_CAPACITY as DEFAULT_INTERACTIVE_QUEUE_CAPACITY
from ._limits import DEFAULT_MAX_ARGUMENT_BYTES as DEFAULT_MAX_ARGUMENT_BYTES
from ._limits import DEFAULT_MAX_COMMAND_ARGUMENTS as DEFAULT_MAX_COMMAND_ARGUMENTS
from ._limits import DEFAULT_MAX_COMMAND_BYTES as DEFAULT_MAX_COMMAND_BYTES
from ._limits import DEFAULT_MAX_STDIN_FRAME_BYTES as DEFAULT_MAX_STDIN_FRAME_BYTES
from ._limits import DEFAULT_OUTPUT_CAP_BYTES as DEFAULT_OUTPUT_CAP_BYTES
from ._limits import ExecLimits as ExecLimits
from ._session_limits import SessionDeadlines as SessionDeadlines
from ._session_limits import SessionLimits as SessionLimits

__all__ = [
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
