"""``KuberSandbox``: the ``kuber_sandbox`` fixture's object, a started sandbox for one test."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kuber_exec_core import ExecError, ExecErrorCode, Workspace

from ._target import KuberTarget
from ._thread import SandboxThread

if TYPE_CHECKING:
    from kuber_exec_sandbox import Cluster, Faults, PodObject, PodSpec, Sandbox

__all__ = ["DEFAULT_PROJECT", "KuberSandbox"]

T = TypeVar("T")
R = TypeVar("R")

#: The namespace ``add_workspace`` puts workspaces in unless told otherwise.
DEFAULT_PROJECT = "kuber-test"


class KuberSandbox:
    """A started sandbox API server whose cluster the test shapes (see ``docs/testing.md``).

    The server runs on trio in a thread of its own, so a test on any event loop can use it; it
    starts with an empty cluster and stops (every command killed and reaped) after the test.
    Changes to :attr:`cluster` show in the next request; the ``add_*`` helpers and
    ``with cluster.changing():`` also wake open watches.

    Attributes:
        sandbox: the running ``kuber_exec_sandbox.Sandbox`` (``url``,
            ``kubeconfig_path``, ``live_processes``).
        cluster: the served ``kuber_exec_sandbox.Cluster`` (Deployments, pods and their
            states; ``add_deployment``, ``add_pod``, ``scale_deployment``, ``delete_pod``).
        faults: the cluster's ``kuber_exec_sandbox.Faults``, armed on demand.
    """

    def __init__(self, thread: SandboxThread, sandbox: Sandbox) -> None:
        self._thread = thread
        self.sandbox = sandbox
        self.cluster: Cluster = sandbox.cluster
        self.faults: Faults = sandbox.cluster.faults

    def __repr__(self) -> str:
        return f"<KuberSandbox {self.sandbox.url}>"

    @classmethod
    def start(cls, **options: Any) -> KuberSandbox:
        """Serve an empty cluster with ``serve_sandbox``'s ``options`` (``offer_v5``, ``token``,
        ``subprotocols``, ``bookmark_interval``)."""
        from kuber_exec_sandbox import Cluster

        thread = SandboxThread(Cluster(), options)
        return cls(thread, thread.start())

    def stop(self) -> None:
        """Release every held session, stop the server and reap every command (the fixture
        calls this after the test)."""
        self.faults.clear()
        self._thread.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the API server."""
        return self.sandbox.url

    @property
    def kubeconfig_path(self) -> Path:
        """A kubeconfig whose current context is this sandbox (for kubectl or the official
        client)."""
        return self.sandbox.kubeconfig_path

    def add_workspace(
        self,
        deployment: str = "app",
        *,
        project: str = DEFAULT_PROJECT,
        uid: str | None = None,
        pods: int | Sequence[PodSpec] = 1,
        containers: Sequence[str] = ("app",),
        env: Mapping[str, str] | None = None,
    ) -> KuberTarget:
        """Add a Deployment owned by a workspace, with its ReplicaSet and pods; return it.

        Args:
            deployment: the Deployment's name.
            project: the workspace's namespace.
            uid: the workspace uid on the ownership label (default ``<project>-uid``).
            pods: how many ready, running pods, or one ``kuber_exec_sandbox.PodSpec``
                per pod (not ready, pending, terminating, not scheduled, named, with env).
            containers: the pods' containers (commands run in any of them alike).
            env: added to the environment of every command in the pods (with ``pods`` as a
                number).

        Returns:
            The target: ``target.request("echo", "hi")`` is an ``ExecRequest`` for it.
        """
        from kuber_exec_sandbox import PodSpec

        if isinstance(pods, int):
            specs: Sequence[PodSpec] = [PodSpec(env=dict(env or {})) for _ in range(pods)]
        else:
            specs = pods
        uid = uid if uid is not None else f"{project}-uid"
        self.cluster.add_deployment(
            project, deployment, workspace_uid=uid, pods=list(specs), containers=containers
        )
        return KuberTarget(Workspace(project=project, uid=uid), deployment)

    def pods(self, target: KuberTarget) -> list[PodObject]:
        """The pods of ``target``'s Deployment (owned through its ReplicaSets), by name.

        Raises:
            KeyError: the sandbox has no such Deployment.
        """
        with self.cluster.lock:
            deployment = self.cluster.deployment(target.workspace.project, target.deployment)
            if deployment is None:
                raise KeyError(f"no Deployment {target.workspace.project}/{target.deployment}")
            return sorted(self.cluster.pods_of(deployment), key=lambda pod: pod.name)

    def end_pod(self, target: KuberTarget, pod: str | None = None) -> int:
        """The pod goes away: its running commands are killed (each reports exit code 137) and
        it is deleted. ``pod`` defaults to the target's only pod. Returns how many commands were
        killed (see ``kuber_exec_sandbox.Cluster.end_pod``).

        Raises:
            ExecError: ``EXEC_INVALID`` when ``pod`` is omitted and there is not exactly one;
                as ``Cluster.end_pod`` for no such pod.
        """
        name = pod if pod is not None else self._only_pod(target)
        return self.cluster.end_pod(target.workspace.project, name)

    def kill_processes(self, target: KuberTarget, pod: str | None = None) -> int:
        """Kill the commands running in the pod now (each reports exit code 137); the pod
        stays. Returns how many were killed (``kuber_exec_sandbox.Faults.kill_processes``).

        Raises:
            ExecError: ``EXEC_INVALID`` when ``pod`` is omitted and the target has not exactly
                one pod.
        """
        name = pod if pod is not None else self._only_pod(target)
        return self.faults.kill_processes(target.workspace.project, name)

    def _only_pod(self, target: KuberTarget) -> str:
        pods = self.pods(target)
        if len(pods) != 1:
            raise ExecError(
                ExecErrorCode.INVALID,
                f"{target.deployment} has {len(pods)} pods: name the one to end",
            )
        return pods[0].name

    @property
    def live_processes(self) -> int:
        """Commands started by exec sessions and not yet reaped."""
        return self.sandbox.live_processes

    async def wait_running(self, count: int = 1, *, pod: str | None = None) -> None:
        """Return once at least ``count`` commands run (in ``pod``, or in any pod): how a test
        knows the command it started is there before it ends the pod or breaks something.

        Bound it with your loop's timeout if it may not happen.
        """
        await anyio_to_thread(
            self._thread.call, functools.partial(self.faults.wait_running, count, pod=pod)
        )

    async def wait_processes_reaped(self) -> None:
        """Return once every command has been reaped (call from the test, on any loop).

        The server cleans up on its own thread after a session ends; bound the wait with your
        loop's timeout (``trio.fail_after``, ``asyncio.timeout``) if it may not happen.
        """
        await anyio_to_thread(self._thread.call, self.sandbox.wait_processes_reaped)


async def anyio_to_thread(function: Callable[[T], R], argument: T) -> R:
    """``function(argument)`` in a worker thread, from the test's loop (trio or asyncio); a
    cancelled caller does not wait for it."""
    import anyio.to_thread

    return await anyio.to_thread.run_sync(function, argument, abandon_on_cancel=True)
