"""The sandbox's write APIs for platforms: Leases and self-subject reviews, over REST.

``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]`` (GET, LIST, POST, PUT,
DELETE: :mod:`._leases`) and ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews``
and ``.../selfsubjectrulesreviews`` (:mod:`._access`). Lease calls are authorized for the
requesting user (verbs ``get``, ``list``, ``create``, ``update``, ``delete`` on ``leases``) once
the policy is enforced; a review is always allowed, as on the API server. Bodies are JSON; the
reviews may also be protobuf (what kubectl sends: :mod:`._protobuf`); another media type is the
API server's 415 ``UnsupportedMediaType``. A pure function of the stores and one request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ._access import AccessPolicy, UserInfo, forbidden
from ._leases import GROUP, LeaseStore
from ._protobuf import ProtobufError, decode_review
from ._rest import RestResponse, is_watch, json_response, status_response

__all__ = ["handle_platform"]

_LEASES = re.compile(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?")
# Path -> whether it is the access review (True) or the rules review (False).
_REVIEWS = {
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews": True,
    "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews": False,
}
_PROTOBUF = "application/vnd.kubernetes.protobuf"


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def _decode(body: bytes, content_type: str, *, protobuf: bool = False) -> object:
    """The body as JSON values, or the error answer: 415 for a media type not read here (the
    API server's Status, naming those that are), 400 for a body that is not what it says.
    An empty body is ``None`` whatever its type; a missing type is read as JSON."""
    if not body:
        return None
    media = _media_type(content_type)
    if protobuf and media == _PROTOBUF:
        try:
            return decode_review(body)
        except ProtobufError as error:
            return status_response(400, "BadRequest", f"the request body is not valid: {error}")
    if media not in ("", "application/json"):
        accepted = ", ".join(["application/json", *([_PROTOBUF] if protobuf else [])])
        message = (
            "the body of the request was in an unknown format - accepted media types include: "
            + accepted
        )
        return status_response(415, "UnsupportedMediaType", message)
    try:
        return json.loads(body)
    except (ValueError, UnicodeError):
        return status_response(400, "BadRequest", "the request body is not JSON")


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
    content_type: str = "application/json",
) -> RestResponse | None:
    """The answer for a Lease or review request, ``None`` for any other path."""
    review = _REVIEWS.get(path)
    if review is not None:
        if method != "POST":
            return _not_allowed()
        decoded = _decode(body, content_type, protobuf=True)
        if isinstance(decoded, RestResponse):
            return decoded
        status, answer = (access.review if review else access.rules_review)(who, decoded)
        return json_response(answer, status)
    match = _LEASES.fullmatch(path)
    if match is None:
        return None
    namespace, name = match.group(1), match.group(2)
    if name is None:
        verb = {"GET": "list", "HEAD": "list", "POST": "create"}.get(method)
    else:
        verb = {"GET": "get", "HEAD": "get", "PUT": "update", "DELETE": "delete"}.get(method)
    if verb is None or (verb == "list" and is_watch(query)):
        return _not_allowed()  # Not a verb of leases in discovery (watch included).
    if not access.allows(who, verb, "leases", "", namespace):
        status, denial = forbidden(who.name, verb, "leases", "", namespace, name or "", group=GROUP)
        return json_response(denial, status)
    decoded = _decode(body, content_type)
    if isinstance(decoded, RestResponse):
        return decoded
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
