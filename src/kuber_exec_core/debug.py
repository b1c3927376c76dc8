"""Attach, logs and ephemeral debug containers, sans-IO (docs/protocol.md section 12).

The paths (:func:`attach_path`, :func:`log_path`), the log options (:class:`LogOptions`), the
debug container a request asks for (:class:`DebugContainer`, its :class:`DebugProfile`'s
security context as ``kubectl debug --profile`` sets it, the strategic merge and JSON patch
bodies), the platform's :class:`DebugPolicy`, and how an answer or a pod status reads
(:func:`ephemeral_status`, :func:`patch_error`). The async layer only moves bytes.
"""

from __future__ import annotations

import enum
import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._errors import ExecError, ExecErrorCode
from ._exec_url import attach_path as attach_path
from ._exec_url import pod_path as pod_path
from ._identity import Impersonation
from ._kube_api import PODS
from ._quoting import quote_value
from ._request import ExecRequest, Workspace

__all__ = [
    "ContainerRequest",
    "DebugContainer",
    "DebugPolicy",
    "DebugProfile",
    "EphemeralStatus",
    "LogOptions",
    "attach_path",
    "container_spec",
    "ephemeral_status",
    "generated_name",
    "json_patch",
    "log_path",
    "patch_error",
    "ephemeral_path",
    "pod_path",
    "pod_watch_path",
    "strategic_patch",
]

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
# What kubectl's generated names look like: "debugger-" and five characters of this alphabet.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def _invalid(message: str) -> ExecError:
    return ExecError(ExecErrorCode.INVALID, message)


@attrs.frozen(kw_only=True)
class ContainerRequest:
    """Which container an attach, a log read or a debug session is for: the workspace, its
    Deployment, optionally the container, and whom to act as. Targeted and checked exactly as
    an :class:`~kuber_exec_core.ExecRequest` (ownership, readiness, the container rules)."""

    workspace: Workspace
    deployment: str
    container: str | None = None
    on_behalf_of: Impersonation | None = None

    def as_exec_request(self, command: Sequence[str]) -> ExecRequest:
        """The same target as an exec request running ``command`` (what audit shows)."""
        return ExecRequest(
            workspace=self.workspace,
            deployment=self.deployment,
            command=tuple(command),
            container=self.container,
            on_behalf_of=self.on_behalf_of,
        )


def ephemeral_path(namespace: str, pod: str) -> str:
    """The pod's ``ephemeralcontainers`` subresource."""
    return f"{PODS.object_path(namespace, pod)}/ephemeralcontainers"


def pod_watch_path(namespace: str, pod: str, resource_version: str) -> str:
    """A watch of the one pod (``fieldSelector=metadata.name=``) from ``resource_version``."""
    selector = quote_value(f"metadata.name={pod}")
    version = quote_value(resource_version)
    return (
        f"{PODS.collection_path(namespace)}?watch=1&fieldSelector={selector}"
        f"&resourceVersion={version}&allowWatchBookmarks=true"
    )


