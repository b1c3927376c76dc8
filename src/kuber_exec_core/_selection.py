"""The seed's ``resolveTarget`` decisions as pure functions: ownership, pod filter and ranking.

Order of checks, codes and messages are the seed's, to the letter (each refusal is a
:class:`~kuber_exec_core.kube.TargetRefusal`, whose table holds its code and wording):

1. no Deployment, or one whose name differs   -> EXEC_TARGET_NOT_FOUND
2. labels ``app.kubernetes.io/managed-by=kuber`` and ``kuber.dev/workspace-uid=<uid>`` missing
                                               -> EXEC_TARGET_FORBIDDEN
3. no uid or an empty selector                 -> EXEC_TARGET_NOT_READY
4. no container named and none in the template -> EXEC_TARGET_NOT_READY
5. candidates: phase Running, not terminating, owned (ReplicaSet controller chain), named, with the
   container running; ranked ready first, then by name. None: EXEC_TARGET_NOT_FOUND when a container
   was named and an owned running pod exists, else EXEC_TARGET_NOT_READY.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._objects import Deployment, Pod
from ._request import ExecRequest
from ._rules import TargetRefusal
from ._target import ResolvedTarget

__all__ = [
    "EXEC_MANAGED_BY_LABEL",
    "EXEC_MANAGED_BY_VALUE",
    "EXEC_WORKSPACE_UID_LABEL",
    "check_deployment",
    "choose_pod",
    "rank_pods",
]

EXEC_MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
EXEC_MANAGED_BY_VALUE = "kuber"
EXEC_WORKSPACE_UID_LABEL = "kuber.dev/workspace-uid"


def check_deployment(request: ExecRequest, deployment: Deployment | None) -> str:
    """Checks 1–4 above; returns the container to use.

    Raises:
        ExecError: the seed's code and message for the first failed check.
    """
    if deployment is None or deployment.name != request.deployment:
        raise TargetRefusal.DEPLOYMENT_NOT_FOUND.error(request)
    if (
        deployment.labels.get(EXEC_MANAGED_BY_LABEL) != EXEC_MANAGED_BY_VALUE
        or deployment.labels.get(EXEC_WORKSPACE_UID_LABEL) != request.workspace.uid
    ):
        raise TargetRefusal.NOT_OWNED.error(request)
    if not deployment.uid or deployment.selector.is_empty:
        raise TargetRefusal.NO_POD_SELECTOR.error(request)
    container = request.container if request.container is not None else None
    if container is None:
        container = deployment.containers[0] if deployment.containers else None
    if not container:
        raise TargetRefusal.NO_CONTAINER.error(request)
    return container


def _is_owned_and_running(pod: Pod, deployment: Deployment) -> bool:
    return (
        pod.phase == "Running"
        and not pod.deletion_timestamp
        and pod.deployment_uid == deployment.uid
    )


def _is_ready(pod: Pod, container: str) -> bool:
    # The seed's `find(...)?.ready`: the first container of that name decides.
    for candidate in pod.containers:
        if candidate.name == container:
            return bool(candidate.ready)
    return False


def rank_pods(
    pods: Iterable[Pod], deployment: Deployment, container: str, *, avoid: str | None = None
) -> list[Pod]:
    """The candidates for ``container`` in ``deployment``, best first; the pod named ``avoid``
    (one that just failed to start a command: a stopped container in a rollout) last.

    Ties on readiness break by name in code-point order: the seed's ``localeCompare`` orders the
    characters of DNS names (``-``, ``.``, digits, lowercase letters) the same way, and code-point
    order does not depend on the machine's locale.
    """
    candidates = [
        pod
        for pod in pods
        if _is_owned_and_running(pod, deployment)
        and bool(pod.name and pod.uid)
        and any(c.name == container and c.running for c in pod.containers)
    ]
    candidates.sort(key=lambda pod: (pod.name == avoid, not _is_ready(pod, container), pod.name))
    return candidates


def choose_pod(
    request: ExecRequest,
    deployment: Deployment,
    container: str,
    pods: Iterable[Pod],
    *,
    avoid: str | None = None,
) -> ResolvedTarget:
    """Check 5 above: the best pod, as a :class:`ResolvedTarget` (``avoid``: as
    :func:`rank_pods`; still chosen when it is the only candidate).

    Raises:
        ExecError: ``EXEC_TARGET_NOT_FOUND`` or ``EXEC_TARGET_NOT_READY`` as the seed decides.
    """
    pods = list(pods)
    ranked = rank_pods(pods, deployment, container, avoid=avoid)
    if not ranked:
        # The seed's message names its requestedContainer: with a container named, that is it.
        named = request.container is not None
        if named and any(_is_owned_and_running(pod, deployment) for pod in pods):
            raise TargetRefusal.CONTAINER_NOT_FOUND.error(request)
        raise TargetRefusal.NO_RUNNING_POD.error(request)
    pod = ranked[0]
    return ResolvedTarget(
        namespace=request.workspace.project,
        deployment=deployment.name,
        deployment_uid=deployment.uid,
        pod=pod.name,
        pod_uid=pod.uid,
        container=container,
    )
