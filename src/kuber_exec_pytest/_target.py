"""``KuberTarget``: a workspace's Deployment, what a test execs into (sandbox or real cluster)."""

from __future__ import annotations

import re

import attrs

from kuber_exec_core import ExecRequest, Workspace

__all__ = ["KuberTarget", "parse_target"]

_TARGET = re.compile(r"([^/\s]+)/([^/\s]+)/([^/\s]+)")


@attrs.frozen
class KuberTarget:
    """A workspace and one of its Deployments (and optionally a container).

    Attributes:
        workspace: the ``Workspace`` (``project`` is the namespace, ``uid`` the ownership label).
        deployment: the Deployment's name.
        container: the container to exec into (``None``: the Deployment's first).
    """

    workspace: Workspace
    deployment: str
    container: str | None = None

    def request(self, *command: str, container: str | None = None) -> ExecRequest:
        """The ``ExecRequest`` that runs ``command`` (argv) here, e.g. ``request("echo", "hi")``."""
        return ExecRequest(
            workspace=self.workspace,
            deployment=self.deployment,
            command=list(command),
            container=container if container is not None else self.container,
        )


def parse_target(text: str) -> KuberTarget:
    """``NAMESPACE/DEPLOYMENT/WORKSPACE_UID`` (the ``--kuber-target`` option) as a target.

    Raises:
        ValueError: the text has not exactly three non-empty parts.
    """
    match = _TARGET.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"--kuber-target must be NAMESPACE/DEPLOYMENT/WORKSPACE_UID, not {text.strip()!r}"
        )
    namespace, deployment, uid = match.groups()
    return KuberTarget(Workspace(project=namespace, uid=uid), deployment)
