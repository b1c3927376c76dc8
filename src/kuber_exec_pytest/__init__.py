"""kuber-exec's pytest plugin: a sandbox cluster the test shapes, a backend and an
``ExecService`` on it, for trio and asyncio tests, and faults on demand.

Installed with the package, the plugin (``kuber_exec_pytest.plugin``, entry point
``kuber_exec`` in the ``pytest11`` group) loads in every pytest run; its fixtures need the
``testing`` extra and a runtime: ``pip install 'kuber-exec[testing,trio]'`` (or ``asyncio``).
See ``docs/testing.md``.
"""

from ._sandbox import KuberSandbox as KuberSandbox
from ._target import KuberTarget as KuberTarget
from .plugin import RealCluster as RealCluster

__all__ = ["KuberSandbox", "KuberTarget", "RealCluster"]
