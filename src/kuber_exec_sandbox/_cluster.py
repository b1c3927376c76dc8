"""The sandbox's cluster model: namespaces, Deployments, ReplicaSets and Pods, built in code.

Objects are plain mutable attrs classes so a test can flip a pod's readiness or phase between
requests. Uids are stable: derived from kind, namespace and name (UUIDv5) unless given, so the
same cluster built twice has the same uids. Names of generated ReplicaSets and pods are stable too.
The server reads the model on every request (no caching), on the trio thread that serves it.

Watches (``?watch=1``) see changes through :class:`Cluster`'s change signal: every helper here
(``add_*``, :meth:`Cluster.delete_pod`, :meth:`Cluster.end_pod`, :meth:`Cluster.scale_deployment`,
:meth:`Cluster.compact`) and :meth:`Cluster.touch` signal one; after mutating objects directly
while watches are open, do it inside ``with cluster.changing():``, which holds the model's lock
(the server renders under it, on its own thread) and signals on the way out.

``Cluster.faults`` arms faults on demand (:class:`~kuber_exec_sandbox.Faults`).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import attrs

from kuber_exec_core import EXEC_MANAGED_BY_LABEL, EXEC_MANAGED_BY_VALUE, EXEC_WORKSPACE_UID_LABEL

from ._faults import Faults

__all__ = [
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
]

#: Node every scheduled sandbox pod claims to run on.
SANDBOX_NODE = "sandbox-node"
# The alphabet Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
P = ParamSpec("P")
R = TypeVar("R")


def stable_uid(kind: str, namespace: str, name: str) -> str:
    """A UUID-shaped uid that depends only on the object's kind, namespace and name."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kuber-exec-sandbox:{kind}/{namespace}/{name}"))


