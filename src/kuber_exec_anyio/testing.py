"""Testing kit: property-test your exec handling without a cluster or sockets, on any runtime.

:class:`MemoryBackend` is a :class:`~kuber_exec_anyio.Backend` whose REST reads are answered by a
function (for instance ``DeploymentScenario.respond`` from ``kuber_exec_core.testing``'s
``deployment_scenarios()`` strategy) and whose execs replay scripted server messages (for
instance a ``ServerScript`` from ``server_scripts()``). Plug it into ``ExecService`` and test
your own code's handling of every outcome, under trio or asyncio. The strategies themselves live
in ``kuber_exec_core.testing`` (install the ``testing`` extra for hypothesis).
"""

from ._memory import ExecCall as ExecCall
from ._memory import MemoryBackend as MemoryBackend
from ._memory import MemoryExecConnection as MemoryExecConnection

__all__ = ["ExecCall", "MemoryBackend", "MemoryExecConnection"]
