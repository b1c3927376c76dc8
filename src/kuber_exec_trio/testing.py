"""Testing kit for trio apps: the runtime-neutral ``kuber_exec_anyio.testing`` kit.

See :mod:`kuber_exec_anyio.testing`; the strategies live in ``kuber_exec_core.testing``.
"""

from kuber_exec_anyio.testing import ExecCall as ExecCall
from kuber_exec_anyio.testing import MemoryBackend as MemoryBackend
from kuber_exec_anyio.testing import MemoryExecConnection as MemoryExecConnection

__all__ = ["ExecCall", "MemoryBackend", "MemoryExecConnection"]
