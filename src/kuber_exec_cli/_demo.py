"""``kuber-exec demo``: a guided run of the whole path on the in-process sandbox.

Contract of :func:`run_demo`: it narrates on stdout what the library does (start the sandbox,
resolve and check the target over the REST API, stream a command, refuse another workspace's
Deployment) using the same backend, service and streaming code as ``kuber-exec exec``, and
returns 0. A step that does not behave as the demo cluster promises raises ``ExecError``: that
is a bug somewhere, and the demo must not paper over it.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import BinaryIO

import anyio
import attrs

from kuber_exec_asyncio import (
    ClusterConfig,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    ExecService,
    InteractiveSession,
    KubernetesBackend,
    Workspace,
)
from kuber_exec_core import EXEC_MANAGED_BY_LABEL, EXEC_WORKSPACE_UID_LABEL

from ._local import EXIT_ERROR, LocalStreams
from ._sandbox import DEMO_PROJECT, DEMO_WORKSPACE_UID, open_demo_sandbox
from ._streaming import stream_session

__all__ = ["run_demo"]


class _Narrator:
    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def __call__(self, text: str = "") -> None:
        self._stream.write(text.encode("utf-8") + b"\n")
        self._stream.flush()


async def run_demo(streams: LocalStreams) -> int:
    """``kuber-exec demo``: the whole path on the in-process sandbox, explained; returns 0.

    Raises:
        ExecError: a step did not behave as the demo cluster promises (a bug somewhere).
    """
    say = _Narrator(streams.stdout)
    started = anyio.current_time()
    command = ("sh", "-c", "echo hello from $HOSTNAME")
    request = ExecRequest(
        workspace=Workspace(project=DEMO_PROJECT, uid=DEMO_WORKSPACE_UID),
        deployment="web",
        command=command,
    )
    say("kuber-exec demo: run a command in a workspace's Deployment, end to end, on a sandbox.")
    say()
    say("1. Start the sandbox: a Kubernetes API server on 127.0.0.1, in this process, whose")
    say("   pods run commands as local processes. Its demo cluster, namespace 'demo':")
    say(f"     Deployment web    labelled {EXEC_WORKSPACE_UID_LABEL}={DEMO_WORKSPACE_UID}")
    say(f"     Deployment other  labelled {EXEC_WORKSPACE_UID_LABEL}=other-uid")
    async with open_demo_sandbox() as url, KubernetesBackend(ClusterConfig(url)) as backend:
        say(f"   Listening on {url}")
        say()
        service = ExecService(backend)
        say(f"2. Find the target for workspace project={DEMO_PROJECT} uid={DEMO_WORKSPACE_UID},")
        say("   Deployment web, as the library does over the REST API:")
        deployment = await backend.get_deployment(DEMO_PROJECT, "web")
        if deployment is None:
            raise ExecError(ExecErrorCode.FAILED, "the demo cluster has no Deployment web")
        labels = deployment.labels
        say(f"     GET  deployments/web: uid {deployment.uid}")
        say(f"          containers: {', '.join(deployment.containers)}")
        for label in (EXEC_MANAGED_BY_LABEL, EXEC_WORKSPACE_UID_LABEL):
            say(f"          label {label}={labels.get(label, '(missing)')}")
        say(f"     LIST pods?labelSelector={deployment.selector.to_query()}")
        for pod in await backend.list_pods(DEMO_PROJECT, deployment.selector):
            ready = all(container.ready for container in pod.containers)
            owned = pod.deployment_uid == deployment.uid
            say(
                f"          {pod.name}: {pod.phase}, {'ready' if ready else 'not ready'}, "
                f"{'owned by web' if owned else 'NOT owned by web'} (via its ReplicaSet)"
            )
        target = await service.resolve_target(request)
        say(f"   Picked pod {target.pod}, container {target.container}: running and owned,")
        say("   ready pods first.")
        say()
        say("3. Run it (the same code as: kuber-exec exec --sandbox web -- \\")
        say("   sh -c 'echo hello from $HOSTNAME'): a WebSocket upgrade to the pod's exec")
        say("   endpoint, then the process's output as it arrives:")

        def opened(session: InteractiveSession) -> None:
            say(f"   [connected to {session.target.pod}, subprotocol {session.protocol.value}]")

        exit_code = await stream_session(
            service, request, streams, stdin=False, tty=False, on_open=opened
        )
        say(f"   [exit code {exit_code}]")
        if exit_code != 0:
            raise ExecError(ExecErrorCode.FAILED, f"the demo command exited {exit_code}")
        say()
        say("4. The ownership check: the same workspace asks for Deployment other, which")
        say("   belongs to workspace other-uid (kuber-exec exec --sandbox other -- id):")
        forbidden = attrs.evolve(request, deployment="other", command=("id",))
        try:
            await stream_session(service, forbidden, streams, stdin=False, tty=False)
        except ExecError as error:
            if error.code is not ExecErrorCode.TARGET_FORBIDDEN:
                raise
            say(f"   kuber-exec: {error}")
            say(f"   Refused before any WebSocket was opened; the CLI exits {EXIT_ERROR}.")
        else:
            raise ExecError(
                ExecErrorCode.FAILED, "the sandbox let workspace demo-uid exec into 'other'"
            )
    say()
    me = _how_to_call_me()
    say(f"Done in {anyio.current_time() - started:.1f} s. Next:")
    say(f"  {me} exec --sandbox -it web -- sh    # a shell in the demo pod")
    say(f"  {me} sandbox                         # keep a sandbox up, for kubectl too")
    say(f"  {me} exec --help                     # real clusters, exit statuses")
    return 0


def _how_to_call_me() -> str:
    # After `make demo` the console script sits in .venv/bin, usually not on PATH: show a
    # command line that works as typed.
    if shutil.which("kuber-exec"):
        return "kuber-exec"
    script = os.path.join(os.path.dirname(sys.executable), "kuber-exec")
    if not os.access(script, os.X_OK):
        script = f"{sys.executable} -m kuber_exec_cli"
    relative = os.path.relpath(script)
    return script if relative.startswith("..") else relative
