"""Small frozen snapshots of the API objects targeting needs, parsed from the API's JSON.

Parsing never raises ``KeyError``/``TypeError``: a malformed object is ``ExecError(EXEC_FAILED)``
naming the object kind and the field. Optional fields the seed treats as falsy (a missing uid, no
containers) parse to empty values so the seed's own checks give their own codes.

These parsers are the only ones: the REST plans and the watch cache build their snapshots with
them. The strings that many objects repeat (label keys and values, owner references, phases,
container names) are interned, so that a cache of thousands of pods keeps one copy of each
(benchmarks/watch_memory.py); equality is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from sys import intern
from types import MappingProxyType
from typing import Any

import attrs

from ._errors import ExecError, ExecErrorCode
from ._selector import LabelSelector

__all__ = [
    "Deployment",
    "ListPage",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodContainer",
    "PodRecord",
    "ReplicaSet",
    "load_json_object",
    "parse_deployment",
    "parse_list",
    "parse_object_meta",
    "parse_pod",
    "parse_pod_list",
    "parse_replica_set",
    "resolve_pod_owners",
]


def _frozen_labels(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class OwnerReference:
    """A ``metadata.ownerReferences`` entry."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool


@attrs.frozen(kw_only=True)
class Deployment:
    """The seed's ``ExecDeployment``: what targeting needs of a Deployment."""

    name: str
    uid: str
    labels: Mapping[str, str] = attrs.field(converter=_frozen_labels, hash=False)
    selector: LabelSelector
    containers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ReplicaSet:
    """A ReplicaSet's identity and its controller owner (the Deployment, normally)."""

    name: str
    uid: str
    controller: OwnerReference | None


@attrs.frozen(kw_only=True)
class PodContainer:
    """The seed's ``ExecPodContainer``: a container's name and state."""

    name: str
    running: bool
    ready: bool | None = None


@attrs.frozen(kw_only=True)
class Pod:
    """The seed's ``ExecPod``: ``deployment_uid`` is resolved through the ReplicaSet owner."""

    name: str
    uid: str
    deployment_uid: str | None
    phase: str | None = None
    deletion_timestamp: str | None = None
    containers: tuple[PodContainer, ...] = ()


@attrs.frozen(kw_only=True)
class PodRecord:
    """A Pod as listed, before its owning Deployment is known."""

    name: str
    uid: str
    labels: Mapping[str, str] = attrs.field(converter=_frozen_labels, hash=False)
    controller: OwnerReference | None
    phase: str | None
    deletion_timestamp: str | None
    containers: tuple[PodContainer, ...]

    def with_deployment_uid(self, deployment_uid: str | None) -> Pod:
        """The seed's ``ExecPod`` for this record."""
        return Pod(
            name=self.name,
            uid=self.uid,
            deployment_uid=deployment_uid,
            phase=self.phase,
            deletion_timestamp=self.deletion_timestamp,
            containers=self.containers,
        )


