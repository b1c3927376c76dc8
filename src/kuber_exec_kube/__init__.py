"""Kubernetes client plumbing shared by both adapters: cluster config and REST reads.

Runtime-neutral: httpx and anyio run on trio and on asyncio, so this code is written once.
"""

from ._config import ClusterConfig as ClusterConfig
from ._rest import RestClient as RestClient

__all__ = ["ClusterConfig", "RestClient"]
