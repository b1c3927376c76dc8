"""Testing kit for trio apps: property-test your exec handling without a cluster or sockets.

:class:`MemoryBackend` is a :class:`~kuber_exec_trio.Backend` whose REST reads are answered by a
function (for instance ``DeploymentScenario.respond`` from ``kuber_exec_core.testing``'s
``deployment_scenarios()`` strategy) and whose execs replay scripted server messages (for
instance a ``ServerScript`` from ``server_scripts()``). Plug it into ``ExecService`` and test
your own code's handling of every outcome. The strategies themselves live in
``kuber_exec_core.testing`` (install the ``testing`` extra for hypothesis).
"""

from __future__ import annotations

import trio

from kuber_exec_core import ExecCall, MemoryExecConnection
from kuber_exec_core import MemoryBackend as _MemoryBackend

__all__ = ["ExecCall", "MemoryBackend", "MemoryExecConnection"]


class MemoryBackend(_MemoryBackend):
    """The core's :class:`~kuber_exec_core.MemoryBackend`, yielding to trio's scheduler."""

    async def checkpoint(self) -> None:
        await trio.lowlevel.checkpoint()
