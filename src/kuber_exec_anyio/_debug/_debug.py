"""``open_debug``: add an ephemeral container to a workspace pod, wait for it, attach to it.

The sequence is ``kubectl debug``'s (docs/protocol.md section 12): check the service's
:class:`~kuber_exec_core.debug.DebugPolicy`; resolve the target as an exec (ownership,
readiness); read the pod (its uid: a pod replaced meanwhile is reported, never debugged by
mistake); PATCH ``pods/{pod}/ephemeralcontainers`` with a strategic merge patch (a JSON patch
when the server takes no strategic merge there); watch the pod until the container runs or
ends, reporting each waiting or terminated state as it comes; then attach to it, or, when it
has already ended, read its log. Every refusal is an ``ExecError`` that says what happened and
whether a container was left in the pod (ephemeral containers can never be removed).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from kuber_exec_core import ExecError, ExecErrorCode, ExecStreams, ResolvedTarget
from kuber_exec_core.debug import (
    ContainerRequest,
    DebugContainer,
    EphemeralStatus,
    LogOptions,
    container_spec,
    ephemeral_path,
    ephemeral_status,
    generated_name,
    json_patch,
    patch_error,
    pod_watch_path,
    strategic_patch,
)
from kuber_exec_core.validation import validate_queue_capacity

from .._audit._record import AuditRecord
from .._audit._recording import Recording, prepare_recorder
from .._backend import backend_hooks
from .._pods import read_pod, server_version
from .._session import InteractiveSession
from ._attach import request_type, run_attached
from ._logs import LogStream, open_container_log

if TYPE_CHECKING:
    from .._service import ExecService

__all__ = ["DEFAULT_START_TIMEOUT", "DebugSession", "open_debug"]

logger = logging.getLogger("kuber_exec")

#: Seconds to wait for the debug container to run (an image pull may take this long).
DEFAULT_START_TIMEOUT = 120.0
#: Waiting reasons that will not resolve by waiting: reported at once.
_HOPELESS = frozenset(
    {
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
_MAX_WATCH_LINE = 4 * 1024 * 1024
_STRATEGIC = "application/strategic-merge-patch+json"
_JSON_PATCH = "application/json-patch+json"

StatusCallback = Callable[[EphemeralStatus], None]


@attrs.define
class DebugSession:
    """A debug container, running (``session``: attached to it) or ended (``log``: its output).

    Attributes:
        name: the ephemeral container's name (it stays in the pod).
        target: the pod and container debugged (``target.container``: the one it targets).
        status: its state when the session was handed over.
        session: the attached interactive session while it runs, else ``None``.
        log: its log when it had already ended, else ``None``.
    """

    name: str
    target: ResolvedTarget
    status: EphemeralStatus
    session: InteractiveSession | None = None
    log: LogStream | None = None
    _service: ExecService | None = attrs.field(default=None, repr=False, alias="service")

    async def wait_ended(self, within: float = 30.0) -> EphemeralStatus:
        """Wait (at most ``within`` seconds) until the container has ended; its terminated
        state, with its exit code (the kubelet writes it shortly after the process exits).

        Raises:
            ExecError: ``EXEC_FAILED`` when it has not ended in time.
        """
        if self.status.state == "terminated" or self._service is None:
            return self.status
        pod = await read_pod(self._service.backend, self.target)
        self.status = await _wait_started(
            self._service,
            self.target,
            self.name,
            pod,
            None,
            within,
            until=frozenset({"terminated"}),
        )
        return self.status


def _left_in_pod(name: str, target: ResolvedTarget) -> str:
    return (
        f"debug container {name} stays in pod {target.namespace}/{target.pod} (ephemeral "
        "containers cannot be removed)"
    )


async def _patch(
    service: ExecService, target: ResolvedTarget, spec: dict[str, Any]
) -> dict[str, Any]:
    hooks = backend_hooks(service.backend)
    path = ephemeral_path(target.namespace, target.pod)
    answer = await hooks.api_request("PATCH", path, strategic_patch(spec), _STRATEGIC)
    if answer.status == 415 or (answer.status >= 400 and b"not registered" in answer.body[:4096]):
        # A server that takes no strategic merge on this subresource (kubectl's fallback).
        answer = await hooks.api_request("PATCH", path, json_patch(spec), _JSON_PATCH)
    if answer.status != 200:
        version = await server_version(service.backend) if answer.status == 404 else None
        raise patch_error(
            answer.status,
            answer.body,
            namespace=target.namespace,
            pod=target.pod,
            server_version=version,
        )
    try:
        pod = json.loads(answer.body)
    except (ValueError, UnicodeDecodeError):
        raise ExecError(ExecErrorCode.FAILED, "the PATCH answer is not JSON") from None
    if not isinstance(pod, dict):
        raise ExecError(ExecErrorCode.FAILED, "the PATCH answer is not a JSON object")
    uid = (pod.get("metadata") or {}).get("uid")
    if uid != target.pod_uid:
        raise ExecError(
            ExecErrorCode.TARGET_NOT_FOUND,
            f"pod {target.namespace}/{target.pod} was replaced meanwhile: the "
            f"{_left_in_pod(spec['name'], target)} of the new pod {uid}, and is not attached",
        )
    return pod


def _report(status: EphemeralStatus, name: str, on_status: StatusCallback | None) -> None:
    logger.info("debug container %s: %s", name, status.describe())
    if on_status is not None:
        on_status(status)


async def _wait_started(
    service: ExecService,
    target: ResolvedTarget,
    name: str,
    pod: dict[str, Any],
    on_status: StatusCallback | None,
    within: float,
    *,
    until: frozenset[str] = frozenset({"running", "terminated"}),
) -> EphemeralStatus:
    """Watch the pod until container ``name`` is in a state of ``until`` (default: it runs or
    has ended); each new state is reported."""
    hooks = backend_hooks(service.backend)
    last = ephemeral_status(pod, name)
    if last.state != "unknown":
        _report(last, name, on_status)
    if last.state in until:
        return last
    version = str((pod.get("metadata") or {}).get("resourceVersion") or "0")
    with anyio.move_on_after(within):
        while True:
            async with hooks.api_stream(
                pod_watch_path(target.namespace, target.pod, version)
            ) as answer:
                if answer.status == 410:
                    version = "0"  # expired: start again from the current state
                    continue
                if answer.status != 200:
                    raise ExecError(
                        ExecErrorCode.FAILED,
                        f"watching pod {target.namespace}/{target.pod} failed with HTTP "
                        f"{answer.status}; the {_left_in_pod(name, target)}",
                        http_status=answer.status,
                    )
                buffer = b""
                async for chunk in answer.chunks():
                    buffer += chunk
                    if len(buffer) > _MAX_WATCH_LINE:
                        raise ExecError(ExecErrorCode.FAILED, "a watch event is too large")
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "DELETED" or (
                            kind in ("ADDED", "MODIFIED")
                            and (obj.get("metadata") or {}).get("uid") != target.pod_uid
                        ):
                            raise ExecError(
                                ExecErrorCode.TARGET_NOT_FOUND,
                                f"pod {target.namespace}/{target.pod} went away while its debug "
                                f"container {name} was starting",
                            )
                        if kind == "ERROR":
                            version = "0"
                            break
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if kind == "BOOKMARK":
                            continue
                        status = ephemeral_status(obj, name)
                        # An older version of the pod (no status yet) is not news.
                        if status.state != "unknown" and status != last:
                            last = status
                            _report(status, name, on_status)
                        if status.state in until:
                            return status
                        if status.state == "waiting" and status.reason in _HOPELESS:
                            raise ExecError(
                                ExecErrorCode.FAILED,
                                f"debug container {name} cannot start: {status.describe()}; "
                                f"the {_left_in_pod(name, target)}",
                            )
    raise ExecError(
        ExecErrorCode.FAILED,
        f"debug container {name} did not reach {' or '.join(sorted(until))} within "
        f"{within:g} seconds (last state: "
        f"{last.describe()}); the {_left_in_pod(name, target)}",
    )


@asynccontextmanager
async def open_debug(
    service: ExecService,
    request: ContainerRequest,
    debug: DebugContainer,
    *,
    on_status: StatusCallback | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    queue_capacity: int | None = None,
    recording: Recording | None = None,
    attach: bool = True,
) -> AsyncIterator[DebugSession]:
    """Add ``debug`` as an ephemeral container to the pod ``request`` resolves to, and attach.

    ``async with open_debug(service, request, DebugContainer(image="busybox")) as debugging:``
    then use ``debugging.session`` (an :class:`InteractiveSession` on the container's process:
    a shell in a distroless pod) or, when the container had already ended,
    ``debugging.log``. The container shares the process namespace of
    ``debug.target_container`` (default: the container the request resolves to). Leaving the
    block detaches; the container's process runs on until it exits, and the container stays
    in the pod (ephemeral containers cannot be removed).

    Args:
        on_status: called with each new state of the container while it starts (a waiting
            reason such as ``ErrImagePull`` with its message, then running or terminated).
        start_timeout: seconds to wait for it to run.
        queue_capacity: as ``ExecService.open_interactive``.
        recording: as ``ExecService.open_interactive``.
        attach: ``False``: do not attach; ``debugging.log`` follows the container's log from
            its start to its end instead (all of a command's output, none lost to the moment
            between its start and an attach).

    Audited as ``kind="debug"``: who (``user``), which pod, which ``image``, the container's
    name (``debug_container``).

    Raises (on entry):
        ExecError: ``EXEC_TARGET_FORBIDDEN`` naming the policy rule (debug off, an image or a
            profile not allowed), RBAC without ``patch`` on ``pods/ephemeralcontainers``, or
            the cluster's admission (Pod Security, a webhook) with its message;
            ``EXEC_INVALID`` for a bad argument or a name already in the pod;
            ``EXEC_TARGET_NOT_FOUND`` for a pod replaced or gone meanwhile; ``EXEC_FAILED`` for
            a cluster without the feature (naming its version), a container that cannot start
            (its reason), or a start timeout; and what ``resolve_target`` raises.
    """
    request = request_type(request)
    if not isinstance(debug, DebugContainer):
        raise ExecError(ExecErrorCode.INVALID, "debug must be a DebugContainer")
    if not isinstance(attach, bool):
        raise ExecError(ExecErrorCode.INVALID, "attach must be a bool")
    if isinstance(start_timeout, bool) or not isinstance(start_timeout, int | float):
        raise ExecError(ExecErrorCode.INVALID, "start_timeout must be a number of seconds")
    if not 0 < start_timeout <= 3600:
        raise ExecError(ExecErrorCode.INVALID, "start_timeout must be in (0, 3600] seconds")
    capacity = validate_queue_capacity(queue_capacity, service.limits)
    exec_request = request.as_exec_request(tuple(debug.command) or (debug.image,))
    recorder = prepare_recorder(recording, exec_request, tty=debug.tty)
    record = AuditRecord(
        service.audit,
        "debug",
        exec_request,
        tty=debug.tty,
        recording=None if recorder is None else recorder.name,
        image=debug.image,
    )
    async with service.admission(record, exec_request) as slot:
        service.debug_policy.check(debug)
        target = await service.resolve_target(exec_request)
        pod = await read_pod(service.backend, target)
        taken = {
            c.get("name")
            for key in ("containers", "initContainers", "ephemeralContainers")
            for c in (pod.get("spec") or {}).get(key) or []
            if isinstance(c, dict)
        }
        name = debug.name
        if name is None:
            name = generated_name(secrets.token_bytes(5))
            while name in taken:
                name = generated_name(secrets.token_bytes(5))
        elif name in taken:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"pod {target.namespace}/{target.pod} already has a container named {name}: "
                "choose another name (or none: one is generated)",
            )
        record.debug_container = name
        record.started(target)
        shared = debug.target_container if debug.target_container is not None else target.container
        spec = container_spec(debug, name=name, target_container=shared or None)
        patched = await _patch(service, target, spec)
        status = await _wait_started(service, target, name, patched, on_status, start_timeout)
        debug_target = attrs.evolve(target, container=name)
        if status.state == "terminated" or not attach:
            follow = LogOptions(follow=status.state != "terminated")
            async with open_container_log(
                service.backend, target.namespace, target.pod, name, follow
            ) as log:
                yield DebugSession(
                    name=name, target=target, status=status, log=log, service=service
                )
            record.exited(
                status.exit_code if status.exit_code is not None else 0,
                bytes_in=0,
                bytes_out=log.bytes_read,
            )
            return
        streams = ExecStreams(stdin=True, stdout=True, stderr=not debug.tty, tty=debug.tty)
        slot.note_attempt(debug_target, None, hangup=False)
        async with run_attached(
            service, record, debug_target, streams, capacity, recorder
        ) as session:
            yield DebugSession(
                name=name, target=target, status=status, session=session, service=service
            )