def _optional_count(value: object, name: str, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _invalid(f"{name} must be an integer of at least {minimum}")
    return value


@attrs.frozen(kw_only=True)
class LogOptions:
    """What to read of a container's log (``pods/log``'s query).

    Attributes:
        follow: keep streaming until the container's process ends (or the caller stops).
        since_seconds: only output of the last N seconds (a positive integer).
        tail_lines: only the last N lines (0 or more).
        previous: the previous instance's log (after a restart).
        timestamps: each line starts with its RFC 3339 time and a space.
        limit_bytes: stop after N bytes (a positive integer).

    Raises:
        ExecError: ``EXEC_INVALID`` for a value out of range or of the wrong type.
    """

    follow: bool = False
    since_seconds: int | None = None
    tail_lines: int | None = None
    previous: bool = False
    timestamps: bool = False
    limit_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("follow", "previous", "timestamps"):
            if not isinstance(getattr(self, name), bool):
                raise _invalid(f"{name} must be a bool")
        _optional_count(self.since_seconds, "since_seconds", minimum=1)
        _optional_count(self.tail_lines, "tail_lines", minimum=0)
        _optional_count(self.limit_bytes, "limit_bytes", minimum=1)


def log_path(namespace: str, pod: str, container: str, options: LogOptions) -> str:
    """``/api/v1/namespaces/{ns}/pods/{pod}/log?container=...`` with ``options``."""
    query: list[tuple[str, str]] = [("container", container)]
    if options.follow:
        query.append(("follow", "true"))
    if options.previous:
        query.append(("previous", "true"))
    if options.timestamps:
        query.append(("timestamps", "true"))
    for name, value in (
        ("sinceSeconds", options.since_seconds),
        ("tailLines", options.tail_lines),
        ("limitBytes", options.limit_bytes),
    ):
        if value is not None:
            query.append((name, str(value)))
    encoded = "&".join(f"{name}={quote_value(value)}" for name, value in query)
    return f"{PODS.object_path(namespace, pod)}/log?{encoded}"


class DebugProfile(enum.StrEnum):
    """The security settings of a debug container, as ``kubectl debug --profile`` has them."""

    #: May trace the target's processes: adds ``SYS_PTRACE``.
    GENERAL = "general"
    #: Nothing added (what Pod Security's baseline admits).
    BASELINE = "baseline"
    #: What Pod Security's restricted level asks: non-root, no privilege escalation, every
    #: capability dropped, the runtime's seccomp profile. The image must not run as root.
    RESTRICTED = "restricted"
    #: Network administration: adds ``NET_ADMIN`` and ``NET_RAW``.
    NETADMIN = "netadmin"
    #: Everything: ``privileged``.
    SYSADMIN = "sysadmin"

    def security_context(self) -> dict[str, Any] | None:
        """The container's ``securityContext`` for this profile (``None``: none set)."""
        match self:
            case DebugProfile.GENERAL:
                return {"capabilities": {"add": ["SYS_PTRACE"]}}
            case DebugProfile.BASELINE:
                return None
            case DebugProfile.RESTRICTED:
                return {
                    "runAsNonRoot": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                }
            case DebugProfile.NETADMIN:
                return {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}}
            case DebugProfile.SYSADMIN:
                return {"privileged": True}


def _profile(value: object) -> DebugProfile:
    if isinstance(value, DebugProfile):
        return value
    try:
        return DebugProfile(str(value))
    except ValueError:
        names = ", ".join(p.value for p in DebugProfile)
        raise _invalid(f"profile must be one of {names}, not {value!r}") from None


