"""The request checks the service runs before anything reaches a cluster.

Each raises ``ExecError(EXEC_INVALID, …)`` with the seed's message (or, where the seed had no
such check, a message naming the argument and what it must be). ``TargetResolution`` runs
:func:`validate_request` itself; the async layer calls the others on the arguments of
``execute`` and ``open_interactive``. :class:`InvalidRule` names each rule of
:func:`validate_request` and holds its message (the one table the checks and the testing kit read).
"""

from ._request import MAX_CLEANUP_GRACE as MAX_CLEANUP_GRACE
from ._request import validate_cleanup_grace as validate_cleanup_grace
from ._request import validate_flag as validate_flag
from ._request import validate_output_cap as validate_output_cap
from ._request import validate_queue_capacity as validate_queue_capacity
from ._request import validate_request as validate_request
from ._request import validate_request_type as validate_request_type
from ._rules import InvalidRule as InvalidRule
from ._subprotocols import validate_subprotocols as validate_subprotocols

__all__ = [
    "InvalidRule",
    "MAX_CLEANUP_GRACE",
    "validate_cleanup_grace",
    "validate_flag",
    "validate_output_cap",
    "validate_queue_capacity",
    "validate_request",
    "validate_request_type",
    "validate_subprotocols",
]
