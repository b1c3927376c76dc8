"""The one exception family of kuber-exec, with the seed's machine-readable codes."""

from __future__ import annotations

import enum
from typing import Literal

__all__ = [
    "ExecError",
    "ExecErrorCode",
    "ExecOutputLimitError",
    "ExecProtocolError",
    "ExecRule",
    "StreamName",
]

StreamName = Literal["stdout", "stderr"]


class ExecErrorCode(enum.StrEnum):
    """Why an exec failed; the values are the seed's ``ExecErrorCode`` strings."""

    #: The request (or a client frame) broke a validation rule; nothing was sent to the cluster.
    INVALID = "EXEC_INVALID"
    #: The Deployment, or the explicitly requested container, does not exist.
    TARGET_NOT_FOUND = "EXEC_TARGET_NOT_FOUND"
    #: The Deployment exists but is not owned by the requesting workspace.
    TARGET_FORBIDDEN = "EXEC_TARGET_FORBIDDEN"
    #: The Deployment has no usable selector, container or running owned pod.
    TARGET_NOT_READY = "EXEC_TARGET_NOT_READY"
    #: ``execute`` captured more than a stream's cap.
    OUTPUT_LIMIT = "EXEC_OUTPUT_LIMIT"
    #: The exec was cancelled, or a closed session was used.
    ABORTED = "EXEC_ABORTED"
    #: The cluster, the transport or the remote runtime failed.
    FAILED = "EXEC_FAILED"


class ExecRule(enum.Enum):
    """The base of the rules an :class:`ExecError` can report: the request rules
    (:class:`~kuber_exec_core.validation.InvalidRule`) and the targeting refusals
    (:class:`~kuber_exec_core.kube.TargetRefusal`). It has no members of its own; it lives here
    so that an error can carry its rule without this module importing the rules' table."""


class ExecError(Exception):
    """The root of every error kuber-exec raises on purpose.

    ``code`` is machine-readable (an :class:`ExecErrorCode`); ``message`` is safe to show to the
    workspace's user: it never contains credentials. Decide on the structured fields, never on the
    message's wording:

    - ``http_status``: the HTTP status of the answer this error reports, when the API server
      refused an exec upgrade or answered a REST read (a LIST, a GET, a WATCH) with a non-2xx
      status; ``None`` for every other error.
    - ``status_reason`` and ``status_code``: the ``reason`` (``NotFound``, ``Forbidden``,
      ``Unauthorized``...) and ``code`` of the Kubernetes ``Status`` object the server sent with
      that answer, or in a watch's ``ERROR`` event; ``None`` when it sent none (or left the field
      out).
    - ``rule``: the request rule or targeting refusal this error reports (an
      :class:`~kuber_exec_core.validation.InvalidRule` or
      :class:`~kuber_exec_core.kube.TargetRefusal`), set where it is raised; ``None`` for every
      other error. ``InvalidRule.of`` and ``TargetRefusal.of`` read it.
    """

    code: ExecErrorCode
    message: str
    http_status: int | None = None
    status_reason: str | None = None
    status_code: int | None = None
    rule: ExecRule | None = None

    def __init__(
        self,
        code: ExecErrorCode,
        message: str,
        *,
        http_status: int | None = None,
        status_reason: str | None = None,
        status_code: int | None = None,
        rule: ExecRule | None = None,
    ) -> None:
        super().__init__(message)
        self.code = ExecErrorCode(code)
        self.message = message
        self.http_status = http_status
        self.status_reason = status_reason
        self.status_code = status_code
        self.rule = rule

    def __str__(self) -> str:
        return f"{self.code.value}: {self.message}"

    def __repr__(self) -> str:
        fields = "".join(
            f", {name}={value!r}"
            for name in ("http_status", "status_reason", "status_code")
            if (value := getattr(self, name)) is not None
        )
        if self.rule is not None:
            fields += f", rule={type(self.rule).__name__}.{self.rule.name}"
        return f"{type(self).__name__}({self.code.value!r}, {self.message!r}{fields})"

    def __reduce__(self) -> tuple[object, ...]:
        # The structured fields live in __dict__ (as do a subclass's own): the state keeps them.
        return (_rebuild, (type(self), self.code, self.message, self.__dict__))


def _rebuild(
    cls: type[ExecError], code: ExecErrorCode, message: str, state: dict[str, object]
) -> ExecError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    error.code = code
    error.message = message
    return error


class ExecOutputLimitError(ExecError):
    """``execute`` received more than ``limit_bytes`` on ``stream`` (the seed's message)."""

    stream: StreamName
    limit_bytes: int

    def __init__(self, stream: StreamName, limit_bytes: int) -> None:
        super().__init__(
            ExecErrorCode.OUTPUT_LIMIT, f"{stream} exceeded the {limit_bytes} byte output limit"
        )
        self.stream = stream
        self.limit_bytes = limit_bytes


class ExecProtocolError(ExecError):
    """The peer broke the ``*.channel.k8s.io`` protocol; always ``EXEC_FAILED``."""

    def __init__(self, message: str) -> None:
        super().__init__(ExecErrorCode.FAILED, f"Kubernetes exec protocol error: {message}")
