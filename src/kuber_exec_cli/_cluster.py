"""The cluster a command talks to, as a backend: the in-process sandbox or a kubeconfig context.

Every command that reaches a cluster (``exec``, ``cp``, ``port-forward``, ``attach``, ``logs``,
``debug``) opens its backend here, from the cluster options they share
(``add_cluster_arguments``): ``--sandbox``, else ``--kubeconfig`` and ``--context``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import anyio

from kuber_exec_asyncio import ClusterConfig, KubernetesBackend

from ._sandbox import open_demo_sandbox

__all__ = ["ClusterOptions", "open_backend"]


class ClusterOptions(Protocol):
    """The cluster options of a parsed command line."""

    @property
    def sandbox(self) -> bool: ...

    @property
    def kubeconfig(self) -> str | None: ...

    @property
    def context(self) -> str | None: ...


@asynccontextmanager
async def open_backend(options: ClusterOptions) -> AsyncIterator[KubernetesBackend]:
    """A backend for the options' cluster, open for the block: the in-process sandbox (started
    for the block), or the kubeconfig's context.

    Raises (on entry):
        ExecError: the kubeconfig cannot be used (``ClusterConfig.from_kubeconfig``).
    """
    if options.sandbox:
        async with open_demo_sandbox() as url, KubernetesBackend(ClusterConfig(url)) as backend:
            yield backend
        return
    # Loading may run an exec credential plugin: keep it off the event loop.
    config = await anyio.to_thread.run_sync(
        ClusterConfig.from_kubeconfig, options.kubeconfig, options.context
    )
    async with KubernetesBackend(config) as backend:
        yield backend
