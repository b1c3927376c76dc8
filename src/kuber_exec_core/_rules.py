"""The wording of every request rule and every targeting refusal, stated once.

:func:`~kuber_exec_core.validation.validate_request` and the targeting checks raise through this
table, and the testing kit derives the answers it expects from it, so a message lives here and
nowhere else. Each entry is a code and a template; the texts are the seed's, to the letter.

Every error raised through the table carries its member (``ExecError.rule``). Tests of code
that uses kuber-exec should assert the code and *which* rule or refusal it was
(:meth:`InvalidRule.of`, :meth:`TargetRefusal.of`), not the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import attrs

from ._errors import ExecError, ExecErrorCode, ExecRule
from ._limits import ExecLimits

__all__ = ["InvalidRule", "NamedTarget", "TargetRefusal"]


class NamedTarget(Protocol):
    """What a refusal's message names: the requested Deployment and container (an
    :class:`~kuber_exec_core.ExecRequest` is one)."""

    @property
    def deployment(self) -> str: ...

    @property
    def container(self) -> str | None: ...


class InvalidRule(ExecRule):
    """A rule of :func:`~kuber_exec_core.validation.validate_request`, in the order checked (the
    seed's ``validateInput``): the first one a request breaks is the ``EXEC_INVALID`` it gets."""

    #: Python only: ``workspace`` is not a :class:`~kuber_exec_core.Workspace`.
    WORKSPACE = "workspace"
    PROJECT = "project"
    WORKSPACE_UID = "workspace-uid"
    DEPLOYMENT = "deployment"
    CONTAINER = "container"
    COMMAND_MISSING = "command-missing"
    ARGUMENT_COUNT = "argument-count"
    ARGUMENT_NUL = "argument-nul"
    #: Python only: a lone surrogate cannot be sent (the seed would send U+FFFD instead).
    ARGUMENT_UNICODE = "argument-unicode"
    ARGUMENT_BYTES = "argument-bytes"
    COMMAND_BYTES = "command-bytes"

    @property
    def code(self) -> ExecErrorCode:
        """Always ``EXEC_INVALID``: nothing was sent to the cluster."""
        return ExecErrorCode.INVALID

    def message(self, limits: ExecLimits) -> str:
        """The message for this rule under ``limits`` (the byte and count rules name them)."""
        return _REQUEST_MESSAGES[self].format_map(attrs.asdict(limits))

    def error(self, limits: ExecLimits) -> ExecError:
        """The :class:`~kuber_exec_core.ExecError` a request breaking this rule gets (its
        ``rule`` is this member)."""
        return ExecError(self.code, self.message(limits), rule=self)

    @classmethod
    def of(cls, error: ExecError, limits: ExecLimits) -> InvalidRule | None:
        """The rule ``error`` reports (its ``rule``), or ``None`` if it reports none.

        ``limits`` is what the error's message was worded under; the rule itself does not
        depend on it."""
        rule = error.rule
        return rule if isinstance(rule, InvalidRule) else None


_REQUEST_MESSAGES: Mapping[InvalidRule, str] = {
    InvalidRule.WORKSPACE: "Workspace is required",
    InvalidRule.PROJECT: (
        "Workspace project must be a valid lowercase DNS name of at most 63 characters"
    ),
    InvalidRule.WORKSPACE_UID: "Workspace UID must be between 1 and 256 characters",
    InvalidRule.DEPLOYMENT: (
        "Deployment name must be a valid lowercase DNS name of at most 253 characters"
    ),
    InvalidRule.CONTAINER: (
        "Container name must be a valid lowercase DNS name of at most 63 characters"
    ),
    InvalidRule.COMMAND_MISSING: "Command is required",
    InvalidRule.ARGUMENT_COUNT: (
        "Command cannot contain more than {max_command_arguments} arguments"
    ),
    InvalidRule.ARGUMENT_NUL: "Command arguments must be strings without null bytes",
    InvalidRule.ARGUMENT_UNICODE: "Command arguments must be valid Unicode text",
    InvalidRule.ARGUMENT_BYTES: "Command argument exceeds {max_argument_bytes} bytes",
    InvalidRule.COMMAND_BYTES: "Command exceeds {max_command_bytes} bytes",
}


class TargetRefusal(ExecRule):
    """Why targeting found no pod for a valid request, in the order checked (the seed's
    ``resolveTarget``; :mod:`kuber_exec_core.kube` has the checks)."""

    #: No Deployment of that name (``EXEC_TARGET_NOT_FOUND``).
    DEPLOYMENT_NOT_FOUND = "deployment-not-found"
    #: The ownership labels are missing or name another workspace (``EXEC_TARGET_FORBIDDEN``).
    NOT_OWNED = "not-owned"
    #: The Deployment has no uid or an empty selector (``EXEC_TARGET_NOT_READY``).
    NO_POD_SELECTOR = "no-pod-selector"
    #: No container was named and the pod template has none (``EXEC_TARGET_NOT_READY``).
    NO_CONTAINER = "no-container"
    #: The named container is not running in any owned running pod (``EXEC_TARGET_NOT_FOUND``).
    CONTAINER_NOT_FOUND = "container-not-found"
    #: No owned, running pod with the container running (``EXEC_TARGET_NOT_READY``).
    NO_RUNNING_POD = "no-running-pod"

    @property
    def code(self) -> ExecErrorCode:
        """The code this refusal is reported with."""
        return _TARGET_REFUSALS[self][0]

    def message(self, request: NamedTarget) -> str:
        """The message for this refusal of ``request`` (it names the Deployment, or for
        :attr:`CONTAINER_NOT_FOUND` the requested container)."""
        return _TARGET_REFUSALS[self][1].format(
            deployment=request.deployment, container=request.container
        )

    def error(self, request: NamedTarget) -> ExecError:
        """The :class:`~kuber_exec_core.ExecError` ``request`` gets for this refusal (its
        ``rule`` is this member)."""
        return ExecError(self.code, self.message(request), rule=self)

    @classmethod
    def of(cls, error: ExecError, request: NamedTarget) -> TargetRefusal | None:
        """The refusal that ``error`` reports (its ``rule``), or ``None`` if it reports none.

        ``request`` is the request the error's message names; the refusal itself does not
        depend on it."""
        rule = error.rule
        return rule if isinstance(rule, TargetRefusal) else None


_TARGET_REFUSALS: Mapping[TargetRefusal, tuple[ExecErrorCode, str]] = {
    TargetRefusal.DEPLOYMENT_NOT_FOUND: (
        ExecErrorCode.TARGET_NOT_FOUND,
        "Deployment {deployment} was not found",
    ),
    TargetRefusal.NOT_OWNED: (
        ExecErrorCode.TARGET_FORBIDDEN,
        "Deployment {deployment} is not owned by this workspace",
    ),
    TargetRefusal.NO_POD_SELECTOR: (
        ExecErrorCode.TARGET_NOT_READY,
        "Deployment {deployment} has no usable pod selector",
    ),
    TargetRefusal.NO_CONTAINER: (
        ExecErrorCode.TARGET_NOT_READY,
        "Deployment {deployment} has no container",
    ),
    TargetRefusal.CONTAINER_NOT_FOUND: (
        ExecErrorCode.TARGET_NOT_FOUND,
        "Container {container} was not found or running in a deployment pod",
    ),
    TargetRefusal.NO_RUNNING_POD: (
        ExecErrorCode.TARGET_NOT_READY,
        "Deployment {deployment} has no running owned pod/container",
    ),
}