class _Fields:
    """Typed access into one JSON object, with error messages that name the path."""

    def __init__(self, value: object, kind: str, path: str = "") -> None:
        if not isinstance(value, dict):
            raise _malformed(kind, path or "the object", "is not an object")
        self._value: dict[str, Any] = value
        self._kind = kind
        self._path = path

    def _where(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def child(self, key: str) -> _Fields:
        value = self._value.get(key)
        return _Fields({} if value is None else value, self._kind, self._where(key))

    def text(self, key: str) -> str | None:
        value = self._value.get(key)
        if value is None or isinstance(value, str):
            return value
        raise _malformed(self._kind, self._where(key), "is not a string")

    def flag(self, key: str) -> bool | None:
        value = self._value.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise _malformed(self._kind, self._where(key), "is not a boolean")

    def items(self, key: str) -> list[_Fields]:
        value = self._value.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise _malformed(self._kind, self._where(key), "is not a list")
        return [
            _Fields(item, self._kind, f"{self._where(key)}[{i}]") for i, item in enumerate(value)
        ]

    def labels(self, key: str) -> dict[str, str]:
        """A map of strings, keys and values interned."""
        value = self._value.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise _malformed(self._kind, self._where(key), "is not a map of strings")
        return {intern(k): intern(v) for k, v in value.items()}

    def shared_text(self, key: str) -> str | None:
        """:meth:`text`, interned: for strings that many objects repeat."""
        value = self.text(key)
        return None if value is None else intern(value)

    def raw(self, key: str) -> object:
        return self._value.get(key)


def _malformed(kind: str, where: str, problem: str) -> ExecError:
    return ExecError(
        ExecErrorCode.FAILED, f"The Kubernetes API returned a malformed {kind}: {where} {problem}"
    )


def load_json_object(body: bytes | str, kind: str) -> dict[str, Any]:
    """Decode an API response body that must be a JSON object.

    Raises:
        ExecError: ``EXEC_FAILED`` when it is not JSON or not an object.
    """
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise _malformed(kind, "the response", "is not JSON") from None
    if not isinstance(value, dict):
        raise _malformed(kind, "the response", "is not an object")
    return value


def _owner_references(metadata: _Fields) -> OwnerReference | None:
    """The controller owner reference (``controller: true``), if any."""
    for reference in metadata.items("ownerReferences"):
        if reference.flag("controller"):
            # Interned: every pod of a ReplicaSet names the same owner.
            return OwnerReference(
                api_version=reference.shared_text("apiVersion") or "",
                kind=reference.shared_text("kind") or "",
                name=reference.shared_text("name") or "",
                uid=reference.shared_text("uid") or "",
                controller=True,
            )
    return None


def parse_deployment(value: object) -> Deployment:
    """An ``apps/v1`` Deployment object as the API returns it."""
    root = _Fields(value, "Deployment")
    metadata = root.child("metadata")
    spec = root.child("spec")
    try:
        selector = LabelSelector.from_spec(spec.raw("selector"))
    except ExecError as error:
        raise _malformed("Deployment", "spec.selector", f"is invalid ({error.message})") from None
    containers = spec.child("template").child("spec").items("containers")
    return Deployment(
        name=metadata.text("name") or "",
        uid=metadata.text("uid") or "",
        labels=metadata.labels("labels"),
        selector=selector,
        containers=tuple(name for c in containers if (name := c.text("name"))),
    )


def parse_replica_set(value: object) -> ReplicaSet:
    """An ``apps/v1`` ReplicaSet object as the API returns it."""
    metadata = _Fields(value, "ReplicaSet").child("metadata")
    return ReplicaSet(
        name=metadata.text("name") or "",
        uid=metadata.text("uid") or "",
        controller=_owner_references(metadata),
    )


def parse_pod(value: object) -> PodRecord:
    """A ``v1`` Pod object as the API returns it."""
    root = _Fields(value, "Pod")
    metadata = root.child("metadata")
    status = root.child("status")
    statuses = {
        name: entry for entry in status.items("containerStatuses") if (name := entry.text("name"))
    }
    containers = []
    for spec_container in root.child("spec").items("containers"):
        name = spec_container.text("name")
        if not name:
            continue
        entry = statuses.get(name)
        running = entry is not None and isinstance(entry.child("state").raw("running"), dict)
        ready = entry.flag("ready") if entry is not None else None
        containers.append(PodContainer(name=intern(name), running=running, ready=ready))
    return PodRecord(
        name=metadata.text("name") or "",
        uid=metadata.text("uid") or "",
        labels=metadata.labels("labels"),
        controller=_owner_references(metadata),
        phase=status.shared_text("phase"),
        deletion_timestamp=metadata.text("deletionTimestamp"),
        containers=tuple(containers),
    )


@attrs.frozen(kw_only=True)
class ObjectMeta:
    """What every object's ``metadata`` says of its identity and version (``""`` when absent)."""

    name: str
    uid: str
    resource_version: str


def parse_object_meta(value: object, kind: str) -> ObjectMeta:
    """The ``metadata`` of an object of ``kind`` (for messages) as the API returns it."""
    metadata = _Fields(value, kind).child("metadata")
    return ObjectMeta(
        name=metadata.text("name") or "",
        uid=metadata.text("uid") or "",
        resource_version=metadata.text("resourceVersion") or "",
    )


@attrs.frozen(kw_only=True)
class ListPage:
    """One page of a LIST: its raw items, and its ``metadata`` (``None`` when absent or empty)."""

    items: tuple[object, ...]
    resource_version: str | None
    continue_token: str | None


def parse_list(value: object, kind: str) -> ListPage:
    """A LIST answer (``kind`` is ``PodList``, for messages); the items are left to their parser."""
    root = _Fields(value, kind)
    items = root.raw("items")
    if items is not None and not isinstance(items, list):
        raise _malformed(kind, "items", "is not a list")
    metadata = root.child("metadata")
    return ListPage(
        items=tuple(items or ()),
        resource_version=metadata.text("resourceVersion") or None,
        continue_token=metadata.text("continue") or None,
    )


def parse_pod_list(value: object) -> tuple[list[PodRecord], str | None]:
    """A ``PodList``: its items and the ``metadata.continue`` token (``None`` when complete)."""
    page = parse_list(value, "PodList")
    return [parse_pod(item) for item in page.items], page.continue_token


def resolve_pod_owners(
    records: Iterable[PodRecord], replica_sets: Mapping[str, ReplicaSet]
) -> tuple[Pod, ...]:
    """Attach each pod's owning Deployment uid, or ``None`` when it has none.

    A pod is owned by Deployment D only through its *controller* reference to a ReplicaSet (same
    name **and** uid as the ReplicaSet in ``replica_sets``) whose own controller reference is a
    Deployment: a bare pod, a pod of another controller kind, or a pod whose ReplicaSet was
    replaced or belongs elsewhere gets no uid of D.
    """
    pods = []
    for record in records:
        pods.append(record.with_deployment_uid(_deployment_uid_of(record, replica_sets)))
    return tuple(pods)


def _deployment_uid_of(record: PodRecord, replica_sets: Mapping[str, ReplicaSet]) -> str | None:
    owner = record.controller
    if owner is None or owner.kind != "ReplicaSet" or owner.api_version != "apps/v1":
        return None
    replica_set = replica_sets.get(owner.name)
    if replica_set is None or not replica_set.uid or replica_set.uid != owner.uid:
        return None
    deployment = replica_set.controller
    if deployment is None or deployment.kind != "Deployment" or deployment.api_version != "apps/v1":
        return None
    return deployment.uid or None
