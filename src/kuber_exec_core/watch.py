"""The watch cache's sans-IO parts: reflectors (LIST then WATCH) and the store they fill.

A :class:`Reflector` keeps one kind of object in one namespace in step with the API server;
a :class:`WatchStore` holds the three kinds resolution reads (Deployments, ReplicaSets, Pods)
per namespace and answers ``get_deployment`` / ``list_pods`` exactly as the REST reads would.
The async layer drives them (``KubernetesBackend``'s target cache).
"""

from ._jsonlines import DEFAULT_MAX_WATCH_LINE_BYTES as DEFAULT_MAX_WATCH_LINE_BYTES
from ._jsonlines import JsonLinesDecoder as JsonLinesDecoder
from ._store import NamespaceWatch as NamespaceWatch
from ._store import WatchStore as WatchStore
from ._watch import DEPLOYMENTS as DEPLOYMENTS
from ._watch import PODS as PODS
from ._watch import REPLICA_SETS as REPLICA_SETS
from ._watch import Reflector as Reflector
from ._watch import ReflectorState as ReflectorState
from ._watch import ResourceKind as ResourceKind
from ._watch import WatchRequest as WatchRequest
from ._watch import compare_resource_versions as compare_resource_versions

__all__ = [
    "DEFAULT_MAX_WATCH_LINE_BYTES",
    "DEPLOYMENTS",
    "PODS",
    "REPLICA_SETS",
    "JsonLinesDecoder",
    "NamespaceWatch",
    "Reflector",
    "ReflectorState",
    "ResourceKind",
    "WatchRequest",
    "WatchStore",
    "compare_resource_versions",
]
