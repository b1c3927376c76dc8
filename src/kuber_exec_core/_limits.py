"""The service limits: the seed's seven numbers, each a positive int, validated at construction."""

from __future__ import annotations

import attrs

from ._errors import ExecError, ExecErrorCode

#: Enough for any real argv; a bound keeps the exec URL (one ``command=`` per argument) small.
DEFAULT_MAX_COMMAND_ARGUMENTS = 64
#: Total argv bytes: keeps the upgrade request's URL well under API server header limits.
DEFAULT_MAX_COMMAND_BYTES = 32 * 1024
#: One argument: a script passed with ``sh -c`` fits; a payload should go through stdin.
DEFAULT_MAX_ARGUMENT_BYTES = 8 * 1024
#: Captured output per stream for ``execute``: memory is bounded by caps, never by output size.
DEFAULT_OUTPUT_CAP_BYTES = 1024 * 1024
#: Frames an interactive session buffers before the socket stops being read (backpressure).
DEFAULT_INTERACTIVE_QUEUE_CAPACITY = 128
#: One client stdin frame; it is sent as ≤ 32 KiB channel messages.
DEFAULT_MAX_STDIN_FRAME_BYTES = 64 * 1024


def positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is a positive ``int`` (not ``bool``), else raise ``EXEC_INVALID``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ExecError(ExecErrorCode.INVALID, f"{name} must be a positive integer")
    return value


def _positive(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    positive_int(value, attribute.name)


@attrs.frozen(kw_only=True)
class ExecLimits:
    """The limits an ``ExecService`` enforces; defaults are the seed's.

    Raises:
        ExecError: ``EXEC_INVALID`` when a value is not a positive int, or when
            ``default_output_cap_bytes`` exceeds ``max_output_cap_bytes``.
    """

    max_command_arguments: int = attrs.field(
        default=DEFAULT_MAX_COMMAND_ARGUMENTS, validator=_positive
    )
    max_command_bytes: int = attrs.field(default=DEFAULT_MAX_COMMAND_BYTES, validator=_positive)
    max_argument_bytes: int = attrs.field(default=DEFAULT_MAX_ARGUMENT_BYTES, validator=_positive)
    max_output_cap_bytes: int = attrs.field(default=DEFAULT_OUTPUT_CAP_BYTES, validator=_positive)
    default_output_cap_bytes: int = attrs.field(
        default=DEFAULT_OUTPUT_CAP_BYTES, validator=_positive
    )
    interactive_queue_capacity: int = attrs.field(
        default=DEFAULT_INTERACTIVE_QUEUE_CAPACITY, validator=_positive
    )
    max_stdin_frame_bytes: int = attrs.field(
        default=DEFAULT_MAX_STDIN_FRAME_BYTES, validator=_positive
    )

    def __attrs_post_init__(self) -> None:
        if self.default_output_cap_bytes > self.max_output_cap_bytes:
            raise ExecError(
                ExecErrorCode.INVALID,
                "default_output_cap_bytes cannot exceed max_output_cap_bytes",
            )
