"""``RuntimeBackend``: kuber-exec's ``Backend`` seam over a real container runtime's exec server.

The Kubernetes API part is synthetic (one owned Deployment, one Running pod whose only container
is the harness's busybox container); the exec part is real: each ``exec`` asks containerd's CRI
for a streaming URL with the same command and streams the API server would have asked the
kubelet for, and opens it with the adapter's ``connect_exec`` (the transport under
``KubernetesBackend.exec``). So ``ExecService.execute`` / ``open_interactive`` of either adapter
run unchanged against containerd's streaming server, which is the kubelet's code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio.to_thread
import attrs

from kuber_exec_anyio import ExecConnection
from kuber_exec_core import (
    EXEC_MANAGED_BY_LABEL,
    EXEC_MANAGED_BY_VALUE,
    EXEC_WORKSPACE_UID_LABEL,
    Deployment,
    ExecRequest,
    ExecStreams,
    LabelSelector,
    Pod,
    PodContainer,
    ResolvedTarget,
    Subprotocol,
    Workspace,
)

from .cri_runtime import CriRuntime

__all__ = ["ConnectExec", "RuntimeBackend", "RuntimeExecCall"]

#: An adapter's ``connect_exec`` (``kuber_exec_trio`` or ``kuber_exec_asyncio``), positionally.
ConnectExec = Callable[[str, Sequence[Subprotocol]], AbstractAsyncContextManager[ExecConnection]]

NAMESPACE = "runtime"  # the workspace project is the namespace
DEPLOYMENT = "workspace-shell"
DEPLOYMENT_UID = "4f1c2a8e-0000-4000-8000-00000000d001"
POD = "workspace-shell-7d9f8b6c5-x2x4q"
POD_UID = "4f1c2a8e-0000-4000-8000-00000000f001"
#: The harness's container is named ``shell`` in its CRI config.
CONTAINER = "shell"
WORKSPACE = Workspace(project=NAMESPACE, uid="4f1c2a8e-0000-4000-8000-0000000000aa")


def request(*command: str) -> ExecRequest:
    """An ``ExecRequest`` that resolves to the runtime's container."""
    return ExecRequest(workspace=WORKSPACE, deployment=DEPLOYMENT, command=list(command))


@attrs.frozen(kw_only=True)
class RuntimeExecCall:
    """One exec the backend opened: what the service asked for."""

    target: ResolvedTarget
    command: tuple[str, ...]
    streams: ExecStreams
    offered: tuple[Subprotocol, ...]


class RuntimeBackend:
    """A :class:`kuber_exec_core.Backend` whose exec is containerd's streaming server."""

    def __init__(self, runtime: CriRuntime, connect_exec: ConnectExec) -> None:
        self.runtime = runtime
        self.connect_exec = connect_exec
        self.calls: list[RuntimeExecCall] = []
        self._labels = {
            EXEC_MANAGED_BY_LABEL: EXEC_MANAGED_BY_VALUE,
            EXEC_WORKSPACE_UID_LABEL: WORKSPACE.uid,
        }

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        if (namespace, name) != (NAMESPACE, DEPLOYMENT):
            return None
        return Deployment(
            name=DEPLOYMENT,
            uid=DEPLOYMENT_UID,
            labels=self._labels,
            selector=LabelSelector.from_labels({"app": DEPLOYMENT}),
            containers=(CONTAINER,),
        )

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        if namespace != NAMESPACE or selector != LabelSelector.from_labels({"app": DEPLOYMENT}):
            return ()
        running = PodContainer(name=CONTAINER, running=True, ready=True)
        pod = Pod(
            name=POD,
            uid=POD_UID,
            deployment_uid=DEPLOYMENT_UID,
            phase="Running",
            containers=(running,),
        )
        return (pod,)

    @asynccontextmanager
    async def exec(
        self,
        target: ResolvedTarget,
        command: Sequence[str],
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
    ) -> AsyncIterator[ExecConnection]:
        assert (target.namespace, target.pod, target.container) == (NAMESPACE, POD, CONTAINER)
        call = RuntimeExecCall(
            target=target, command=tuple(command), streams=streams, offered=tuple(subprotocols)
        )
        self.calls.append(call)
        # The kubelet's part: CRI Exec with the same argv and streams (a blocking gRPC call,
        # so off the event loop, whichever loop it is), then the client's real transport.
        url = await anyio.to_thread.run_sync(
            lambda: self.runtime.exec_url(
                list(call.command),
                tty=streams.tty,
                stdin=streams.stdin,
                stdout=streams.stdout,
                stderr=streams.stderr,
            )
        )
        async with self.connect_exec(url, call.offered) as connection:
            yield connection