def _suffix(seed: str, length: int) -> str:
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return "".join(_SUFFIX_ALPHABET[byte % len(_SUFFIX_ALPHABET)] for byte in digest[:length])


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    # The add_* helpers change the model under its lock: the server may be rendering it.
    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        cluster = args[0]
        assert isinstance(cluster, Cluster)
        with cluster.lock:
            return method(*args, **kwargs)

    return wrapper


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.frozen(kw_only=True)
class OwnerRef:
    """A ``metadata.ownerReferences`` entry (the sandbox only writes controller references)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = True


#: The images a sandbox node "has" (image -> its default command): an ephemeral container of
#: any other image waits with ``ErrImageNeverPull`` or ``ImagePullBackOff`` (``Cluster.images``).
DEFAULT_IMAGES: Mapping[str, tuple[str, ...]] = {
    "busybox": ("sh",),
    "busybox:latest": ("sh",),
    "busybox:1.36": ("sh",),
    "sandbox.local/shell:latest": ("sh",),
}


@attrs.define(kw_only=True)
class ContainerState:
    """One container of a pod: its name, whether it runs, whether it is ready.

    ``command`` is the container's main process (PID 1), run by the sandbox from the moment the
    pod is served (its output is the container's log; ``attach`` binds to it); empty: a quiet
    container with nothing to attach to and an empty log. ``stdin`` and ``tty`` are the spec's:
    attach refuses stdin (and a TTY) that the container was not created with, as a runtime does.
    ``exit_code`` is set once the main process has ended (the container is then not running).
    """

    name: str
    running: bool = True
    ready: bool = True
    restart_count: int = 0
    command: tuple[str, ...] = ()
    stdin: bool = False
    tty: bool = False
    exit_code: int | None = None


@attrs.define(kw_only=True)
class EphemeralContainer:
    """An ephemeral (debug) container added through ``pods/{name}/ephemeralcontainers``.

    ``state`` is ``"waiting"`` (``reason``/``message``: why, e.g. ``ErrImageNeverPull``),
    ``"running"`` or ``"terminated"`` (``exit_code``, ``reason``). ``user`` is the uid its
    security context asks for (``runAsUser``; ``0`` when it asks for none: root), recorded as a
    runtime would run it; the sandbox runs every process as its own user. ``spec`` is the
    container as it was written (rendered back verbatim in ``spec.ephemeralContainers``).
    """

    name: str
    image: str
    command: tuple[str, ...]
    stdin: bool
    tty: bool
    target: str | None
    user: int
    spec: dict[str, object]
    env: dict[str, str] = attrs.field(factory=dict)
    state: str = "waiting"
    reason: str | None = "ContainerCreating"
    message: str | None = None
    exit_code: int | None = None


@attrs.frozen(kw_only=True)
class PodSpec:
    """What a test wants of one pod of a Deployment (see :meth:`Cluster.add_deployment`).

    ``ready`` sets every container's readiness; ``running`` whether the containers run (a pod
    with stopped containers keeps its ``phase``); ``terminating`` sets a ``deletionTimestamp``.
    ``name`` overrides the generated ``<replicaset>-<suffix>`` name. ``shell=False`` is an
    image without a shell (distroless): an exec of ``/bin/sh`` or ``sh`` there fails as the
    runtime's exec(2) would.
    """

    name: str | None = None
    ready: bool = True
    running: bool = True
    phase: str = "Running"
    terminating: bool = False
    scheduled: bool = True
    env: Mapping[str, str] = attrs.field(factory=dict)
    labels: Mapping[str, str] = attrs.field(factory=dict)
    shell: bool = True
    #: Every container's main process, and whether it was created with stdin and a TTY.
    command: Sequence[str] = ()
    stdin: bool = False
    tty: bool = False


@attrs.define(kw_only=True)
class PodObject:
    """A pod. ``env`` is added to every command run in it (after ``HOSTNAME``)."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    owner: OwnerRef | None
    phase: str
    containers: list[ContainerState]
    deletion_timestamp: str | None = None
    node_name: str | None = SANDBOX_NODE
    env: dict[str, str] = attrs.field(factory=dict)
    creation_timestamp: str = attrs.field(factory=_now)
    #: Whether the image has a shell (``PodSpec.shell``).
    shell: bool = True
    #: Ephemeral containers, in the order they were added (they can never be removed).
    ephemeral: list[EphemeralContainer] = attrs.field(factory=list)
    #: The pod's listening ports for port-forward: container port -> the loopback ``(host,
    #: port)`` that answers for it (two pods may map the same container port).
    ports: dict[int, tuple[str, int]] = attrs.field(factory=dict)

    @property
    def ready(self) -> bool:
        """The pod's Ready condition: running phase, and every container running and ready."""
        return self.phase == "Running" and all(c.running and c.ready for c in self.containers)

    def container(self, name: str) -> ContainerState | None:
        """The container called ``name``, if the pod has one."""
        return next((c for c in self.containers if c.name == name), None)

    def ephemeral_container(self, name: str) -> EphemeralContainer | None:
        """The ephemeral container called ``name``, if the pod has one."""
        return next((c for c in self.ephemeral if c.name == name), None)


@attrs.define(kw_only=True)
class ReplicaSetObject:
    """A ReplicaSet: its selector labels and the containers of its template."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    owner: OwnerRef | None
    match_labels: dict[str, str]
    containers: list[str]
    creation_timestamp: str = attrs.field(factory=_now)


@attrs.define(kw_only=True)
class DeploymentObject:
    """A Deployment: labels, ``spec.selector`` (matchLabels and matchExpressions), containers."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    match_labels: dict[str, str]
    match_expressions: list[dict[str, object]]
    template_labels: dict[str, str]
    containers: list[str]
    creation_timestamp: str = attrs.field(factory=_now)

    def owner_ref(self) -> OwnerRef:
        """The controller reference its ReplicaSets carry."""
        return OwnerRef(api_version="apps/v1", kind="Deployment", name=self.name, uid=self.uid)


@attrs.define
class Namespace:
    """The objects of one namespace, by name."""

    name: str
    deployments: dict[str, DeploymentObject] = attrs.field(factory=dict)
    replica_sets: dict[str, ReplicaSetObject] = attrs.field(factory=dict)
    pods: dict[str, PodObject] = attrs.field(factory=dict)


