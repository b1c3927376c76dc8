"""``pods/{name}/ephemeralcontainers``: adding debug containers to a pod (docs/protocol.md s. 12).

``GET`` answers the Pod; ``PATCH`` takes a strategic merge patch (``application/strategic-merge-
patch+json``: ``{"spec": {"ephemeralContainers": [...]}}``, merged by name), a JSON merge patch
(the list replaced whole) or a JSON patch (``application/json-patch+json``: ``add`` at
``/spec/ephemeralContainers/-``), and answers the Pod. As on a real API server, in this order:
the feature must be on (``Cluster.ephemeral_containers``; off, a 404 with empty details, as a
1.20 server answers), the pod must exist (404), existing ephemeral containers may be neither
changed nor removed and a new one needs a unique name, an image and an existing
``targetContainerName`` (422 ``Invalid``), then Pod Security (``Cluster.pod_security``) and the
admission webhook (``Cluster.admission``) may refuse it (403). An accepted container waits
(``ContainerCreating``) until the runtime starts it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ._cluster import Cluster, EphemeralContainer, PodObject
from ._render import pod_json
from ._rest import RestResponse, json_response, status_response

__all__ = ["handle_ephemeral"]

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_STRATEGIC = "application/strategic-merge-patch+json"
_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
# Pod Security's baseline allows adding only these capabilities.
_BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)


def _invalid(pod: str, causes: list[tuple[str, str]]) -> RestResponse:
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    return status_response(
        422,
        "Invalid",
        f'Pod "{pod}" is invalid: {text}',
        {
            "name": pod,
            "kind": "Pod",
            "causes": [
                {"field": f, "message": m, "reason": "FieldValueInvalid"} for f, m in causes
            ],
        },
    )


def _desired(pod: PodObject, content_type: str, body: bytes) -> list[dict[str, Any]] | RestResponse:
    try:
        patch = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return status_response(400, "BadRequest", "the patch is not valid JSON")
    current = [dict(c.spec) for c in pod.ephemeral]
    if content_type in (_STRATEGIC, _MERGE):
        spec = patch.get("spec") if isinstance(patch, dict) else None
        listed = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
        if listed is None:
            return current
        if not isinstance(listed, list) or not all(isinstance(c, dict) for c in listed):
            return status_response(400, "BadRequest", "spec.ephemeralContainers must be a list")
        if content_type == _MERGE:
            return [dict(c) for c in listed]
        merged = list(current)  # strategic merge: by name; new names are appended
        for entry in listed:
            index = next(
                (i for i, c in enumerate(merged) if c.get("name") == entry.get("name")), None
            )
            if index is None:
                merged.append(dict(entry))
            else:
                merged[index] = {**merged[index], **entry}
        return merged
    if content_type == _JSON_PATCH:
        if not isinstance(patch, list):
            return status_response(400, "BadRequest", "a JSON patch must be a list of operations")
        result = list(current)
        for op in patch:
            if not isinstance(op, dict):
                return status_response(
                    400, "BadRequest", "a JSON patch operation must be an object"
                )
            if op.get("op") == "test":
                continue
            path = op.get("path")
            if op.get("op") != "add" or path not in (
                "/spec/ephemeralContainers/-",
                f"/spec/ephemeralContainers/{len(result)}",
            ):
                return status_response(
                    422,
                    "Invalid",
                    f"the sandbox applies only add /spec/ephemeralContainers/-, not {op.get('op')} {path}",  # noqa: E501 (the server's message)
                )
            if not isinstance(op.get("value"), dict):
                return status_response(400, "BadRequest", "the added container must be an object")
            result.append(dict(op["value"]))
        return result
    return status_response(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {_JSON_PATCH}, {_MERGE}, {_STRATEGIC}",  # noqa: E501 (the server's message)
    )


def _validate(pod: PodObject, desired: list[dict[str, Any]]) -> RestResponse | None:
    existing = [c.spec for c in pod.ephemeral]
    causes: list[tuple[str, str]] = []
    for index, old in enumerate(existing):
        if index >= len(desired) or desired[index].get("name") != old.get("name"):
            causes.append(
                (
                    "spec.ephemeralContainers",
                    f'Forbidden: existing ephemeral containers "{old.get("name")}" may not be removed',  # noqa: E501 (the server's message)
                )
            )
        elif desired[index] != old:
            causes.append(
                (
                    "spec.ephemeralContainers",
                    f'Forbidden: existing ephemeral containers "{old.get("name")}" may not be changed',  # noqa: E501 (the server's message)
                )
            )
    if causes:
        return _invalid(pod.name, causes)
    taken = {c.name for c in pod.containers} | {c.name for c in pod.ephemeral}
    for index, new in enumerate(desired[len(existing) :], start=len(existing)):
        field = f"spec.ephemeralContainers[{index}]"
        name = new.get("name")
        if not isinstance(name, str) or not name:
            causes.append((f"{field}.name", "Required value"))
        elif not _DNS_LABEL.fullmatch(name) or len(name) > 63:
            causes.append(
                (
                    f"{field}.name",
                    f"Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'",  # noqa: E501 (the server's message)
                )
            )
        elif name in taken:
            causes.append((f"{field}.name", f'Duplicate value: "{name}"'))
        else:
            taken.add(name)
        if not isinstance(new.get("image"), str) or not new.get("image"):
            causes.append((f"{field}.image", "Required value"))
        target = new.get("targetContainerName")
        if target is not None and pod.container(str(target)) is None:
            causes.append((f"{field}.targetContainerName", f'Not found: "{target}"'))
        for forbidden in (
            "ports",
            "resources",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "lifecycle",
        ):
            if new.get(forbidden):
                causes.append(
                    (f"{field}.{forbidden}", "Forbidden: cannot be set for an Ephemeral Container")
                )
    return _invalid(pod.name, causes) if causes else None


def _context(container: Mapping[str, Any]) -> dict[str, Any]:
    context = container.get("securityContext")
    return context if isinstance(context, dict) else {}


def pod_security_violations(level: str, container: Mapping[str, Any]) -> list[str]:
    """What Pod Security level ``level`` finds wrong with ``container`` (empty: admitted)."""
    if level not in ("baseline", "restricted"):
        return []
    name = container.get("name")
    context = _context(container)
    raw = context.get("capabilities")
    capabilities: dict[str, Any] = raw if isinstance(raw, dict) else {}
    added = [str(c) for c in capabilities.get("add") or []]
    found = []
    if context.get("privileged") is True:
        found.append(
            f'privileged (container "{name}" must not set securityContext.privileged=true)'
        )
    extra = [c for c in added if c not in _BASELINE_CAPABILITIES]
    if extra:
        shown = ", ".join(f'"{c}"' for c in extra)
        found.append(
            f'non-default capabilities (container "{name}" must not include {shown} in securityContext.capabilities.add)'  # noqa: E501 (the server's message)
        )
    if level == "restricted":
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(
                f'allowPrivilegeEscalation != false (container "{name}" must set securityContext.allowPrivilegeEscalation=false)'  # noqa: E501 (the server's message)
            )
        if "ALL" not in [str(c) for c in capabilities.get("drop") or []]:
            found.append(
                f'unrestricted capabilities (container "{name}" must set securityContext.capabilities.drop=["ALL"])'  # noqa: E501 (the server's message)
            )
        if context.get("runAsNonRoot") is not True:
            found.append(
                f'runAsNonRoot != true (container "{name}" must set securityContext.runAsNonRoot=true)'  # noqa: E501 (the server's message)
            )
        seccomp = context.get("seccompProfile")
        if not isinstance(seccomp, dict) or seccomp.get("type") not in (
            "RuntimeDefault",
            "Localhost",
        ):
            found.append(
                f'seccompProfile (container "{name}" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'  # noqa: E501 (the server's message)
            )
    return found


def _ephemeral(container: dict[str, Any]) -> EphemeralContainer:
    context = _context(container)
    command = tuple(str(a) for a in (container.get("command") or [])) + tuple(
        str(a) for a in (container.get("args") or [])
    )
    user = context.get("runAsUser")
    env = {
        str(e["name"]): str(e.get("value", ""))
        for e in container.get("env") or []
        if isinstance(e, dict) and "name" in e
    }
    ephemeral = EphemeralContainer(
        name=str(container["name"]),
        image=str(container["image"]),
        command=command,
        stdin=container.get("stdin") is True,
        tty=container.get("tty") is True,
        target=container.get("targetContainerName"),
        user=user if isinstance(user, int) else 0,
        spec=container,
        env=env,
    )
    if context.get("runAsNonRoot") is True and ephemeral.user == 0:
        # The kubelet's check before it creates the container (the image runs as root).
        ephemeral.reason = "CreateContainerConfigError"
        ephemeral.message = "container has runAsNonRoot and image will run as root"
    return ephemeral


def handle_ephemeral(
    cluster: Cluster, method: str, namespace: str, pod_name: str, content_type: str, body: bytes
) -> RestResponse:
    """Answer a request to ``pods/{pod_name}/ephemeralcontainers``."""
    if not cluster.ephemeral_containers:
        return status_response(
            404, "NotFound", "the server could not find the requested resource", {}
        )
    if method not in ("GET", "PATCH", "PUT"):
        return status_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    with cluster.changing(quiet=True):
        pod = cluster.pod(namespace, pod_name)
        if pod is None:
            return status_response(
                404, "NotFound", f'pods "{pod_name}" not found', {"name": pod_name, "kind": "pods"}
            )
        if method == "GET":
            return json_response(pod_json(pod))
        if method == "PUT":
            return status_response(
                405,
                "MethodNotAllowed",
                "the kuber-exec sandbox takes a PATCH of ephemeralcontainers",
            )
        refusal = cluster.faults.take_ephemeral_refusal(namespace, pod_name)
        if refusal is not None:
            return status_response(*refusal)
        desired = _desired(pod, content_type.split(";")[0].strip().lower(), body)
        if isinstance(desired, RestResponse):
            return desired
        refused = _validate(pod, desired)
        if refused is not None:
            return refused
        new = desired[len(pod.ephemeral) :]
        level = cluster.pod_security.get(namespace, "privileged")
        for container in new:
            violations = pod_security_violations(level, container)
            if violations:
                return status_response(
                    403,
                    "Forbidden",
                    f'pods "{pod.name}" is forbidden: violates PodSecurity "{level}:latest": '
                    + ", ".join(violations),
                    {"name": pod.name, "kind": "pods"},
                )
            if cluster.admission is not None and (message := cluster.admission(pod, container)):
                return status_response(
                    403,
                    "Forbidden",
                    f'admission webhook "sandbox.kuber-exec.dev" denied the request: {message}',
                    {"name": pod.name, "kind": "pods"},
                )
        pod.ephemeral.extend(_ephemeral(c) for c in new)
        answer = json_response(pod_json(pod))
    if new:
        cluster.touch()
    return answer
