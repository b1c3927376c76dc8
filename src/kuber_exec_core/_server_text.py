"""A server's message in the user's words: the start prologue taken out of a quoted argv.

The container runtime quotes the argv it ran in some messages (Kubernetes 1.20's
``error executing command [ARGV...], exit code 4``: Go's ``%v`` of the argv, its elements joined
by spaces in brackets). A supervised exec runs ``[SHELL, "-c", PROLOGUE, "kuber-exec-<id>",
*ARGV]`` (:meth:`~kuber_exec_core.supervision.Supervision.supervised_command`), so the server
would quote the whole start prologue back at the user; the user asked for ``ARGV`` and sees that.
"""

from __future__ import annotations

import re

from .supervision import _PROLOGUE, CLEANUP_MARKER, SHELL

__all__ = ["without_start_prologue"]

# The quoted argv's head up to the user's first argument: "[", the shell, "-c", the prologue,
# the marker and a session id (16 lowercase hex digits), each followed by one space.
_QUOTED_PROLOGUE = re.compile(
    re.escape(f"[{SHELL} -c {_PROLOGUE} {CLEANUP_MARKER}") + "[0-9a-f]{16} "
)


def without_start_prologue(message: str) -> str:
    """``message`` with every quoted supervised argv ``[SHELL -c PROLOGUE kuber-exec-<id>
    ARGV...]`` shortened to the user's ``[ARGV...]``; the rest of the server's text, and any
    other bracketed text, is kept as it is."""
    if CLEANUP_MARKER not in message:
        return message  # the common case, without the regular expression's search
    return _QUOTED_PROLOGUE.sub("[", message)
