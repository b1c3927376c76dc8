"""The Kubernetes side of targeting: API objects, ownership and ranking, REST reads as plans.

The plans (:class:`DeploymentLookup`, :class:`PodListing`) yield :class:`ApiGet` requests from
``next_event()``, are fed :class:`ApiResponse` answers, and end with their result; any HTTP client
can perform them. The parsers turn the API's JSON into the slim frozen snapshots that
:class:`~kuber_exec_core.TargetResolution` reads. :class:`TargetRefusal` names each way targeting
refuses a request and holds its code and message.
"""

from ._exec_url import attach_path as attach_path
from ._exec_url import exec_path as exec_path
from ._exec_url import pod_path as pod_path
from ._kube_api import ApiGet as ApiGet
from ._kube_api import ApiPlan as ApiPlan
from ._kube_api import ApiResponse as ApiResponse
from ._kube_api import DeploymentLookup as DeploymentLookup
from ._kube_api import PodListing as PodListing
from ._kube_api import api_error as api_error
from ._kube_api import exec_upgrade_error as exec_upgrade_error
from ._objects import OwnerReference as OwnerReference
from ._objects import PodRecord as PodRecord
from ._objects import ReplicaSet as ReplicaSet
from ._objects import load_json_object as load_json_object
from ._objects import parse_deployment as parse_deployment
from ._objects import parse_pod as parse_pod
from ._objects import parse_pod_list as parse_pod_list
from ._objects import parse_replica_set as parse_replica_set
from ._objects import resolve_pod_owners as resolve_pod_owners
from ._resolution import ResolutionStep as ResolutionStep
from ._rules import TargetRefusal as TargetRefusal
from ._selection import check_deployment as check_deployment
from ._selection import choose_pod as choose_pod
from ._selection import rank_pods as rank_pods
from ._selector import Requirement as Requirement
from ._selector import SelectorOperator as SelectorOperator

__all__ = [
    "ApiGet",
    "ApiPlan",
    "ApiResponse",
    "DeploymentLookup",
    "OwnerReference",
    "PodListing",
    "PodRecord",
    "ReplicaSet",
    "Requirement",
    "ResolutionStep",
    "SelectorOperator",
    "TargetRefusal",
    "api_error",
    "attach_path",
    "check_deployment",
    "choose_pod",
    "exec_path",
    "exec_upgrade_error",
    "load_json_object",
    "parse_deployment",
    "parse_pod",
    "parse_pod_list",
    "parse_replica_set",
    "pod_path",
    "rank_pods",
    "resolve_pod_owners",
]
