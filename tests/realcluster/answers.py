"""The real apiserver's answers that resolution reads, reduced to their shape, and the sandbox's.

``fixture(release)`` (real_apiserver_answers.json for 1.20, real_apiserver_answers-1.37.json for
1.37) is recorded from the real cluster of that release by test_record.py
(``KUBER_REALCLUSTER_RECORD=1 make realcluster-test`` rewrites them; otherwise that test checks
the live cluster still answers the same). test_sandbox_shape.py, in the main suite, asks the
sandbox the same questions and compares with every release's answers.

A *shape* keeps, for each field path that kuber-exec's resolution reads, the JSON type found there
(``"str"``, ``"bool"``, ``"int"``, ``"dict"``, ``"list"``; lists by their first item). Status bodies
keep their whole key structure and the ``code``/``reason``/``status`` values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

#: The releases whose answers are recorded.
RELEASES: Final = ("1.20", "1.37")


def fixture(release: str) -> Path:
    """The recorded answers of ``release`` (the 1.20 file keeps its first name)."""
    suffix = "" if release == "1.20" else f"-{release}"
    return Path(__file__).with_name(f"real_apiserver_answers{suffix}.json")


# The paths resolution reads (kuber_exec_core's object parsers), per kind.
OWNER_FIELDS: Final = ["apiVersion", "kind", "name", "uid", "controller"]
PATHS: Final[dict[str, list[str]]] = {
    "Deployment": [
        "apiVersion",
        "kind",
        "metadata.name",
        "metadata.uid",
        "metadata.labels",
        "spec.selector.matchLabels",
        "spec.selector.matchExpressions[].key",
        "spec.selector.matchExpressions[].operator",
        "spec.selector.matchExpressions[].values",
        "spec.template.spec.containers[].name",
    ],
    "ReplicaSet": [
        "apiVersion",
        "kind",
        "metadata.name",
        "metadata.uid",
        *[f"metadata.ownerReferences[].{f}" for f in OWNER_FIELDS],
    ],
    "PodList": [
        "apiVersion",
        "kind",
        "metadata.resourceVersion",
        "items[].metadata.name",
        "items[].metadata.uid",
        "items[].metadata.labels",
        *[f"items[].metadata.ownerReferences[].{f}" for f in OWNER_FIELDS],
        "items[].spec.containers[].name",
        "items[].status.phase",
        "items[].status.containerStatuses[].name",
        "items[].status.containerStatuses[].ready",
        "items[].status.containerStatuses[].state.running",
    ],
}


def _type(value: Any) -> str:
    return {dict: "dict", list: "list", str: "str", bool: "bool", int: "int", float: "float"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def lookup(value: Any, path: str) -> Any:
    """The value at ``path`` (``a.b[].c``: ``[]`` takes the first item), or ``KeyError``."""
    for part in path.split("."):
        many = part.endswith("[]")
        key = part[:-2] if many else part
        if not isinstance(value, dict) or key not in value:
            raise KeyError(path)
        value = value[key]
        if many:
            if not isinstance(value, list) or not value:
                raise KeyError(path)
            value = value[0]
    return value


def shape(kind: str, body: Any) -> dict[str, str]:
    out = {}
    for path in PATHS[kind]:
        try:
            out[path] = _type(lookup(body, path))
        except KeyError:
            out[path] = "absent"
    return out


def status_shape(body: Any) -> dict[str, Any]:
    """A Status body: its keys (and details' keys), and code/reason/status."""
    return {
        "keys": sorted(body),
        "details_keys": sorted(body.get("details") or {}),
        "kind": body.get("kind"),
        "apiVersion": body.get("apiVersion"),
        "status": body.get("status"),
        "reason": body.get("reason"),
        "code": body.get("code"),
        "metadata": body.get("metadata"),
    }


# The questions: (name, path template, what kind of answer). ``{ns}`` is the namespace.
SELECTOR: Final = "app=shell,tier in (exec,debug)"
SELECTOR_QUERIES: Final = [
    "app=shell,tier in (exec,debug)",
    "app=shell,tier notin (debug),!role",
    "tier,app!=shell",
    "!tier",
    "app in (shell, impostor),role",
    "role notin (impostor)",
    "app=shell,tier=exec",
    "app==shell",
]
BAD_SELECTORS: Final = ["tier in (exec", "app=shell,,", "tier notin exec"]


def load(release: str = "1.20") -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture(release).read_text())
    return data
