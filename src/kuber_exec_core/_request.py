"""What a caller asks for, and the seed's validation of it (``validateInput`` and ``outputCap``).

Every check raises ``ExecError(EXEC_INVALID, <the seed's message>)``, in the seed's order, before
anything is sent to the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from ._errors import ExecError, ExecErrorCode, StreamName
from ._limits import ExecLimits, positive_int

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


def _invalid(message: str) -> ExecError:
    return ExecError(ExecErrorCode.INVALID, message)


def _js_length(value: str) -> int:
    # The seed measures UTF-16 code units (JavaScript's String.length).
    return len(value) + sum(1 for char in value if ord(char) > 0xFFFF)


def _validate_name(
    value: object, kind: str, max_length: int = 63, pattern: re.Pattern[str] = _DNS_LABEL
) -> None:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > max_length
        or pattern.fullmatch(value) is None
    ):
        raise _invalid(
            f"{kind} must be a valid lowercase DNS name of at most {max_length} characters"
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


def validate_request(request: ExecRequest, limits: ExecLimits) -> None:
    """Apply the seed's ``validateInput`` to ``request``.

    Raises:
        ExecError: ``EXEC_INVALID`` with the seed's message for the first rule broken (first of
            all, "request must be an ExecRequest" for anything that is not one).
    """
    workspace = validate_request_type(request).workspace
    if not isinstance(workspace, Workspace):
        raise _invalid("Workspace is required")
    _validate_name(workspace.project, "Workspace project")
    uid = workspace.uid
    if not isinstance(uid, str) or not uid.strip(_JS_WHITESPACE) or _js_length(uid) > 256:
        raise _invalid("Workspace UID must be between 1 and 256 characters")
    _validate_name(request.deployment, "Deployment name", 253, _DNS_SUBDOMAIN)
    if request.container is not None:
        _validate_name(request.container, "Container name")
    command = request.command
    if not isinstance(command, tuple | list) or len(command) == 0:
        raise _invalid("Command is required")
    if len(command) > limits.max_command_arguments:
        raise _invalid(f"Command cannot contain more than {limits.max_command_arguments} arguments")
    command_bytes = 0
    for argument in command:
        if not isinstance(argument, str) or "\0" in argument:
            raise _invalid("Command arguments must be strings without null bytes")
        try:
            size = len(argument.encode("utf-8"))
        except UnicodeEncodeError:
            # Python-only case: a lone surrogate cannot go into a URL; the seed would silently
            # send U+FFFD instead, running a different command than the one asked for.
            raise _invalid("Command arguments must be valid Unicode text") from None
        if size > limits.max_argument_bytes:
            raise _invalid(f"Command argument exceeds {limits.max_argument_bytes} bytes")
        command_bytes += size
    if command_bytes > limits.max_command_bytes:
        raise _invalid(f"Command exceeds {limits.max_command_bytes} bytes")


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
