"""Kubernetes client plumbing shared by both adapters: config, REST reads, the backend.

Runtime-neutral: httpx and anyio run on trio and on asyncio, so this code is written once.
"""

from ._backend import DEFAULT_PING_INTERVAL as DEFAULT_PING_INTERVAL
from ._backend import DEFAULT_PONG_TIMEOUT as DEFAULT_PONG_TIMEOUT
from ._backend import KubernetesBackendBase as KubernetesBackendBase
from ._config import ClusterConfig as ClusterConfig
from ._rest import RestClient as RestClient
from ._rest import describe_error as describe_error

__all__ = [
    "DEFAULT_PING_INTERVAL",
    "DEFAULT_PONG_TIMEOUT",
    "ClusterConfig",
    "KubernetesBackendBase",
    "RestClient",
    "describe_error",
]
