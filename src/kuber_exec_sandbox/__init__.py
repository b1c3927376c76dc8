"""The sandbox API server: a loopback Kubernetes that kuber-exec, kubectl and the official
``kubernetes`` client can exec into. Its pods run commands as local processes.

Start it with ``async with serve_sandbox() as sandbox`` (trio), ``with run_sandbox_in_thread()``
(any other code), or at a shell: ``kuber-exec sandbox`` or ``python -m kuber_exec_sandbox`` (both
are :func:`main`). See ``docs/sandbox.md``.
"""

from ._access import AccessPolicy as AccessPolicy
from ._access import AccessRule as AccessRule
from ._access import UserInfo as UserInfo
from ._cluster import DEFAULT_IMAGES as DEFAULT_IMAGES
from ._cluster import Cluster as Cluster
from ._cluster import ContainerState as ContainerState
from ._cluster import DeploymentObject as DeploymentObject
from ._cluster import EphemeralContainer as EphemeralContainer
from ._cluster import Namespace as Namespace
from ._cluster import OwnerRef as OwnerRef
from ._cluster import PodObject as PodObject
from ._cluster import PodSpec as PodSpec
from ._cluster import ReplicaSetObject as ReplicaSetObject
from ._cluster import demo_cluster as demo_cluster
from ._cluster import stable_uid as stable_uid
from ._command import main as main
from ._faults import STOPPED_CONTAINER as STOPPED_CONTAINER
from ._faults import Faults as Faults
from ._faults import Gate as Gate
from ._leases import LeaseStore as LeaseStore
from ._server import NonLoopbackError as NonLoopbackError
from ._server import Sandbox as Sandbox
from ._server import serve_sandbox as serve_sandbox
from ._server import write_kubeconfig as write_kubeconfig
from ._thread import run_sandbox_in_thread as run_sandbox_in_thread

__all__ = [
    # running it
    "NonLoopbackError",
    "Sandbox",
    "main",
    "run_sandbox_in_thread",
    "serve_sandbox",
    "write_kubeconfig",
    # the cluster model
    "Cluster",
    "ContainerState",
    "DEFAULT_IMAGES",
    "DeploymentObject",
    "EphemeralContainer",
    "Namespace",
    "OwnerRef",
    "PodObject",
    "PodSpec",
    "ReplicaSetObject",
    "demo_cluster",
    "stable_uid",
    # who may do what, and the Leases (sandbox.access, sandbox.leases)
    "AccessPolicy",
    "AccessRule",
    "LeaseStore",
    "UserInfo",
    # faults on demand (cluster.faults)
    "STOPPED_CONTAINER",
    "Faults",
    "Gate",
]
