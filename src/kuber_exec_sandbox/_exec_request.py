"""Deciding an exec upgrade request before any byte of WebSocket is sent (pure, no I/O).

The checks run in the order a real cluster runs them (docs/protocol.mdAPI server's
``streamLocation`` then the kubelet's ``GetExec``):

1. the pod must exist                       -> 404 ``pods "x" not found``
2. a named container must be in the pod; an unnamed one only when the pod has exactly one
                                            -> 400 ``container c is not valid for pod p``
3. the pod must be scheduled                -> 400 ``pod p does not have a host assigned``
4. at least one of stdin, stdout, stderr    -> 400
5. a WebSocket upgrade, by GET              -> 400 (no upgrade), 405 (not GET)
6. the container must be running. On the v5 path the API server upgrades first and then reports
   ``InternalError`` on the status channel; on the legacy path the kubelet answers ``500`` text.
7. a subprotocol both sides know (v5 path: only v5) -> 403, empty body

Before all of these, an upgrade refusal armed with ``cluster.faults.refuse_exec`` answers its
status (an API server refuses RBAC and authentication before it looks at the pod).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from kuber_exec_core import ExecError, ExecStreams, Subprotocol
from kuber_exec_core.channels import choose_subprotocol
from kuber_exec_core.server import parse_exec_query, server_subprotocols, status_failure

from ._cluster import Cluster, PodObject
from ._faults import Faults
from ._rest import RestResponse, status_response

__all__ = ["ExecPlan", "plan_exec"]


@attrs.frozen(kw_only=True)
class ExecPlan:
    """An accepted upgrade: what to run, where, and in which subprotocol.

    ``failure`` is a Status to send instead of running anything (the container is not running).
    ``empty_protocol_header`` is true when the client offered no subprotocol: the legacy server
    then answers with an empty ``Sec-WebSocket-Protocol`` header (docs/protocol.md).
    ``faults`` are the cluster's (the session takes its drop, holds and process kills there).
    """

    pod: PodObject
    container: str
    command: tuple[str, ...]
    streams: ExecStreams
    subprotocol: Subprotocol
    empty_protocol_header: bool
    failure: bytes | None
    faults: Faults
    #: An attach (``pods/attach``): bind to the container's main process instead of running
    #: ``command`` (which is then empty).
    attach: bool = False


def _container(pod: PodObject, name: str | None, *, attach: bool = False) -> str | RestResponse:
    names = [c.name for c in pod.containers]
    if attach and name is not None:
        # Attach reaches ephemeral containers too (how ``kubectl debug -it`` gets its shell).
        names += [c.name for c in pod.ephemeral]
    if name is None:
        if len(names) == 1:
            return names[0]
        message = f"a container name must be specified for pod {pod.name}"
        if names:
            message += f", choose one of: [{' '.join(names)}]"
        return status_response(400, "BadRequest", message)
    if name not in names:
        return status_response(
            400, "BadRequest", f"container {name} is not valid for pod {pod.name}"
        )
    return name


def upgrade_target(
    cluster: Cluster, method: str, namespace: str, pod_name: str
) -> PodObject | RestResponse:
    """The pod an upgrade (exec, attach, port-forward) names, or the API server's answer that
    refuses it first: a method other than GET or POST (405), an armed refusal fault, no such
    pod (404)."""
    if method not in ("GET", "POST"):
        return status_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    refusal = cluster.faults.take_refusal(namespace, pod_name)
    if refusal is not None:
        return status_response(*refusal)
    pod = cluster.pod(namespace, pod_name)
    if pod is None:
        return status_response(
            404, "NotFound", f'pods "{pod_name}" not found', {"name": pod_name, "kind": "pods"}
        )
    return pod


def plan_exec(
    cluster: Cluster,
    *,
    method: str,
    namespace: str,
    pod_name: str,
    query: Sequence[tuple[str, str]],
    websocket_upgrade: bool,
    offered: Sequence[str],
    offer_v5: bool,
    only_subprotocols: Sequence[Subprotocol] | None = None,
    attach: bool = False,
) -> ExecPlan | RestResponse:
    """The plan for an exec (or, with ``attach``, an attach) request, or the HTTP answer that
    refuses it. An attach names no command; it needs the container running, and refuses stdin
    or a TTY the container was not created with (on the status channel, as the runtime's
    refusal comes after the upgrade)."""
    pod = upgrade_target(cluster, method, namespace, pod_name)
    if isinstance(pod, RestResponse):
        return pod
    try:
        parsed = parse_exec_query(query)
        streams_error: str | None = None
    except ExecError as error:
        parsed = None
        streams_error = error.message
    container_name = next((v for k, v in query if k == "container"), "") or None
    container = _container(pod, container_name, attach=attach)
    if isinstance(container, RestResponse):
        return container
    if pod.node_name is None:
        return status_response(400, "BadRequest", f"pod {pod.name} does not have a host assigned")
    if parsed is None:
        return status_response(400, "BadRequest", streams_error or "bad exec options")
    if not websocket_upgrade:
        # kubectl falls back to SPDY (POST) when the WebSocket upgrade fails; the sandbox speaks
        # WebSocket only, and real checks above already answered what a real server would.
        return status_response(
            400,
            "BadRequest",
            "Upgrade request required: the kuber-exec sandbox serves exec over WebSocket only",
        )
    if method != "GET":
        return status_response(
            405, "MethodNotAllowed", "a WebSocket upgrade must use the GET method"
        )
    supported = server_subprotocols(offered, v5_enabled=offer_v5)
    if only_subprotocols is not None:
        supported = tuple(p for p in supported if p in only_subprotocols)
    running = pod.container(container)
    not_running = running is None or not running.running
    failure_text = f'container not found ("{container}")'
    attach_refusal: str | None = None
    if attach:
        ephemeral = pod.ephemeral_container(container)
        created_stdin, created_tty = (
            (running.stdin, running.tty) if running is not None else (False, False)
        )
        if ephemeral is not None:
            not_running = ephemeral.state != "running"
            created_stdin, created_tty = ephemeral.stdin, ephemeral.tty
        elif running is not None and not running.command:
            not_running = True  # nothing to attach to: a sandbox container without a process
        if parsed.command:
            return status_response(400, "BadRequest", "attach takes no command")
        if parsed.streams.stdin and not created_stdin:
            attach_refusal = (
                f"container {container} in pod {pod.name} was not created with stdin: "
                "it cannot be attached with stdin"
            )
        elif parsed.streams.tty and not created_tty:
            attach_refusal = (
                f"container {container} in pod {pod.name} was not created with a TTY: "
                "it cannot be attached with tty"
            )
    if not_running and Subprotocol.V5 not in supported:
        return RestResponse(500, failure_text.encode("utf-8"), "text/plain; charset=utf-8")
    chosen = choose_subprotocol(offered, supported)
    if chosen is None:
        return RestResponse(403, b"", "text/plain; charset=utf-8")
    return ExecPlan(
        pod=pod,
        container=container,
        command=parsed.command,
        streams=parsed.streams,
        subprotocol=chosen,
        empty_protocol_header=not offered,
        failure=(
            status_failure(f"unable to upgrade connection: {failure_text}")
            if not_running
            else status_failure(attach_refusal)
            if attach_refusal is not None
            else None
        ),
        faults=cluster.faults,
        attach=attach,
    )
