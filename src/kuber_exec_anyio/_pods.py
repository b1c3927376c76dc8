"""Reading one pod as the API server has it: its object, a container's spec, its version."""

from __future__ import annotations

import json
from typing import Any

from kuber_exec_core import ExecError, ExecErrorCode, ResolvedTarget
from kuber_exec_core.kube import pod_path

from ._backend import backend_hooks

__all__ = ["container_spec_of", "read_pod", "server_version"]


async def read_pod(backend: object, target: ResolvedTarget) -> dict[str, Any]:
    """``target``'s Pod object, checked to be the same pod (its uid) the target resolved to.

    Raises:
        ExecError: ``EXEC_TARGET_NOT_FOUND`` when the pod is gone or was replaced by another of
            the same name; ``EXEC_FAILED`` when it cannot be read.
    """
    answer = await backend_hooks(backend).api_request("GET", pod_path(target.namespace, target.pod))
    if answer.status == 404:
        raise ExecError(
            ExecErrorCode.TARGET_NOT_FOUND,
            f"pod {target.namespace}/{target.pod} is gone (replaced meanwhile?)",
            http_status=404,
        )
    if answer.status != 200:
        raise ExecError(
            ExecErrorCode.FAILED,
            f"reading pod {target.namespace}/{target.pod} failed with HTTP {answer.status}",
            http_status=answer.status,
        )
    try:
        pod = json.loads(answer.body)
    except (ValueError, UnicodeDecodeError):
        raise ExecError(ExecErrorCode.FAILED, "the pod answer is not JSON") from None
    if not isinstance(pod, dict):
        raise ExecError(ExecErrorCode.FAILED, "the pod answer is not a JSON object")
    uid = (pod.get("metadata") or {}).get("uid")
    if uid != target.pod_uid:
        raise ExecError(
            ExecErrorCode.TARGET_NOT_FOUND,
            f"pod {target.namespace}/{target.pod} was replaced meanwhile (another pod of the "
            "same name): nothing was done to it",
        )
    return pod


def container_spec_of(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The spec of container ``name`` among the pod's containers and ephemeral containers."""
    spec = pod.get("spec") or {}
    for key in ("containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict) and container.get("name") == name:
                return container
    return None


async def server_version(backend: object) -> str | None:
    """The API server's ``gitVersion`` stripped to ``major.minor`` (``None`` if unknown)."""
    try:
        answer = await backend_hooks(backend).api_request("GET", "/version")
        version = json.loads(answer.body) if answer.status == 200 else {}
    except (ExecError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(version, dict):
        return None
    major = str(version.get("major") or "").rstrip("+")
    minor = str(version.get("minor") or "").rstrip("+")
    return f"{major}.{minor}" if major and minor else None
