"""Hypothesis strategies for property-testing code that uses kuber-exec, without a cluster.

Install the ``testing`` extra (it adds ``hypothesis``). Everything here generates *inputs* together
with the answer the seed's rules give for them, worked out from how the input was built (never by
calling the code under test), so a property test can compare. The answer is structure: the code,
the rule broken (:class:`~kuber_exec_core.validation.InvalidRule`), the refusal
(:class:`~kuber_exec_core.kube.TargetRefusal`) or the target; where a message is given, it comes
from the library's own table of those rules, never from a copy of its text here.

- requests: :func:`valid_exec_requests`, :func:`invalid_exec_requests` (one broken rule each),
  :func:`exec_limits`;
- the Kubernetes API's objects: :func:`deployment_objects`, :func:`replica_set_objects`,
  :func:`pod_objects` and whole :func:`deployment_scenarios` (a Deployment, its ReplicaSets and a
  mix of owned, foreign, bare, terminating, not running and not ready pods) that can also answer
  the REST plans' GETs (:meth:`DeploymentScenario.respond`);
- label selectors: :func:`label_keys`, :func:`label_values`, :func:`label_maps`,
  :func:`label_selectors`;
- what a server sends: :func:`server_scripts` (the initial empty message, output chunks of
  arbitrary bytes, a final status, optionally cut short) and :func:`raw_server_messages` (anything
  at all, for robustness tests).

The messages are framed by the kit's own code (docs/protocol.md), not by the core's codec. Each
job is a module of its own: names and labels (``_names``), requests (``_requests``), the API's
objects and scenarios (``_objects``) and what a server sends (``_server``).
"""

from .._rules import InvalidRule as InvalidRule
from ._names import dns_labels as dns_labels
from ._names import dns_subdomains as dns_subdomains
from ._names import label_keys as label_keys
from ._names import label_maps as label_maps
from ._names import label_selectors as label_selectors
from ._names import label_values as label_values
from ._objects import MANAGED_BY_LABEL as MANAGED_BY_LABEL
from ._objects import WORKSPACE_UID_LABEL as WORKSPACE_UID_LABEL
from ._objects import DeploymentIssue as DeploymentIssue
from ._objects import DeploymentScenario as DeploymentScenario
from ._objects import PodRole as PodRole
from ._objects import deployment_object as deployment_object
from ._objects import deployment_objects as deployment_objects
from ._objects import deployment_scenarios as deployment_scenarios
from ._objects import pod_object as pod_object
from ._objects import pod_objects as pod_objects
from ._objects import replica_set_object as replica_set_object
from ._objects import replica_set_objects as replica_set_objects
from ._requests import InvalidExecRequest as InvalidExecRequest
from ._requests import command_arguments as command_arguments
from ._requests import commands as commands
from ._requests import exec_limits as exec_limits
from ._requests import invalid_exec_requests as invalid_exec_requests
from ._requests import valid_exec_requests as valid_exec_requests
from ._requests import workspace_uids as workspace_uids
from ._requests import workspaces as workspaces
from ._server import ServerScript as ServerScript
from ._server import StatusKind as StatusKind
from ._server import frame_message as frame_message
from ._server import raw_server_messages as raw_server_messages
from ._server import server_scripts as server_scripts

__all__ = [
    "MANAGED_BY_LABEL",
    "WORKSPACE_UID_LABEL",
    "DeploymentIssue",
    "DeploymentScenario",
    "InvalidExecRequest",
    "InvalidRule",
    "PodRole",
    "ServerScript",
    "StatusKind",
    "command_arguments",
    "commands",
    "deployment_object",
    "deployment_objects",
    "deployment_scenarios",
    "dns_labels",
    "dns_subdomains",
    "exec_limits",
    "frame_message",
    "invalid_exec_requests",
    "label_keys",
    "label_maps",
    "label_selectors",
    "label_values",
    "pod_object",
    "pod_objects",
    "raw_server_messages",
    "replica_set_object",
    "replica_set_objects",
    "server_scripts",
    "valid_exec_requests",
    "workspace_uids",
    "workspaces",
]
