"""The sandbox's write APIs for platforms: Leases and SelfSubjectAccessReviews, over REST.

``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`` (GET, LIST, POST, PUT,
DELETE: :mod:`._leases`) and ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews``
(:mod:`._access`). Lease calls are authorized for the requesting user (verbs ``get``, ``list``,
``create``, ``update``, ``delete`` on ``leases``) once the policy is enforced; a review is always
allowed, as on the API server. A pure function of the stores and one request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ._access import AccessPolicy, UserInfo, forbidden
from ._leases import GROUP, LeaseStore
from ._rest import RestResponse, json_response, status_response

__all__ = ["handle_platform"]

_LEASES = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?")
_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _decode(body: bytes) -> object:
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeError):
        return ...


def _not_allowed() -> RestResponse:
    return status_response(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def handle_platform(
    method: str,
    path: str,
    body: bytes,
    who: UserInfo,
    *,
    leases: LeaseStore,
    access: AccessPolicy,
    query: Sequence[tuple[str, str]] = (),
) -> RestResponse | None:
    """The answer for a Lease or review request, ``None`` for any other path."""
    if path == _REVIEWS:
        if method != "POST":
            return _not_allowed()
        decoded = _decode(body)
        if decoded is ...:
            return status_response(400, "BadRequest", "the request body is not JSON")
        status, answer = access.review(who, decoded)
        return json_response(answer, status)
    match = _LEASES.fullmatch(path)
    if match is None:
        return None
    namespace, name = match.group(1), match.group(2)
    if name is None:
        verb = {"GET": "list", "HEAD": "list", "POST": "create"}.get(method)
    else:
        verb = {"GET": "get", "HEAD": "get", "PUT": "update", "DELETE": "delete"}.get(method)
    if verb is None:
        return _not_allowed()
    if not access.allows(who, verb, "leases", "", namespace):
        status, denial = forbidden(who.name, verb, "leases", "", namespace, name or "", group=GROUP)
        return json_response(denial, status)
    decoded = _decode(body)
    if decoded is ...:
        return status_response(400, "BadRequest", "the request body is not JSON")
    if verb == "list":
        selector = next((value for key, value in query if key == "labelSelector"), "")
        status, answer = leases.list(namespace, selector)
    elif verb == "create":
        status, answer = leases.create(namespace, decoded)
    else:
        assert name is not None
        if verb == "get":
            status, answer = leases.get(namespace, name)
        elif verb == "update":
            status, answer = leases.update(namespace, name, decoded)
        else:
            status, answer = leases.delete(namespace, name, decoded)
    return json_response(answer, status)