def _strings(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _invalid(f"{name} must be a list of strings")
    if not all(isinstance(item, str) and "\0" not in item for item in value):
        raise _invalid(f"{name} must be a list of strings without NUL")
    return tuple(value)


def _env(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping):
        raise _invalid("env must be a mapping of names to values")
    pairs = []
    for key, item in value.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise _invalid(f"env name {key!r} is not a valid environment variable name")
        if not isinstance(item, str):
            raise _invalid(f"env value of {key} must be a string")
        pairs.append((key, item))
    return tuple(pairs)


def _command(value: object) -> tuple[str, ...]:
    return _strings(value, "command")


def _images(value: object) -> tuple[str, ...] | None:
    return None if value is None else _strings(value, "allowed_images")


def _profiles(value: object) -> frozenset[DebugProfile]:
    if isinstance(value, str) or not isinstance(value, Sequence | frozenset | set):
        raise _invalid("allowed_profiles must be a collection of profiles")
    return frozenset(_profile(p) for p in value)


def generated_name(entropy: bytes) -> str:
    """A name as kubectl makes them: ``debugger-`` and five characters drawn from ``entropy``
    (five random bytes from the caller: the core draws no randomness itself)."""
    if len(entropy) < 5:
        raise ValueError("generated_name needs five bytes of entropy")
    return "debugger-" + "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in entropy[:5])


@attrs.frozen(kw_only=True)
class DebugContainer:
    """The ephemeral container a debug session adds.

    Attributes:
        image: the image to run (required; e.g. ``busybox``).
        command: its argv (empty: the image's own entrypoint).
        target_container: share this container's process namespace (``None``: the
            container the request resolves to; ``""``: none).
        profile: the security settings (:class:`DebugProfile` or its name).
        env: extra environment variables.
        name: the container's name (``None``: generated, ``debugger-xxxxx``).
        image_pull_policy: ``Always``, ``IfNotPresent`` or ``Never`` (``None``: the server's
            default).
        tty: allocate a TTY (and stdin) for the container, as ``kubectl debug -it``.

    Raises:
        ExecError: ``EXEC_INVALID`` for a bad field (nothing is sent).
    """

    image: str
    command: Sequence[str] = attrs.field(default=(), converter=_command)
    target_container: str | None = None
    profile: DebugProfile = attrs.field(default=DebugProfile.GENERAL, converter=_profile)
    env: Mapping[str, str] = attrs.field(factory=dict)
    name: str | None = None
    image_pull_policy: str | None = None
    tty: bool = True

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip() or "\0" in self.image:
            raise _invalid("image must be a non-empty string")
        if len(self.image) > 4096 or any(c.isspace() for c in self.image):
            raise _invalid("image must be an image reference without spaces")
        if self.name is not None and (
            not isinstance(self.name, str)
            or len(self.name) > 63
            or not _DNS_LABEL.fullmatch(self.name)
        ):
            raise _invalid("name must be a DNS label (lowercase letters, digits and '-')")
        if self.target_container is not None and not isinstance(self.target_container, str):
            raise _invalid("target_container must be a string")
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise _invalid("image_pull_policy must be Always, IfNotPresent or Never")
        if not isinstance(self.tty, bool):
            raise _invalid("tty must be a bool")
        _env(self.env)


def container_spec(
    debug: DebugContainer, *, name: str, target_container: str | None
) -> dict[str, Any]:
    """The ``EphemeralContainer`` object for ``debug`` (stdin and TTY as asked)."""
    spec: dict[str, Any] = {"name": name, "image": debug.image}
    if debug.command:
        spec["command"] = list(debug.command)
    if debug.image_pull_policy is not None:
        spec["imagePullPolicy"] = debug.image_pull_policy
    env = _env(debug.env)
    if env:
        spec["env"] = [{"name": key, "value": value} for key, value in env]
    if target_container:
        spec["targetContainerName"] = target_container
    context = debug.profile.security_context()
    if context is not None:
        spec["securityContext"] = context
    spec["stdin"] = True
    spec["tty"] = debug.tty
    spec["terminationMessagePolicy"] = "File"
    return spec


def strategic_patch(spec: Mapping[str, Any]) -> bytes:
    """The strategic merge patch adding ``spec`` (merged by name: existing ones stay)."""
    return json.dumps({"spec": {"ephemeralContainers": [dict(spec)]}}).encode()


def json_patch(spec: Mapping[str, Any]) -> bytes:
    """The JSON patch adding ``spec`` (for servers that take no strategic merge here)."""
    return json.dumps(
        [{"op": "add", "path": "/spec/ephemeralContainers/-", "value": dict(spec)}]
    ).encode()


@attrs.frozen(kw_only=True)
class DebugPolicy:
    """What a service lets callers debug with (the platform's control).

    Attributes:
        enabled: whether debug containers may be added at all.
        allowed_images: image patterns (``fnmatch``: ``busybox:*``, ``registry.local/tools/*``)
            an image must match; ``None``: any image.
        allowed_profiles: the profiles allowed (default all but ``sysadmin``).

    A refusal is ``EXEC_TARGET_FORBIDDEN`` naming the rule (:meth:`check`).
    """

    enabled: bool = True
    allowed_images: Sequence[str] | None = attrs.field(default=None, converter=_images)
    allowed_profiles: frozenset[DebugProfile] = attrs.field(
        default=frozenset(p for p in DebugProfile if p is not DebugProfile.SYSADMIN),
        converter=_profiles,
    )

    def check(self, debug: DebugContainer) -> None:
        """Return if ``debug`` is allowed.

        Raises:
            ExecError: ``EXEC_TARGET_FORBIDDEN`` naming the rule that refuses it.
        """
        if not self.enabled:
            raise ExecError(
                ExecErrorCode.TARGET_FORBIDDEN,
                "debug containers are not allowed by this service's policy (DebugPolicy.enabled)",
            )
        if self.allowed_images is not None and not any(
            fnmatch.fnmatchcase(debug.image, pattern) for pattern in self.allowed_images
        ):
            raise ExecError(
                ExecErrorCode.TARGET_FORBIDDEN,
                f"image {debug.image!r} is not allowed by this service's policy "
                f"(DebugPolicy.allowed_images: {', '.join(self.allowed_images) or 'none'})",
            )
        if debug.profile not in self.allowed_profiles:
            allowed = ", ".join(sorted(p.value for p in self.allowed_profiles)) or "none"
            raise ExecError(
                ExecErrorCode.TARGET_FORBIDDEN,
                f"profile {debug.profile.value!r} is not allowed by this service's policy "
                f"(DebugPolicy.allowed_profiles: {allowed})",
            )


@attrs.frozen
class EphemeralStatus:
    """An ephemeral container's state in ``status.ephemeralContainerStatuses``.

    ``state`` is ``"waiting"``, ``"running"`` or ``"terminated"`` (``"unknown"``: no status
    yet); ``reason`` and ``message`` as the kubelet wrote them; ``exit_code`` once terminated.
    """

    state: str
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None

    def describe(self) -> str:
        """One line for a person: the state, its reason and message."""
        parts = [self.state]
        if self.reason:
            parts.append(self.reason)
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        text = ": ".join(parts[:2]) + (f" ({parts[2]})" if len(parts) > 2 else "")
        return f"{text}: {self.message}" if self.message else text


def ephemeral_status(pod: Mapping[str, Any], name: str) -> EphemeralStatus:
    """The state of ephemeral container ``name`` in a Pod object (``"unknown"`` when the
    kubelet has not reported it yet)."""
    status = pod.get("status")
    statuses = status.get("ephemeralContainerStatuses") if isinstance(status, Mapping) else None
    for entry in statuses if isinstance(statuses, list) else []:
        if not isinstance(entry, Mapping) or entry.get("name") != name:
            continue
        state = entry.get("state")
        if not isinstance(state, Mapping):
            break
        for kind in ("running", "terminated", "waiting"):
            detail = state.get(kind)
            if isinstance(detail, Mapping):
                code = detail.get("exitCode")
                return EphemeralStatus(
                    kind,
                    _text(detail.get("reason")),
                    _text(detail.get("message")),
                    code if isinstance(code, int) and not isinstance(code, bool) else None,
                )
    return EphemeralStatus("unknown")


def _text(value: object) -> str | None:
    return value[:1000] if isinstance(value, str) and value else None


def _status_of(body: bytes) -> tuple[str, str, Mapping[str, Any] | None]:
    try:
        status = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "", body[:300].decode("utf-8", "replace"), None
    if not isinstance(status, Mapping):
        return "", "", None
    details = status.get("details")
    return (
        str(status.get("reason") or ""),
        str(status.get("message") or "")[:1000],
        details if isinstance(details, Mapping) else None,
    )


def patch_error(
    http_status: int, body: bytes, *, namespace: str, pod: str, server_version: str | None
) -> ExecError:
    """The error for a refused PATCH of ``pods/{pod}/ephemeralcontainers``: what each answer
    means (the feature off, RBAC, a name collision, admission) in words a person can act on."""
    reason, message, details = _status_of(body)
    where = f"pod {namespace}/{pod}"
    if http_status == 404 and not (details and details.get("name")):
        # A missing pod's 404 names it; the missing subresource's names nothing (kubectl tells
        # them apart the same way).
        version = f" (Kubernetes {server_version})" if server_version else ""
        return ExecError(
            ExecErrorCode.FAILED,
            f"this cluster{version} does not serve ephemeral containers: the "
            "EphemeralContainers feature is off (it is on by default from Kubernetes 1.23, GA "
            "in 1.25); debug containers cannot be added",
            http_status=404,
            status_reason=reason or "NotFound",
        )
    if http_status == 404:
        return ExecError(
            ExecErrorCode.TARGET_NOT_FOUND,
            f"{where} is gone (replaced meanwhile?): {message}",
            http_status=404,
            status_reason=reason,
        )
    if http_status == 403 and reason == "Forbidden" and "cannot patch" in message:
        return ExecError(
            ExecErrorCode.TARGET_FORBIDDEN,
            f"not allowed to add a debug container to {where}: it needs the 'patch' verb on "
            f"'pods/ephemeralcontainers': {message}",
            http_status=403,
            status_reason=reason,
        )
    if http_status == 403:
        return ExecError(
            ExecErrorCode.TARGET_FORBIDDEN,
            f"the cluster's admission refused the debug container in {where}: {message}",
            http_status=403,
            status_reason=reason,
        )
    if http_status == 422 and "Duplicate value" in message:
        return ExecError(
            ExecErrorCode.INVALID,
            f"a container of that name already exists in {where}: {message}",
            http_status=422,
            status_reason=reason,
        )
    if http_status == 422:
        return ExecError(
            ExecErrorCode.INVALID,
            f"the debug container was refused as invalid in {where}: {message}",
            http_status=422,
            status_reason=reason,
        )
    return ExecError(
        ExecErrorCode.FAILED,
        f"adding a debug container to {where} failed with HTTP {http_status}: "
        f"{message or reason or 'no message'}",
        http_status=http_status,
        status_reason=reason or None,
    )
