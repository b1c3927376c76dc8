"""What the test folders share: waiting for a condition, the demo workspace's requests, a
session's frames and output, a backend on a sandbox, leak counters. Test modules import from
here (``from support import ...``), never from another test module or a ``conftest``.

The folder is on ``sys.path`` through pytest's ``pythonpath`` setting (pyproject.toml).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Generator
from types import ModuleType
from typing import Any

import anyio
import sniffio

from kuber_exec_core import ExecRequest, ServerFrame, Stderr, Stdout, Workspace
from kuber_exec_core.kube import ApiGet, ApiResponse
from kuber_exec_sandbox import Sandbox

__all__ = [
    "DEMO",
    "backend_for",
    "collect_frames",
    "demo_request",
    "eventually",
    "open_fds",
    "output_of",
    "running_tasks",
    "single_pod_cluster",
]

#: The sandbox's demo workspace (the demo cluster's ``web`` Deployment belongs to it).
DEMO = Workspace(project="demo", uid="demo-uid")

#: How long :func:`eventually` waits by default, and how often it looks.
TIMEOUT = 10.0
INTERVAL = 0.01


def single_pod_cluster() -> Callable[[ApiGet], ApiResponse]:
    """A ``respond`` for :class:`~kuber_exec_anyio.testing.MemoryBackend`: the demo
    workspace's ``web`` Deployment with one running, ready pod ``web-1`` (container ``app``)."""
    deployment = {
        "metadata": {
            "name": "web",
            "uid": "d-uid",
            "labels": {
                "app.kubernetes.io/managed-by": "kuber",
                "kuber.dev/workspace-uid": "demo-uid",
            },
        },
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [{"name": "app"}]}},
        },
    }
    owner = {"apiVersion": "apps/v1", "controller": True}
    replica_set = {
        "metadata": {
            "name": "web-rs",
            "uid": "rs-uid",
            "ownerReferences": [{**owner, "kind": "Deployment", "name": "web", "uid": "d-uid"}],
        }
    }
    pod = {
        "metadata": {
            "name": "web-1",
            "uid": "p-uid",
            "labels": {"app": "web"},
            "ownerReferences": [{**owner, "kind": "ReplicaSet", "name": "web-rs", "uid": "rs-uid"}],
        },
        "spec": {"containers": [{"name": "app"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "app", "ready": True, "state": {"running": {}}}],
        },
    }
    bodies = {
        "/apis/apps/v1/namespaces/demo/deployments/web": deployment,
        "/apis/apps/v1/namespaces/demo/replicasets/web-rs": replica_set,
        "/api/v1/namespaces/demo/pods": {"items": [pod], "metadata": {}},
    }

    def respond(request: ApiGet) -> ApiResponse:
        body = bodies.get(request.path)
        if body is None:
            return ApiResponse(status=404, body=b"{}")
        return ApiResponse(status=200, body=json.dumps(body).encode())

    return respond


def eventually(
    condition: Callable[[], bool],
    what: str = "the condition",
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> Awaitable[None]:
    """Wait, bounded by ``timeout`` seconds, until ``condition()`` holds: for what another
    thread or process does (a server's cleanup, /proc, a log), which no event announces. It
    looks every ``interval`` seconds (longer for a costly look: a ``kubectl`` call).

    In async code (trio or asyncio) it returns the wait: ``await eventually(...)``; a
    forgotten ``await`` fails the test (an un-awaited coroutine warns, and warnings are
    errors). In sync code it waits in the call, and what it returns is already done.

    Raises:
        AssertionError: naming ``what``, when ``condition`` still fails after ``timeout``.
    """
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}") from None
            time.sleep(interval)
        return _DONE
    return _eventually(condition, what, timeout, interval)


class _Done:
    """The result of a wait that already happened (in sync code): awaiting it does nothing."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield


_DONE = _Done()


async def _eventually(
    condition: Callable[[], bool], what: str, seconds: float, interval: float
) -> None:
    with anyio.move_on_after(seconds):
        while not condition():  # noqa: ASYNC110 - the condition lives in another thread
            await anyio.sleep(interval)
        return
    if not condition():
        raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")


def demo_request(*command: str, deployment: str = "web") -> ExecRequest:
    """A request of the demo workspace for ``command`` in ``deployment``."""
    return ExecRequest(workspace=DEMO, deployment=deployment, command=list(command))


async def collect_frames(session: Any, *, within: float = 30.0) -> list[ServerFrame]:
    """Every frame ``session`` (an interactive session) yields until it ends, in order.

    Raises:
        TimeoutError: the session did not end within ``within`` seconds.
    """
    with anyio.fail_after(within):
        return [frame async for frame in session]


def output_of(frames: list[ServerFrame], kind: type[Stdout] | type[Stderr] | None = None) -> bytes:
    """The bytes of ``frames``' output of ``kind`` (both streams' when ``None``), in order."""
    kinds = (Stdout, Stderr) if kind is None else (kind,)
    return b"".join(frame.data for frame in frames if isinstance(frame, kinds))


def backend_for(adapter: ModuleType, sandbox: Sandbox, **options: float) -> Any:
    """The adapter's ``KubernetesBackend`` for ``sandbox`` (use it as an async context)."""
    config = adapter.ClusterConfig(sandbox.url)
    return adapter.KubernetesBackend(config, **options)


def open_fds() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


def running_tasks(anyio_backend: str) -> set[asyncio.Task[object]]:
    """The asyncio tasks alive now (trio's structured concurrency needs no such check)."""
    return asyncio.all_tasks() if anyio_backend == "asyncio" else set()
