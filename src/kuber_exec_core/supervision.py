"""Ending what an exec left running: the supervised prologue and the cleanup exec.

See :mod:`kuber_exec_core._supervision` for the mechanism and docs/cleanup.md for the contract.
:class:`~kuber_exec_core.ExecSession` takes a :class:`Supervision` to strip the start mark.
"""

from ._supervision import CLEANUP_MARKER as CLEANUP_MARKER
from ._supervision import SESSION_ENVIRONMENT_VARIABLE as SESSION_ENVIRONMENT_VARIABLE
from ._supervision import SHELL as SHELL
from ._supervision import CleanupOutcome as CleanupOutcome
from ._supervision import StartMark as StartMark
from ._supervision import Supervision as Supervision
from ._supervision import is_missing_shell as is_missing_shell
from ._supervision import is_start_failure as is_start_failure
from ._supervision import parse_cleanup_output as parse_cleanup_output

__all__ = [
    "CLEANUP_MARKER",
    "SESSION_ENVIRONMENT_VARIABLE",
    "SHELL",
    "CleanupOutcome",
    "StartMark",
    "Supervision",
    "is_missing_shell",
    "is_start_failure",
    "parse_cleanup_output",
]
