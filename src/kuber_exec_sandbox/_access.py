"""Who is asking, and may they: impersonation headers, an RBAC-like policy and its answers.

Off by default (everything allowed, as the sandbox always was). ``sandbox.access.enforce()``
turns it on; then only what its rules allow is allowed. A rule grants ``verbs`` on a
``resource`` (``"*"``: any), optionally one ``subresource`` and one ``namespace`` (``None``: all),
to a user or a group. The caller (every connection) is :attr:`AccessPolicy.caller`, by default
user ``kuber-exec-sandbox`` in ``system:authenticated``.

Impersonation follows the API server's filter: ``Impersonate-User`` (and ``Impersonate-Group``,
``Impersonate-Extra-<key>``, repeatable) make the request act as that user, once the caller is
allowed ``impersonate`` on ``users`` (each group: ``groups``; each extra key:
``userextras/<key>``) at the cluster scope; a group or extra without a user is 400
``BadRequest``; a denial is 403 with the API server's ``Forbidden`` message. The impersonated
user is also in ``system:authenticated``. The exec itself is then authorized as that user as a
Kubernetes 1.35+ API server does it for a WebSocket upgrade: ``get`` on ``pods/exec`` (the
request's own verb), then ``create`` (observed on a real 1.37 server), and a
``SelfSubjectAccessReview`` is answered for that user from the same rules.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

import attrs

from ._discovery import group_of
from ._render import status_error

__all__ = ["AccessPolicy", "AccessRule", "UserInfo"]

JSON = dict[str, Any]
_AUTHENTICATED = "system:authenticated"


@attrs.frozen
class UserInfo:
    """An authenticated user: name, groups and extras."""

    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@attrs.frozen(kw_only=True)
class AccessRule:
    """``verbs`` on ``resource`` (and ``subresource``) in ``namespace`` (``None``: any), for
    ``user`` or ``group`` (one of them)."""

    verbs: tuple[str, ...]
    resource: str
    subresource: str | None = None
    namespace: str | None = None
    user: str | None = None
    group: str | None = None

    def applies_to(self, who: UserInfo) -> bool:
        """Whether this rule is for ``who`` (its user, or one of its groups)."""
        if self.user is not None and self.user != who.name:
            return False
        return self.group is None or self.group in who.groups

    def grants(
        self, who: UserInfo, verb: str, resource: str, subresource: str, namespace: str
    ) -> bool:
        """Whether this rule allows ``who`` to ``verb`` ``resource/subresource`` there."""
        return self.applies_to(who) and (
            (verb in self.verbs or "*" in self.verbs)
            and self.resource in (resource, "*")
            and (self.subresource or "") == subresource
            and self.namespace in (None, namespace)
        )


def forbidden_message(
    user: str, verb: str, resource: str, subresource: str, group: str, namespace: str
) -> str:
    """The authorizer's part of the API server's 403 message (``responsewriters.Forbidden``)."""
    shown = f"{resource}/{subresource}" if subresource else resource
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'User "{user}" cannot {verb} resource "{shown}" in API group "{group}" {where}'


def forbidden(
    user: str,
    verb: str,
    resource: str,
    subresource: str,
    namespace: str,
    name: str,
    *,
    group: str = "",
) -> tuple[int, JSON]:
    """The API server's 403 ``Forbidden`` Status (``apierrors.NewForbidden``)."""
    qualified = f"{resource}.{group}" if group else resource
    reason = forbidden_message(user, verb, resource, subresource, group, namespace)
    message = (
        f'{qualified} "{name}" is forbidden: {reason}'
        if name
        else (f"{qualified} is forbidden: {reason}")
    )
    details: JSON = {"name": name, "kind": resource} if name else {"kind": resource}
    if group:
        details["group"] = group
    return 403, status_error(403, "Forbidden", message, details)


