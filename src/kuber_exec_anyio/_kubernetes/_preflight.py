"""Authorization before the exec upgrade: ``SelfSubjectAccessReview``s, cached briefly.

``KubernetesBackend(config, preflight=ExecPreflight())`` asks the API server, before each exec
upgrade, whether the requester (the impersonated user when the request acts for one, else the
service) may exec in the target namespace, with the verbs the server will check. A denial is an
``ExecError(EXEC_TARGET_FORBIDDEN)`` naming the user, the verb, the resource and the namespace,
instead of the 403 the upgrade would get.

The verbs, in the order a server checks them, are ``get`` and ``create`` on ``pods/exec`` by
default: a WebSocket upgrade is a ``GET``, which the API server's authorization filter checks as
``get``; since Kubernetes 1.35 (gate ``AuthorizePodWebsocketUpgradeCreatePermission``, on by
default) the exec handler then also checks ``create`` (kubernetes/kubernetes#134577). Both were
observed on a real 1.37 API server: a role with only ``get`` is refused for ``create``, one with
only ``create`` is refused for ``get`` (docs/protocol.md). ``verbs=("get",)`` checks exactly what
a server before 1.35 enforces.

Answers (allowed or denied) are cached per (user, groups, extras, namespace, verb) for ``ttl``
seconds (default 10), at most ``max_entries`` of them (default 1024; the oldest is dropped
first), so a burst of execs by one user costs one review per verb. A review that cannot be made
(the API is unreachable, or refuses the review itself) fails the exec with ``EXEC_FAILED``: the
upgrade is not attempted on a guess. Off by default: each uncached exec costs one more API round
trip per verb.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import anyio

from kuber_exec_core import ExecError, ExecErrorCode, Impersonation
from kuber_exec_core.kube import ApiResponse

from ._rest import RestClient

__all__ = ["DEFAULT_PREFLIGHT_TTL", "DEFAULT_PREFLIGHT_VERBS", "ExecPreflight"]

#: Seconds an access review's answer is reused.
DEFAULT_PREFLIGHT_TTL = 10.0
#: What a Kubernetes 1.35+ API server checks for a WebSocket exec, in its order.
DEFAULT_PREFLIGHT_VERBS = ("get", "create")
_VERBS = frozenset(("get", "create"))
_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

_Key = tuple[str | None, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], str, str]


def _positive(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ExecError(ExecErrorCode.INVALID, f"{name} must be a positive number")


def _checked_verbs(verbs: object) -> tuple[str, ...]:
    if isinstance(verbs, str) or not isinstance(verbs, Sequence):
        raise ExecError(ExecErrorCode.INVALID, "verbs must be a sequence of 'get' and 'create'")
    checked = tuple(verbs)
    if not checked or any(v not in _VERBS for v in checked) or len(set(checked)) != len(checked):
        raise ExecError(
            ExecErrorCode.INVALID, "verbs must be 'get' and/or 'create', each at most once"
        )
    return checked


class ExecPreflight:
    """The pre-flight check (see the module docstring).

    Args:
        ttl: seconds an answer is reused (positive).
        max_entries: answers kept at most (a positive integer).
        verbs: the verbs checked on ``pods/exec``, in order: ``("get", "create")`` (default:
            what Kubernetes 1.35 and later enforce) or ``("get",)`` (servers before 1.35).

    Raises:
        ExecError: ``EXEC_INVALID`` for a bad value.
    """

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_PREFLIGHT_TTL,
        max_entries: int = 1024,
        verbs: Sequence[str] = DEFAULT_PREFLIGHT_VERBS,
    ) -> None:
        _positive(ttl, "ttl")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ExecError(ExecErrorCode.INVALID, "max_entries must be a positive integer")
        self.ttl = ttl
        self.max_entries = max_entries
        self.verbs = _checked_verbs(verbs)
        self._answers: OrderedDict[_Key, tuple[float, bool, str]] = OrderedDict()
        #: Reviews sent to the API server (cache misses), for tests and cost figures.
        self.reviews = 0

    def __repr__(self) -> str:
        return (
            f"ExecPreflight(ttl={self.ttl!r}, max_entries={self.max_entries!r}, "
            f"verbs={self.verbs!r})"
        )

    def __len__(self) -> int:
        return len(self._answers)

    async def check(
        self,
        rest: RestClient,
        namespace: str,
        identity: Impersonation | None,
        subresource: str = "exec",
    ) -> None:
        """Return if ``identity`` (``None``: the service) may exec in ``namespace``: every verb
        of :attr:`verbs` is allowed on ``pods/{subresource}`` (``attach`` and ``portforward``
        are authorized as exec is). The first verb denied is the one reported.

        Raises:
            ExecError: ``EXEC_TARGET_FORBIDDEN`` when a review denies it, ``EXEC_FAILED`` when
                no answer could be had.
        """
        for verb in self.verbs:
            await self._check_verb(rest, namespace, identity, verb, subresource)

    async def _check_verb(
        self,
        rest: RestClient,
        namespace: str,
        identity: Impersonation | None,
        verb: str,
        subresource: str,
    ) -> None:
        key: _Key = (
            None if identity is None else identity.user,
            () if identity is None else identity.groups,
            () if identity is None else identity.extras,
            namespace,
            verb if subresource == "exec" else f"{verb} {subresource}",
        )
        now = anyio.current_time()
        cached = self._answers.get(key)
        if cached is not None and cached[0] > now:
            allowed, reason = cached[1], cached[2]
        else:
            allowed, reason = await self._review(rest, namespace, verb, subresource)
            self._answers[key] = (anyio.current_time() + self.ttl, allowed, reason)
            self._answers.move_to_end(key)
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)
        if not allowed:
            who = "the service's own identity" if identity is None else f"user {identity.user!r}"
            because = f": {reason}" if reason else ""
            raise ExecError(
                ExecErrorCode.TARGET_FORBIDDEN,
                f"{who} may not {verb} pods/{subresource} in namespace {namespace!r} (checked "
                f"with a SelfSubjectAccessReview for verb {verb!r} on resource "
                f"'pods/{subresource}'; a WebSocket {subresource} is authorized as 'get', and "
                "since Kubernetes 1.35 as 'create' too)"
                f"{because}",
            )

    async def _review(
        self, rest: RestClient, namespace: str, verb: str, subresource: str
    ) -> tuple[bool, str]:
        self.reviews += 1
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": "",
                    "resource": "pods",
                    "subresource": subresource,
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
