"""A watch cache over Deployments, ReplicaSets and Pods per namespace, answering resolution.

:class:`WatchStore` holds three :class:`~kuber_exec_core._watch.Reflector` per watched namespace
and answers the two questions target resolution asks the backend seam, ``get_deployment`` and
``list_pods``, the way the REST plans answer them (:class:`~kuber_exec_core.kube.DeploymentLookup`,
:class:`~kuber_exec_core.kube.PodListing`): the same snapshots, the same selector semantics, owners
resolved by the same :func:`resolve_pod_owners` through the ReplicaSet controller chain. So
:meth:`WatchStore.resolve_target` gives the target (or the error) a REST resolution of the same
state gives.

A namespace answers only once all three of its reflectors are synced; before that (and for a
namespace not watched) :meth:`WatchStore.resolve_target` returns ``None``: resolve over REST.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from ._errors import ExecError, ExecErrorCode
from ._jsonlines import DEFAULT_MAX_WATCH_LINE_BYTES
from ._kube_api import (
    DEFAULT_LIST_PAGE_SIZE,
    DEPLOYMENTS,
    PODS,
    REPLICA_SETS,
    ResourceKind,
    SnapshotT,
)
from ._limits import ExecLimits
from ._objects import Deployment, Pod, PodRecord, ReplicaSet, resolve_pod_owners
from ._request import ExecRequest, validate_request
from ._resolution import FetchDeployment, FetchPods, TargetResolution, TargetResolved
from ._selector import LabelSelector
from ._target import ResolvedTarget
from ._watch import Reflector, ReflectorState

__all__ = ["MAX_REMEMBERED_TARGETS", "NamespaceWatch", "WatchStore"]


#: Targets remembered per namespace (one per workspace, Deployment and container asked for);
#: past this many the memo starts afresh.
MAX_REMEMBERED_TARGETS = 1024

# What a remembered target was resolved from: the three reflectors' ``changes``.
_Revision = tuple[int, int, int]
_TargetKey = tuple[object, str, str | None]


@attrs.frozen(kw_only=True, eq=False)
class NamespaceWatch:
    """The three reflectors of one namespace; the driver runs each (see ``Reflector``)."""

    namespace: str
    deployments: Reflector[Deployment]
    replica_sets: Reflector[ReplicaSet]
    pods: Reflector[PodRecord]
    #: Resolved targets and the revision they were resolved at (see WatchStore.resolve_target).
    _targets: dict[_TargetKey, tuple[_Revision, ResolvedTarget]] = attrs.field(
        init=False, factory=dict, repr=False
    )

    @property
    def revision(self) -> _Revision:
        """Moves whenever anything the namespace answers with changes (see
        ``Reflector.changes``)."""
        return (self.deployments.changes, self.replica_sets.changes, self.pods.changes)

    @property
    def reflectors(
        self,
    ) -> tuple[Reflector[Deployment], Reflector[ReplicaSet], Reflector[PodRecord]]:
        """All three, for a driver that runs them alike."""
        return (self.deployments, self.replica_sets, self.pods)

    @property
    def synced(self) -> bool:
        """Whether all three are synced: only then does the namespace answer queries."""
        return self.deployments.synced and self.replica_sets.synced and self.pods.synced

    @property
    def watching(self) -> bool:
        """Whether all three are past their LIST (a driver can report readiness with it)."""
        return all(r.state is ReflectorState.WATCHING for r in self.reflectors)


class WatchStore:
    """Watched namespaces and their reflectors; the queries resolution needs.

    Not thread-safe, like the rest of the core: one driver (one event loop) owns it.
    """

    def __init__(self) -> None:
        self._namespaces: dict[str, NamespaceWatch] = {}

    def watch(
        self,
        namespace: str,
        *,
        page_size: int = DEFAULT_LIST_PAGE_SIZE,
        watch_timeout_seconds: int | None = None,
        max_line_bytes: int = DEFAULT_MAX_WATCH_LINE_BYTES,
    ) -> NamespaceWatch:
        """Start (or restart) watching ``namespace``: three new, unsynced reflectors.

        Restarting replaces the old reflectors; whatever the old ones are still fed goes to
        objects nothing reads any more, so a driver that is slow to stop cannot corrupt the new
        snapshot.
        """

        def reflector(kind: ResourceKind[SnapshotT]) -> Reflector[SnapshotT]:
            return Reflector(
                kind,
                namespace,
                page_size=page_size,
                watch_timeout_seconds=watch_timeout_seconds,
                max_line_bytes=max_line_bytes,
            )

        watch = NamespaceWatch(
            namespace=namespace,
            deployments=reflector(DEPLOYMENTS),
            replica_sets=reflector(REPLICA_SETS),
            pods=reflector(PODS),
        )
        self._namespaces[namespace] = watch
        return watch

    def namespace(self, namespace: str) -> NamespaceWatch | None:
        """The reflectors of ``namespace``, if it is watched."""
        return self._namespaces.get(namespace)

    def __iter__(self) -> Iterator[NamespaceWatch]:
        return iter(tuple(self._namespaces.values()))

    def __len__(self) -> int:
        return len(self._namespaces)

    def synced(self, namespace: str) -> bool:
        """Whether ``namespace`` is watched and all three of its kinds are synced."""
        watch = self._namespaces.get(namespace)
        return watch is not None and watch.synced

    def _synced(self, namespace: str) -> NamespaceWatch:
        watch = self._namespaces.get(namespace)
        if watch is None or not watch.synced:
            raise ExecError(
                ExecErrorCode.FAILED, f"The watch cache of namespace {namespace} is not synced"
            )
        return watch

    def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        """The Deployment named ``name``, or ``None``: ``DeploymentLookup``'s answer.

        Raises:
            ExecError: ``EXEC_FAILED`` when ``namespace`` is not synced (check :meth:`synced`).
        """
        return self._synced(namespace).deployments.items.get(name)

    def list_pods(self, namespace: str, selector: LabelSelector) -> tuple[Pod, ...]:
        """The pods ``selector`` matches, in name order, owners resolved: ``PodListing``'s answer.

        Ownership is :func:`resolve_pod_owners` over the namespace's ReplicaSets: the pod's
        controller reference must name a ReplicaSet present with the same uid, whose controller
        is a Deployment. (``PodListing`` only reads the ReplicaSets of running, live pods, so for
        the other pods it leaves ``deployment_uid`` ``None`` where this gives the true owner;
        resolution never reads the owner of such a pod.)

        Raises:
            ExecError: ``EXEC_FAILED`` when ``namespace`` is not synced (check :meth:`synced`).
        """
        watch = self._synced(namespace)
        pods = watch.pods.items
        # Name order is the API server's LIST order (etcd keys), so both paths feed ranking the
        # same sequence; ranking breaks its ties explicitly anyway.
        matching = sorted(name for name, pod in pods.items() if selector.matches(pod.labels))
        records = [pods[name] for name in matching]
        return resolve_pod_owners(records, watch.replica_sets.items)

    def resolve_target(self, request: ExecRequest, limits: ExecLimits) -> ResolvedTarget | None:
        """Run :class:`TargetResolution` over the cache; ``None`` when the namespace is not synced.

        The request is validated on every call; the rest of the answer (ownership, ranking) reads
        only the request's workspace, Deployment and container and the namespace's snapshots, so
        a target found is remembered under those and given again, without resolving, until any
        of the snapshots changes (``NamespaceWatch.revision``). Refusals are not remembered.

        Raises:
            ExecError: what a REST resolution of the same state raises (validation first).
        """
        validate_request(request, limits)
        watch = self._namespaces.get(request.workspace.project)
        if watch is None or not watch.synced:
            return None
        key = (request.workspace, request.deployment, request.container)
        revision = watch.revision
        remembered = watch._targets.get(key)
        if remembered is not None and remembered[0] == revision:
            return remembered[1]
        target = self._resolve(request, limits)
        if len(watch._targets) >= MAX_REMEMBERED_TARGETS:
            watch._targets.clear()
        watch._targets[key] = (revision, target)
        return target

    def _resolve(self, request: ExecRequest, limits: ExecLimits) -> ResolvedTarget:
        plan = TargetResolution(request, limits)
        while True:
            match plan.next_event():
                case FetchDeployment(namespace=namespace, name=name):
                    plan.deployment_received(self.get_deployment(namespace, name))
                case FetchPods(namespace=namespace, selector=selector):
                    plan.pods_received(self.list_pods(namespace, selector))
                case TargetResolved(target=target):
                    return target
