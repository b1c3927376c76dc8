"""``coordination.k8s.io/v1`` Leases: an in-memory store with the API server's write semantics.

A pure model (no I/O, thread-safe under its own lock) answering create, get, list, update and
delete of Leases in any namespace, with the API server's rules and ``metav1.Status`` bodies:
create of an existing name is 409 ``AlreadyExists``; an update whose ``metadata.resourceVersion``
is not the stored one is 409 ``Conflict`` (an update without one is applied unconditionally, as
the API server does for an update); a delete whose ``preconditions.resourceVersion`` does not
match is 409 ``Conflict``; a missing Lease is 404 ``NotFound``. Every write bumps the store's
``resourceVersion`` (an increasing integer, as a string). The store does not expire anything: a
Lease's holder, renew time and duration are data its clients interpret (as leader election does).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from ._render import status_error

__all__ = ["GROUP", "LeaseAnswer", "LeaseStore"]

JSON = dict[str, Any]
GROUP = "coordination.k8s.io"
_QUALIFIED = f"leases.{GROUP}"

#: ``(status, body)``: what the HTTP layer sends.
LeaseAnswer = tuple[int, JSON]


def _status(code: int, reason: str, message: str, name: str) -> LeaseAnswer:
    details: JSON = {"name": name, "group": GROUP, "kind": "leases"}
    return code, status_error(code, reason, message, details)


def _not_found(name: str) -> LeaseAnswer:
    return _status(404, "NotFound", f'{_QUALIFIED} "{name}" not found', name)


def _invalid(name: str, message: str) -> LeaseAnswer:
    return _status(422, "Invalid", f'Lease.{GROUP} "{name}" is invalid: {message}', name)


def _conflict_modified(name: str) -> LeaseAnswer:
    return _status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_QUALIFIED} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        name,
    )


class LeaseStore:
    """Leases by ``(namespace, name)``; every method returns ``(status, JSON body)``."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._leases: dict[tuple[str, str], JSON] = {}
        self._version = 0
        #: Calls answered, by verb (``get``, ``list``, ``create``, ``update``, ``delete``): what
        #: the load benchmarks count.
        self.calls: Counter[str] = Counter()
        #: Writes (create, update, delete) answered with success, by Lease name.
        self.writes: Counter[str] = Counter()

    def _next_version(self) -> str:
        self._version += 1
        self._lock.notify_all()
        return str(self._version)

    def wait_until(self, predicate: Callable[[LeaseStore], bool], timeout: float = 10.0) -> bool:
        """Block until ``predicate(self)`` holds after some write (or now), at most
        ``timeout`` seconds; whether it held. For tests: call from a worker thread."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._lock.wait(remaining):
                    return predicate(self)
            return True

    def holders(self, namespace: str) -> dict[str, str | None]:
        """Each Lease name in ``namespace`` and its ``spec.holderIdentity`` (for tests)."""
        with self._lock:
            return {
                name: lease.get("spec", {}).get("holderIdentity")
                for (ns, name), lease in sorted(self._leases.items())
                if ns == namespace
            }

    def lease(self, namespace: str, name: str) -> JSON | None:
        """A copy of the stored Lease, or ``None``."""
        with self._lock:
            stored = self._leases.get((namespace, name))
            return None if stored is None else json.loads(json.dumps(stored))

    def get(self, namespace: str, name: str) -> LeaseAnswer:
        """GET one Lease."""
        self.calls["get"] += 1
        stored = self.lease(namespace, name)
        return (200, stored) if stored is not None else _not_found(name)

    def list(self, namespace: str, label_selector: str = "") -> LeaseAnswer:
        """LIST the Leases of ``namespace`` (by name), those whose labels match
        ``label_selector`` (equality terms ``key=value`` joined by commas) when one is given."""
        wanted = _equalities(label_selector)
        if wanted is None:
            return 400, status_error(
                400, "BadRequest", f"unable to parse requirement: {label_selector!r}"
            )
        with self._lock:
            self.calls["list"] += 1
            items = [
                json.loads(json.dumps(lease))
                for (ns, _name), lease in sorted(self._leases.items())
                if ns == namespace and _matches(lease, wanted)
            ]
            version = str(self._version)
        return 200, {
            "kind": "LeaseList",
            "apiVersion": f"{GROUP}/v1",
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    def create(self, namespace: str, body: object) -> LeaseAnswer:
        """POST a Lease: 201 with the stored object, 409 ``AlreadyExists`` if the name is held."""
        self.calls["create"] += 1
        checked = _checked(body, namespace)
        if isinstance(checked, tuple):
            return checked
        name = checked["metadata"]["name"]
        with self._lock:
            if (namespace, name) in self._leases:
                return _status(409, "AlreadyExists", f'{_QUALIFIED} "{name}" already exists', name)
            metadata = checked["metadata"]
            metadata.update(
                namespace=namespace,
                uid=str(uuid.uuid4()),
                resourceVersion=self._next_version(),
                creationTimestamp=_now(),
            )
            self._leases[(namespace, name)] = checked
            self.writes[name] += 1
            return 201, json.loads(json.dumps(checked))

    def update(self, namespace: str, name: str, body: object) -> LeaseAnswer:
        """PUT a Lease: 200, 404 if absent, 409 ``Conflict`` if its resourceVersion is stale."""
        self.calls["update"] += 1
        checked = _checked(body, namespace)
        if isinstance(checked, tuple):
            return checked
        if checked["metadata"]["name"] != name:
            return _status(
                400,
                "BadRequest",
                f"the name of the object ({checked['metadata']['name']}) does not match the "
                f"name on the URL ({name})",
                name,
            )
        with self._lock:
            stored = self._leases.get((namespace, name))
            if stored is None:
                return _not_found(name)
            wanted = checked["metadata"].get("resourceVersion")
            if wanted and wanted != stored["metadata"]["resourceVersion"]:
                return _conflict_modified(name)
            metadata = checked["metadata"]
            for key in ("uid", "creationTimestamp"):
                metadata[key] = stored["metadata"][key]
            metadata.update(namespace=namespace, resourceVersion=self._next_version())
            self._leases[(namespace, name)] = checked
            self.writes[name] += 1
            return 200, json.loads(json.dumps(checked))

    def delete(self, namespace: str, name: str, body: object = None) -> LeaseAnswer:
        """DELETE a Lease (``DeleteOptions`` body optional): 200 ``Success`` Status, 404 if
        absent, 409 ``Conflict`` when ``preconditions.resourceVersion`` does not match."""
        self.calls["delete"] += 1
        wanted = None
        if isinstance(body, dict):
            preconditions = body.get("preconditions") or {}
            if isinstance(preconditions, dict):
                wanted = preconditions.get("resourceVersion")
        with self._lock:
            stored = self._leases.get((namespace, name))
            if stored is None:
                return _not_found(name)
            actual = stored["metadata"]["resourceVersion"]
            if wanted and wanted != actual:
                return _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {_QUALIFIED} "{name}": the '
                    f"ResourceVersion in the precondition ({wanted}) does not match the "
                    f"ResourceVersion in record ({actual}). The object might have been modified",
                    name,
                )
            del self._leases[(namespace, name)]
            self.writes[name] += 1
            self._next_version()
            uid = stored["metadata"]["uid"]
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": GROUP, "kind": "leases", "uid": uid},
        }


def _equalities(selector: str) -> dict[str, str] | None:
    """``key=value`` terms of a label selector (``==`` too); ``None`` for any other form."""
    wanted: dict[str, str] = {}
    for term in filter(None, (part.strip() for part in selector.split(","))):
        key, equals, value = term.replace("==", "=").partition("=")
        if not equals or not key or "!" in key:
            return None
        wanted[key.strip()] = value.strip()
    return wanted


def _matches(lease: JSON, wanted: dict[str, str]) -> bool:
    labels = lease.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


def _checked(body: object, namespace: str) -> JSON | LeaseAnswer:
    """A copy of ``body`` if it is a Lease of ``namespace`` with a name, else the 4xx answer."""
    if not isinstance(body, dict) or body.get("kind") != "Lease":
        return 400, status_error(400, "BadRequest", "the body of the request is not a Lease")
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        return _invalid("", "metadata.name: Required value: name or generateName is required")
    given_namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    if given_namespace not in (None, "", namespace):
        return _status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            name,
        )
    spec = body.get("spec", {})
    duration = spec.get("leaseDurationSeconds") if isinstance(spec, dict) else None
    if duration is not None and (
        isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0
    ):
        return _invalid(
            name, f"spec.leaseDurationSeconds: Invalid value: {duration}: must be greater than 0"
        )
    copied: JSON = json.loads(json.dumps(body))
    copied["apiVersion"] = f"{GROUP}/v1"
    return copied


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