class Cluster:
    """A whole sandbox cluster. Build it with the ``add_*`` helpers; mutate objects freely.

    ``resource_version`` is the cluster-wide ``resourceVersion`` (an increasing integer): lists
    report it, and each object's own ``metadata.resourceVersion`` is the value it got when the
    server last saw it change. The server notices a change when it next renders the namespace:
    at every REST read of it, and for watches at every :meth:`touch` (the helpers touch). A change
    made without a touch (``changing(quiet=True)``) shows in REST reads at once and in watches
    only after such a read or the next touch: how a test makes a watch cache go stale.

    Thread-safety: the model has one lock (``lock``, re-entrant); the server holds it while it
    renders. Change the model inside :meth:`changing` while requests may be in flight.
    """

    def __init__(self) -> None:
        self.namespaces: dict[str, Namespace] = {}
        self.resource_version = 1
        #: Held by the server while it renders, and by :meth:`changing` while a test mutates.
        self.lock = threading.RLock()
        #: How many times :meth:`touch` ran: the server re-renders watched namespaces after one.
        self.changes = 0
        #: How many times :meth:`compact` ran (each expires every older resourceVersion).
        self.compactions = 0
        #: How many times :meth:`drop_watches` ran (each drops every open watch connection).
        self.watch_drops = 0
        #: Faults armed on demand (refused upgrades, dropped sessions, 410 watches, held
        #: sessions, killed commands): see :class:`~kuber_exec_sandbox.Faults`.
        self.faults = Faults()
        #: Whether ``pods/ephemeralcontainers`` is served (False: a 1.20 cluster with the
        #: ``EphemeralContainers`` feature gate off, which answers its PATCH 404).
        self.ephemeral_containers = True
        #: Images the node has, and each one's default command (see :data:`DEFAULT_IMAGES`).
        self.images: dict[str, tuple[str, ...]] = dict(DEFAULT_IMAGES)
        #: Pod Security ``enforce`` level per namespace (``privileged``, ``baseline``,
        #: ``restricted``); a namespace not listed is ``privileged`` (admits everything).
        self.pod_security: dict[str, str] = {}
        #: An admission webhook: called with (pod, ephemeral container spec) for every new
        #: ephemeral container; a string it returns refuses the PATCH with that message.
        self.admission: Callable[[PodObject, Mapping[str, object]], str | None] | None = None
        self._listeners: list[Callable[[], None]] = []

    def touch(self) -> None:
        """Record that something changed (new ``resourceVersion``) and wake the watches."""
        with self.lock:
            self.resource_version += 1
            self.changes += 1
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    @contextmanager
    def changing(self, *, quiet: bool = False) -> Iterator[Cluster]:
        """Hold the model's lock while the block mutates it, then :meth:`touch` (unless ``quiet``).

        With ``quiet=True`` open watches do not hear of the change until the namespace is next
        read over REST or something else touches the cluster (see the class docstring).
        """
        with self.lock:
            yield self
        if not quiet:
            self.touch()

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every :meth:`touch` (from the touching thread; it must not
        block). Returns the function that removes it."""
        with self.lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self.lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def compact(self) -> None:
        """Expire every resourceVersion up to now, as etcd compaction does.

        Open watches get an ``ERROR`` event with a ``410 Gone`` Status and end; a new watch from
        an older resourceVersion is answered ``410 Gone``; a LIST (then a watch from its
        resourceVersion) works as before.
        """
        with self.lock:
            self.compactions += 1
        self.touch()

    def drop_watches(self) -> None:
        """Drop every open watch connection abruptly (no end of the chunked body), as a broken
        network or a restarting API server does; watches opened afterwards are served."""
        with self.lock:
            self.watch_drops += 1
        self.touch()

    def delete_pod(self, namespace: str, name: str) -> None:
        """Remove the pod (a ``KeyError`` if there is none): watches get ``DELETED``."""
        with self.lock:
            del self.namespaces[namespace].pods[name]
        self.touch()

    def end_pod(self, namespace: str, name: str) -> int:
        """The pod goes away: every command running in it is killed (exit code 137, see
        :meth:`Faults.kill_processes`) and the pod is deleted (watches get ``DELETED``; a
        ``KeyError`` if there is no such pod). Returns how many commands were killed."""
        with self.lock:
            if name not in self.namespaces[namespace].pods:
                raise KeyError(f"no pod {namespace}/{name}")
        killed = self.faults.kill_processes(namespace, name)
        self.delete_pod(namespace, name)
        return killed

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> list[PodObject]:
        """Give the Deployment's newest ReplicaSet ``replicas`` ready pods: the surplus (last by
        name) is deleted, missing ones are added. Returns the ReplicaSet's pods, by name.

        Raises:
            KeyError: no such Deployment, or it controls no ReplicaSet.
            ValueError: ``replicas`` is negative.
        """
        if replicas < 0:
            raise ValueError("replicas must not be negative")
        with self.lock:
            ns = self.namespaces[namespace]
            deployment = ns.deployments[name]
            owned = [
                rs
                for rs in ns.replica_sets.values()
                if rs.owner is not None and rs.owner.uid == deployment.uid
            ]
            if not owned:
                raise KeyError(f"Deployment {name} controls no ReplicaSet")
            replica_set = max(owned, key=lambda rs: (rs.creation_timestamp, rs.name))
            ref = OwnerRef(
                api_version="apps/v1", kind="ReplicaSet", name=replica_set.name, uid=replica_set.uid
            )
            pods = sorted(
                (p for p in ns.pods.values() if p.owner is not None and p.owner.uid == ref.uid),
                key=lambda p: p.name,
            )
            for pod in pods[replicas:]:
                del ns.pods[pod.name]
            index = 0
            while len(pods) < replicas:
                pod_name = f"{replica_set.name}-{_suffix(f'{namespace}/{name}/scale/{index}', 5)}"
                index += 1
                if pod_name in ns.pods:
                    continue
                pods.append(
                    self.add_pod(
                        namespace,
                        pod_name,
                        owner=ref,
                        labels=dict(replica_set.match_labels),
                        containers=replica_set.containers,
                    )
                )
        self.touch()
        return sorted(pods[:replicas], key=lambda p: p.name)

    @_locked
    def namespace(self, name: str) -> Namespace:
        """The namespace ``name``, created empty when missing."""
        if name not in self.namespaces:
            self.namespaces[name] = Namespace(name)
            self.touch()
        return self.namespaces[name]

    def pod(self, namespace: str, name: str) -> PodObject | None:
        """The pod, or ``None``."""
        ns = self.namespaces.get(namespace)
        return ns.pods.get(name) if ns else None

    def deployment(self, namespace: str, name: str) -> DeploymentObject | None:
        """The Deployment, or ``None``."""
        ns = self.namespaces.get(namespace)
        return ns.deployments.get(name) if ns else None

    def pods_of(self, deployment: DeploymentObject) -> list[PodObject]:
        """The pods owned (through a ReplicaSet's controller reference) by ``deployment``."""
        ns = self.namespace(deployment.namespace)
        owned_sets = {
            rs.uid for rs in ns.replica_sets.values() if rs.owner and rs.owner.uid == deployment.uid
        }
        return [p for p in ns.pods.values() if p.owner is not None and p.owner.uid in owned_sets]

    @_locked
    def add_deployment(
        self,
        namespace: str,
        name: str,
        *,
        workspace_uid: str | None,
        pods: Sequence[PodSpec] = (PodSpec(),),
        containers: Sequence[str] = ("app",),
        labels: Mapping[str, str] | None = None,
        managed_by: str | None = EXEC_MANAGED_BY_VALUE,
        match_labels: Mapping[str, str] | None = None,
        match_expressions: Iterable[Mapping[str, object]] = (),
        uid: str | None = None,
    ) -> DeploymentObject:
        """Add a Deployment with one ReplicaSet it controls and one pod per ``pods`` entry.

        Labels: ``app=<name>`` plus the kuber ownership labels (``managed_by`` and
        ``workspace_uid``; ``None`` leaves a label out), plus ``labels``. The selector is
        ``match_labels`` (default ``{"app": name}``) and ``match_expressions``; pods get the
        selector's labels, ``pod-template-hash`` and their spec's ``labels``.
        """
        ns = self.namespace(namespace)
        deployment_labels = {"app": name}
        if managed_by is not None:
            deployment_labels[EXEC_MANAGED_BY_LABEL] = managed_by
        if workspace_uid is not None:
            deployment_labels[EXEC_WORKSPACE_UID_LABEL] = workspace_uid
        deployment_labels.update(labels or {})
        selector = dict(match_labels) if match_labels is not None else {"app": name}
        deployment = DeploymentObject(
            namespace=namespace,
            name=name,
            uid=uid or stable_uid("Deployment", namespace, name),
            labels=deployment_labels,
            match_labels=selector,
            match_expressions=[dict(e) for e in match_expressions],
            template_labels=dict(selector),
            containers=list(containers),
        )
        ns.deployments[name] = deployment
        self.touch()
        template_hash = _suffix(f"{namespace}/{name}/{deployment.uid}", 10)
        self.add_replica_set(
            namespace,
            f"{name}-{template_hash}",
            owner=deployment.owner_ref(),
            labels={**selector, "pod-template-hash": template_hash},
            containers=containers,
            pods=pods,
        )
        return deployment

    @_locked
    def add_replica_set(
        self,
        namespace: str,
        name: str,
        *,
        owner: OwnerRef | None,
        labels: Mapping[str, str],
        containers: Sequence[str] = ("app",),
        pods: Sequence[PodSpec] = (),
    ) -> ReplicaSetObject:
        """Add a ReplicaSet (controlled by ``owner``) and its pods, labelled with ``labels``."""
        ns = self.namespace(namespace)
        replica_set = ReplicaSetObject(
            namespace=namespace,
            name=name,
            uid=stable_uid("ReplicaSet", namespace, name),
            labels=dict(labels),
            owner=owner,
            match_labels=dict(labels),
            containers=list(containers),
        )
        ns.replica_sets[name] = replica_set
        self.touch()
        rs_ref = OwnerRef(api_version="apps/v1", kind="ReplicaSet", name=name, uid=replica_set.uid)
        for index, spec in enumerate(pods):
            pod_name = spec.name or f"{name}-{_suffix(f'{namespace}/{name}/{index}', 5)}"
            self.add_pod(
                namespace,
                pod_name,
                owner=rs_ref,
                labels={**labels, **spec.labels},
                containers=containers,
                spec=spec,
            )
        return replica_set

    @_locked
    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        owner: OwnerRef | None = None,
        labels: Mapping[str, str],
        containers: Sequence[str] = ("app",),
        spec: PodSpec = PodSpec(),
    ) -> PodObject:
        """Add one pod; with ``owner=None`` it is a bare pod (no controller)."""
        pod = PodObject(
            namespace=namespace,
            name=name,
            uid=stable_uid("Pod", namespace, name),
            labels=dict(labels),
            owner=owner,
            phase=spec.phase,
            containers=[
                ContainerState(
                    name=c,
                    running=spec.running,
                    ready=spec.ready and spec.running,
                    command=tuple(spec.command),
                    stdin=spec.stdin,
                    tty=spec.tty,
                )
                for c in containers
            ],
            deletion_timestamp=_now() if spec.terminating else None,
            node_name=SANDBOX_NODE if spec.scheduled else None,
            env=dict(spec.env),
            shell=spec.shell,
        )
        self.namespace(namespace).pods[name] = pod
        self.touch()
        return pod


def demo_cluster() -> Cluster:
    """The demo: namespace ``demo``; Deployment ``web`` of workspace ``demo-uid`` (container
    ``app``, a ready and a not-ready pod) and Deployment ``other`` of workspace ``other-uid``.
    """
    cluster = Cluster()
    cluster.add_deployment(
        "demo",
        "web",
        workspace_uid="demo-uid",
        pods=[PodSpec(ready=True), PodSpec(ready=False)],
    )
    cluster.add_deployment("demo", "other", workspace_uid="other-uid")
    return cluster
