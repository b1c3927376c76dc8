"""What a caller asks for, and the seed's validation of it (``validateInput`` and ``outputCap``).

Every check raises ``ExecError(EXEC_INVALID, <the seed's message>)``, in the seed's order, before
anything is sent to the cluster; the request's rules take their wording from the table in
``_rules`` (:class:`~kuber_exec_core.validation.InvalidRule`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ._errors import ExecError, ExecErrorCode, StreamName
from ._identity import Impersonation
from ._limits import ExecLimits, positive_int
from ._rules import InvalidRule

__all__ = [
    "ExecRequest",
    "Workspace",
    "validate_output_cap",
    "validate_queue_capacity",
    "validate_request",
]

# The seed's DNS_LABEL and DNS_SUBDOMAIN (RFC 1123, lowercase). fullmatch, not `$`: Python's `$`
# also matches before a trailing newline, which would let "web\n" through into a URL.
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)

# The characters JavaScript's String.prototype.trim() removes (WhiteSpace and LineTerminator),
# so that a uid the seed rejects as blank is rejected here too (str.strip() differs on U+FEFF
# and U+001C).
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _command_converter(value: object) -> object:
    # Freeze lists into tuples so requests are hashable; anything else is kept for validation to
    # reject (a str must not be split into characters).
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen(kw_only=True)
class Workspace:
    """The caller's workspace: ``project`` is the namespace, ``uid`` its ownership label value."""

    project: str
    uid: str


@attrs.frozen(kw_only=True)
class ExecRequest:
    """One exec: which workspace, which Deployment, optionally which container, and the argv.

    Construction does not validate (the limits belong to the service); every ``ExecService``
    method validates with :func:`validate_request` first.
    """

    workspace: Workspace
    deployment: str
    command: Sequence[str] = attrs.field(converter=_command_converter)
    container: str | None = None
    #: Act as this user (Kubernetes impersonation) for every request of the exec; ``None``:
    #: the service's own identity. See :class:`~kuber_exec_core.Impersonation`.
    on_behalf_of: Impersonation | None = None


def _invalid(message: str) -> ExecError:
    return ExecError(ExecErrorCode.INVALID, message)


def _js_length(value: str) -> int:
    # The seed measures UTF-16 code units (JavaScript's String.length).
    return len(value) + sum(1 for char in value if ord(char) > 0xFFFF)


def _is_name(value: object, max_length: int = 63, pattern: re.Pattern[str] = _DNS_LABEL) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and len(value) <= max_length
        and pattern.fullmatch(value) is not None
    )


def validate_request_type(request: object) -> ExecRequest:
    """``request`` if it is an :class:`ExecRequest` (not ``None``, a dict, ...).

    Raises:
        ExecError: ``EXEC_INVALID`` "request must be an ExecRequest, not <type>".
    """
    if not isinstance(request, ExecRequest):
        raise _invalid(f"request must be an ExecRequest, not {type(request).__name__}")
    return request


def validate_flag(value: object, name: str) -> bool:
    """``value`` if it is a ``bool``: a flag is never read by truthiness (``"no"`` is not False).

    Raises:
        ExecError: ``EXEC_INVALID`` "<name> must be True or False, not <type>".
    """
    if not isinstance(value, bool):
        raise _invalid(f"{name} must be True or False, not {type(value).__name__}")
    return value


#: The longest cleanup grace period (TERM to KILL) a service accepts, in seconds.
MAX_CLEANUP_GRACE = 60.0


def validate_cleanup_grace(value: object) -> float:
    """``value`` as the cleanup's grace period: a finite number of seconds in
    [0, :data:`MAX_CLEANUP_GRACE`] (not a ``bool``).

    Raises:
        ExecError: ``EXEC_INVALID`` "cleanup_grace must be a number of seconds between 0 and 60".
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_CLEANUP_GRACE  # also refuses NaN
    ):
        raise _invalid(
            f"cleanup_grace must be a number of seconds between 0 and {MAX_CLEANUP_GRACE:g}"
        )
    return float(value)


def validate_request(request: ExecRequest, limits: ExecLimits) -> None:
    """Apply the seed's ``validateInput`` to ``request``.

    Raises:
        ExecError: ``EXEC_INVALID`` with the message of the first
            :class:`~kuber_exec_core.validation.InvalidRule` broken
            (first of all, "request must be an ExecRequest" for anything that is not one).
    """
    workspace = validate_request_type(request).workspace
    if not isinstance(workspace, Workspace):
        raise InvalidRule.WORKSPACE.error(limits)
    if not _is_name(workspace.project):
        raise InvalidRule.PROJECT.error(limits)
    uid = workspace.uid
    if not isinstance(uid, str) or not uid.strip(_JS_WHITESPACE) or _js_length(uid) > 256:
        raise InvalidRule.WORKSPACE_UID.error(limits)
    if not _is_name(request.deployment, 253, _DNS_SUBDOMAIN):
        raise InvalidRule.DEPLOYMENT.error(limits)
    if request.container is not None and not _is_name(request.container):
        raise InvalidRule.CONTAINER.error(limits)
    command = request.command
    if not isinstance(command, tuple | list) or len(command) == 0:
        raise InvalidRule.COMMAND_MISSING.error(limits)
    if len(command) > limits.max_command_arguments:
        raise InvalidRule.ARGUMENT_COUNT.error(limits)
    command_bytes = 0
    for argument in command:
        if not isinstance(argument, str) or "\0" in argument:
            raise InvalidRule.ARGUMENT_NUL.error(limits)
        try:
            size = len(argument.encode("utf-8"))
        except UnicodeEncodeError:
            # Python-only case: a lone surrogate cannot go into a URL; the seed would silently
            # send U+FFFD instead, running a different command than the one asked for.
            raise InvalidRule.ARGUMENT_UNICODE.error(limits) from None
        if size > limits.max_argument_bytes:
            raise InvalidRule.ARGUMENT_BYTES.error(limits)
        command_bytes += size
    if command_bytes > limits.max_command_bytes:
        raise InvalidRule.COMMAND_BYTES.error(limits)
    identity = request.on_behalf_of
    if identity is not None and not isinstance(identity, Impersonation):
        raise _invalid(
            f"on_behalf_of must be an Impersonation or None, not {type(identity).__name__}"
        )


def validate_output_cap(value: int | None, stream: StreamName, limits: ExecLimits) -> int:
    """The seed's ``outputCap``: ``None`` means the default cap; otherwise 1..max, an int.

    Raises:
        ExecError: ``EXEC_INVALID`` ("stdoutCapBytes must be between 1 and N", as the seed says).
    """
    cap = limits.default_output_cap_bytes if value is None else value
    if (
        isinstance(cap, bool)
        or not isinstance(cap, int)
        or cap <= 0
        or cap > limits.max_output_cap_bytes
    ):
        raise _invalid(f"{stream}CapBytes must be between 1 and {limits.max_output_cap_bytes}")
    return cap


def validate_queue_capacity(value: int | None, limits: ExecLimits) -> int:
    """An interactive session's frame queue size: ``None`` means the limits' default.

    Raises:
        ExecError: ``EXEC_INVALID`` "queueCapacity must be a positive integer" (the seed threw a
            plain error here; a caller's bad argument is an invalid request).
    """
    return positive_int(
        limits.interactive_queue_capacity if value is None else value, "queueCapacity"
    )