class AccessPolicy:
    """The sandbox's authorizer (see the module docstring). Thread-safe: a test may change it
    while the server, on its own thread, consults it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._enforcing = False
        self._rules: list[AccessRule] = []
        self.caller = UserInfo("kuber-exec-sandbox", (_AUTHENTICATED,))
        self._exec_users: deque[str] = deque(maxlen=1000)

    @property
    def exec_users(self) -> list[str]:
        """The users each exec ran as, in order (the last 1000), for tests of impersonation."""
        with self._lock:
            return list(self._exec_users)

    @property
    def enforcing(self) -> bool:
        """Whether rules apply (``False``: everything is allowed)."""
        return self._enforcing

    def enforce(self, rules: Iterable[AccessRule] = (), *, caller: str | None = None) -> None:
        """Allow only what ``rules`` allow from now on (replacing earlier rules); ``caller``
        renames the connecting user."""
        with self._lock:
            self._enforcing = True
            self._rules = list(rules)
            if caller is not None:
                self.caller = UserInfo(caller, (_AUTHENTICATED,))

    def allow(self, rule: AccessRule) -> None:
        """Add one rule (it applies once :meth:`enforce` has been called)."""
        with self._lock:
            self._rules.append(rule)

    def reset(self) -> None:
        """Back to allowing everything, with no rules."""
        with self._lock:
            self._enforcing = False
            self._rules = []
            self.caller = UserInfo("kuber-exec-sandbox", (_AUTHENTICATED,))
            self._exec_users.clear()

    def allows(
        self, who: UserInfo, verb: str, resource: str, subresource: str = "", namespace: str = ""
    ) -> bool:
        """Whether ``who`` may ``verb`` ``resource/subresource`` in ``namespace``."""
        with self._lock:
            if not self._enforcing:
                return True
            return any(r.grants(who, verb, resource, subresource, namespace) for r in self._rules)

    def identify(self, headers: Mapping[str, list[str]]) -> UserInfo | tuple[int, JSON]:
        """The user the request acts as (the caller, or whom it impersonates), or the 4xx
        answer: 400 for a group or extra without a user, 403 for a forbidden impersonation."""
        users = headers.get("impersonate-user", [])
        groups = tuple(g for g in headers.get("impersonate-group", []) if g)
        extras: dict[str, list[str]] = {}
        for name, values in headers.items():
            if name.startswith("impersonate-extra-"):
                key = unquote(name.removeprefix("impersonate-extra-"))
                extras.setdefault(key, []).extend(values)
        caller = self.caller
        if not users:
            if groups or extras:
                message = "requested impersonation of groups or extras without a user"
                return 400, status_error(400, "BadRequest", message)
            return caller
        if len(users) > 1 or not users[0]:
            return 400, status_error(400, "BadRequest", "only one Impersonate-User is allowed")
        user = users[0]
        checks = [("users", user)] + [("groups", g) for g in groups]
        checks += [(f"userextras/{key}", value) for key, vs in extras.items() for value in vs]
        for resource, name in checks:
            base, _, sub = resource.partition("/")
            if not self.allows(caller, "impersonate", base, sub):
                return forbidden(caller.name, "impersonate", base, sub, "", name)
        with_authenticated = groups if _AUTHENTICATED in groups else (*groups, _AUTHENTICATED)
        extra = tuple((k, tuple(v)) for k, v in sorted(extras.items()))
        return UserInfo(user, with_authenticated, extra)

    def authorize_exec(self, who: UserInfo, namespace: str, pod: str) -> tuple[int, JSON] | None:
        """``None`` when ``who`` may ``get`` and ``create`` ``pods/exec`` in ``namespace``
        (recorded), else the API server's 403 for the pod naming the first verb denied."""
        for verb in ("get", "create"):
            if not self.allows(who, verb, "pods", "exec", namespace):
                return forbidden(who.name, verb, "pods", "exec", namespace, pod)
        with self._lock:
            self._exec_users.append(who.name)
        return None

    def authorize_attach(self, who: UserInfo, namespace: str, pod: str) -> tuple[int, JSON] | None:
        """As :meth:`authorize_exec`, for ``pods/attach`` (authorized the same way)."""
        for verb in ("get", "create"):
            if not self.allows(who, verb, "pods", "attach", namespace):
                return forbidden(who.name, verb, "pods", "attach", namespace, pod)
        return None

    def authorize_portforward(
        self, who: UserInfo, namespace: str, pod: str
    ) -> tuple[int, JSON] | None:
        """``None`` when ``who`` may ``get`` and ``create`` ``pods/portforward`` in
        ``namespace``, else the API server's 403 naming the first verb denied."""
        for verb in ("get", "create"):
            if not self.allows(who, verb, "pods", "portforward", namespace):
                return forbidden(who.name, verb, "pods", "portforward", namespace, pod)
        return None

    def review(self, who: UserInfo, body: object) -> tuple[int, JSON]:
        """Answer a ``SelfSubjectAccessReview`` (POSTed ``body``) for ``who``: 201 with its
        ``status``, or 400 when the body is not one."""
        spec = body.get("spec") if isinstance(body, dict) else None
        attributes = spec.get("resourceAttributes") if isinstance(spec, dict) else None
        if not isinstance(body, dict) or body.get("kind") != "SelfSubjectAccessReview":
            return 400, status_error(
                400, "BadRequest", "the body of the request is not a SelfSubjectAccessReview"
            )
        non_resource = spec.get("nonResourceAttributes") if isinstance(spec, dict) else None
        if isinstance(non_resource, dict) and attributes is None:
            # The policy has no non-resource rules: a URL is allowed only while not enforcing.
            return 201, self._review_answer("SelfSubjectAccessReview", spec, not self.enforcing)
        if not isinstance(attributes, dict):
            message = (
                'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                'spec.resourceAttributes: Invalid value: "null": exactly one of '
                "nonResourceAttributes or resourceAttributes must be specified"
            )
            return 422, status_error(422, "Invalid", message)
        verb = str(attributes.get("verb") or "")
        resource = str(attributes.get("resource") or "")
        subresource = str(attributes.get("subresource") or "")
        namespace = str(attributes.get("namespace") or "")
        allowed = self.allows(who, verb, resource, subresource, namespace)
        return 201, self._review_answer("SelfSubjectAccessReview", spec, allowed)

    @staticmethod
    def _review_answer(kind: str, spec: object, allowed: bool) -> JSON:
        status: JSON = {"allowed": allowed}
        if not allowed:
            status["reason"] = ""
        return {
            "kind": kind,
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def rules_review(self, who: UserInfo, body: object) -> tuple[int, JSON]:
        """Answer a ``SelfSubjectRulesReview`` (what ``kubectl auth can-i --list`` asks): 201
        with the rules that apply to ``who`` in ``spec.namespace`` (everything while not
        enforcing), or 400 when the body is not one."""
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(body, dict) or body.get("kind") != "SelfSubjectRulesReview":
            return 400, status_error(
                400, "BadRequest", "the body of the request is not a SelfSubjectRulesReview"
            )
        namespace = spec.get("namespace") if isinstance(spec, dict) else None
        if not isinstance(namespace, str) or not namespace:
            message = (
                'SelfSubjectRulesReview.authorization.k8s.io "" is invalid: '
                "spec.namespace: Required value: namespace must be specified"
            )
            return 422, status_error(422, "Invalid", message)
        with self._lock:
            enforcing, rules = self._enforcing, list(self._rules)
        resource_rules: list[JSON]
        if not enforcing:
            resource_rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
            non_resource_rules = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        else:
            resource_rules = [
                {
                    "verbs": list(rule.verbs),
                    "apiGroups": [_api_group(rule.resource)],
                    "resources": [
                        f"{rule.resource}/{rule.subresource}" if rule.subresource else rule.resource
                    ],
                }
                for rule in rules
                if rule.applies_to(who) and rule.namespace in (None, namespace)
            ]
            non_resource_rules = []
        answer: JSON = {
            "kind": "SelfSubjectRulesReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": {
                "resourceRules": resource_rules,
                "nonResourceRules": non_resource_rules,
                "incomplete": False,
            },
        }
        return 201, answer


def _api_group(resource: str) -> str:
    # The rules name no group (the sandbox serves each resource in one): the serving one.
    group = group_of(resource)
    return "*" if group is None else group
