"""The Kubernetes protobuf request bodies kubectl sends to the review APIs, read into JSON form.

kubectl (client-go's typed clients) POSTs ``SelfSubjectAccessReview`` and
``SelfSubjectRulesReview`` as ``application/vnd.kubernetes.protobuf`` and does not retry in JSON
after a 415, so the sandbox reads them. The envelope: the 4 bytes ``k8s\\0``, then a
``runtime.Unknown`` message (1: ``typeMeta`` {1: apiVersion, 2: kind}, 2: ``raw``, 3:
``contentEncoding``, 4: ``contentType``), ``raw`` being the object's own message. Field numbers
(``k8s.io/api/authorization/v1/generated.proto``, checked against kubectl 1.32's bytes):

- ``SelfSubjectAccessReview``: 1 metadata, 2 spec {1 resourceAttributes {1 namespace, 2 verb,
  3 group, 4 version, 5 resource, 6 subresource, 7 name}, 2 nonResourceAttributes {1 path,
  2 verb}}, 3 status (ignored: the server writes it).
- ``SelfSubjectRulesReview``: 1 metadata, 2 spec {1 namespace}, 3 status (ignored).

Only what the sandbox answers from is read; other fields are skipped by wire type. Any malformed
input (truncated varint or length, a length past the end, a deprecated group or unknown wire
type, text that is not UTF-8) raises :class:`ProtobufError`, which
the server answers with a 400: never another exception, never more work than the body's size.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAGIC", "ProtobufError", "decode_review", "fields"]

JSON = dict[str, Any]

#: The prefix of every Kubernetes protobuf body.
MAGIC = b"k8s\x00"

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
_RESOURCE_ATTRIBUTES = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}
_NON_RESOURCE_ATTRIBUTES = {1: "path", 2: "verb"}


class ProtobufError(ValueError):
    """The body is not the protobuf message it claims to be (the message says why)."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for shift in range(_MAX_VARINT_BYTES):
        if at >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << (7 * shift)
        if not byte & 0x80:
            return value, at
    raise ProtobufError("varint longer than 10 bytes")


def fields(data: bytes) -> dict[int, list[bytes | int]]:
    """Every field of one message by number, in order (length-delimited ones as bytes).

    Raises:
        ProtobufError: the bytes are not a well-formed message.
    """
    found: dict[int, list[bytes | int]] = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: bytes | int
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _LENGTH:
            length, at = _varint(data, at)
            if length > len(data) - at:
                raise ProtobufError("a length past the end of the message")
            value, at = data[at : at + length], at + length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if size > len(data) - at:
                raise ProtobufError("a fixed-size field past the end of the message")
            value, at = int.from_bytes(data[at : at + size], "little"), at + size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        found.setdefault(number, []).append(value)
    return found


def _last(found: dict[int, list[bytes | int]], number: int) -> bytes | None:
    # Protobuf: the last occurrence of a non-repeated field wins.
    values = found.get(number)
    if not values:
        return None
    value = values[-1]
    if not isinstance(value, bytes):
        raise ProtobufError(f"field {number} is not length-delimited")
    return value


def _text(found: dict[int, list[bytes | int]], number: int) -> str:
    value = _last(found, number)
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"field {number} is not UTF-8 text") from None


def _strings(data: bytes, names: dict[int, str]) -> JSON:
    found = fields(data)
    return {name: text for number, name in names.items() if (text := _text(found, number))}


def _access_spec(spec: bytes) -> JSON:
    found = fields(spec)
    answer: JSON = {}
    resource = _last(found, 1)
    if resource is not None:
        answer["resourceAttributes"] = _strings(resource, _RESOURCE_ATTRIBUTES)
    non_resource = _last(found, 2)
    if non_resource is not None:
        answer["nonResourceAttributes"] = _strings(non_resource, _NON_RESOURCE_ATTRIBUTES)
    return answer


def _rules_spec(spec: bytes) -> JSON:
    namespace = _text(fields(spec), 1)
    return {"namespace": namespace} if namespace else {}


_KINDS = {"SelfSubjectAccessReview": _access_spec, "SelfSubjectRulesReview": _rules_spec}


def decode_review(body: bytes) -> JSON:
    """A protobuf ``SelfSubjectAccessReview`` or ``SelfSubjectRulesReview`` as its JSON form
    (``apiVersion``, ``kind``, ``spec``).

    Raises:
        ProtobufError: not the Kubernetes envelope, not one of the two kinds, or malformed.
    """
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf prefix")
    envelope = fields(body[len(MAGIC) :])
    type_meta = fields(_last(envelope, 1) or b"")
    api_version, kind = _text(type_meta, 1), _text(type_meta, 2)
    if _text(envelope, 3):
        raise ProtobufError("an encoded (compressed) body is not supported")
    decode = _KINDS.get(kind)
    if decode is None:
        raise ProtobufError(f"the body is a {kind or 'message without a kind'}, not a review")
    review = fields(_last(envelope, 2) or b"")
    return {"apiVersion": api_version, "kind": kind, "spec": decode(_last(review, 2) or b"")}
