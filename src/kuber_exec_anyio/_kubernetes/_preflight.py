"""Authorization before the exec upgrade: a ``SelfSubjectAccessReview``, cached briefly.

``KubernetesBackend(config, preflight=ExecPreflight())`` asks the API server, before each exec
upgrade, whether the requester (the impersonated user when the request acts for one, else the
service) may ``create`` ``pods/exec`` in the target namespace. A denial is an
``ExecError(EXEC_TARGET_FORBIDDEN)`` naming the user, the verb, the resource and the namespace,
instead of the anonymous 403 the upgrade would get. The verb is ``create``: Kubernetes 1.35
authorizes WebSocket exec as ``create`` where older servers accepted ``get``
(kubernetes/kubernetes#134577), so a role granting only ``get`` passes an old server's upgrade
but fails this check; pass ``verb="get"`` to check what an older server enforces.

Answers (allowed or denied) are cached per (user, groups, extras, namespace, verb) for ``ttl``
seconds (default 10), at most ``max_entries`` of them (default 1024; the oldest is dropped
first), so a burst of execs by one user costs one review. A review that cannot be made (the API
is unreachable, or refuses the review itself) fails the exec with ``EXEC_FAILED``: the upgrade is
not attempted on a guess. Off by default: each uncached exec costs one more API round trip.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import anyio

from kuber_exec_core import ExecError, ExecErrorCode, Impersonation
from kuber_exec_core.kube import ApiResponse

from ._rest import RestClient

__all__ = ["DEFAULT_PREFLIGHT_TTL", "ExecPreflight"]

#: Seconds an access review's answer is reused.
DEFAULT_PREFLIGHT_TTL = 10.0
_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

_Key = tuple[str | None, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], str, str]


def _positive(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ExecError(ExecErrorCode.INVALID, f"{name} must be a positive number")


class ExecPreflight:
    """The pre-flight check (see the module docstring).

    Args:
        ttl: seconds an answer is reused (positive).
        max_entries: answers kept at most (a positive integer).
        verb: the verb checked on ``pods/exec``: ``"create"`` (Kubernetes 1.35 and later
            enforce it) or ``"get"``.

    Raises:
        ExecError: ``EXEC_INVALID`` for a bad value.
    """

    def __init__(
        self, *, ttl: float = DEFAULT_PREFLIGHT_TTL, max_entries: int = 1024, verb: str = "create"
    ) -> None:
        _positive(ttl, "ttl")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ExecError(ExecErrorCode.INVALID, "max_entries must be a positive integer")
        if verb not in ("create", "get"):
            raise ExecError(ExecErrorCode.INVALID, "verb must be 'create' or 'get'")
        self.ttl = ttl
        self.max_entries = max_entries
        self.verb = verb
        self._answers: OrderedDict[_Key, tuple[float, bool, str]] = OrderedDict()
        #: Reviews sent to the API server (cache misses), for tests and cost figures.
        self.reviews = 0

    def __repr__(self) -> str:
        return (
            f"ExecPreflight(ttl={self.ttl!r}, max_entries={self.max_entries!r}, verb={self.verb!r})"
        )

    def __len__(self) -> int:
        return len(self._answers)

    async def check(self, rest: RestClient, namespace: str, identity: Impersonation | None) -> None:
        """Return if ``identity`` (``None``: the service) may exec in ``namespace``.

        Raises:
            ExecError: ``EXEC_TARGET_FORBIDDEN`` when the review denies it, ``EXEC_FAILED`` when
                no answer could be had.
        """
        key: _Key = (
            None if identity is None else identity.user,
            () if identity is None else identity.groups,
            () if identity is None else identity.extras,
            namespace,
            self.verb,
        )
        now = anyio.current_time()
        cached = self._answers.get(key)
        if cached is not None and cached[0] > now:
            allowed, reason = cached[1], cached[2]
        else:
            allowed, reason = await self._review(rest, namespace)
            self._answers[key] = (anyio.current_time() + self.ttl, allowed, reason)
            self._answers.move_to_end(key)
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)
        if not allowed:
            who = "the service's own identity" if identity is None else f"user {identity.user!r}"
            because = f": {reason}" if reason else ""
            raise ExecError(
                ExecErrorCode.TARGET_FORBIDDEN,
                f"{who} may not {self.verb} pods/exec in namespace {namespace!r} (checked with "
                f"a SelfSubjectAccessReview for verb {self.verb!r} on resource 'pods/exec', the "
                f"verb Kubernetes 1.35 requires for WebSocket exec){because}",
            )

    async def _review(self, rest: RestClient, namespace: str) -> tuple[bool, str]:
        self.reviews += 1
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": self.verb,
                    "group": "",
                    "resource": "pods",
                    "subresource": "exec",
                }
            },
        }
        answer = await rest.send("POST", _REVIEWS, body)
        return _verdict(answer)


def _verdict(answer: ApiResponse) -> tuple[bool, str]:
    if answer.status not in (200, 201):
        raise ExecError(
            ExecErrorCode.FAILED,
            f"the exec pre-flight SelfSubjectAccessReview failed with HTTP {answer.status}",
            http_status=answer.status,
        )
    try:
        status: Any = json.loads(answer.body).get("status") or {}
        allowed = status.get("allowed") is True
        reason = status.get("reason") or ""
    except (ValueError, UnicodeError, AttributeError):
        raise ExecError(
            ExecErrorCode.FAILED, "the exec pre-flight SelfSubjectAccessReview answer is not JSON"
        ) from None
    return allowed, str(reason)[:300]
