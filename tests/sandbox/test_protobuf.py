"""The protobuf review bodies kubectl sends (``._protobuf``): its exact bytes, round trips, and
hostile bytes, which end in a ``ProtobufError`` (over HTTP: a 400), never another exception."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread
from kuber_exec_sandbox._protobuf import MAGIC, ProtobufError, decode_review

PROTOBUF = "application/vnd.kubernetes.protobuf"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
RULES = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/demo/leases"

# What kubectl 1.32 sent the sandbox (captured): `auth can-i create pods/exec`, `auth can-i get
# /healthz` and `auth can-i --list`, in namespace demo.
KUBECTL_ACCESS = (
    b"k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12@\n\x10\n\x00\x12"
    b'\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12"\n \n\x04demo\x12\x06create\x1a\x00"\x00*\x04pods2'
    b'\x00:\x04exec\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00"\x00'
)
KUBECTL_NON_RESOURCE = (
    b"k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12/\n\x10\n\x00\x12"
    b'\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12\x11\x12\x0f\n\x08/healthz\x12\x03get\x1a\x08\x08'
    b'\x00\x12\x00\x1a\x00 \x00\x1a\x00"\x00'
)
KUBECTL_RULES = (
    b"k8s\x00\n1\n\x17authorization.k8s.io/v1\x12\x16SelfSubjectRulesReview\x12 \n\x10\n\x00\x12"
    b'\x00\x1a\x00"\x00*\x002\x008\x00B\x00\x12\x06\n\x04demo\x1a\x04\x18\x00"\x00\x1a\x00"\x00'
)


def test_kubectls_bodies_decode() -> None:
    assert decode_review(KUBECTL_ACCESS) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        # `pods/exec` is TYPE/NAME to kubectl: a pod called "exec" (field 7).
        "spec": {
            "resourceAttributes": {
                "namespace": "demo",
                "verb": "create",
                "resource": "pods",
                "name": "exec",
            }
        },
    }
    assert decode_review(KUBECTL_NON_RESOURCE)["spec"] == {
        "nonResourceAttributes": {"path": "/healthz", "verb": "get"}
    }
    assert decode_review(KUBECTL_RULES)["spec"] == {"namespace": "demo"}


# -- a minimal encoder, for round trips --------------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def envelope(kind: str, raw: bytes) -> bytes:
    type_meta = field(1, b"authorization.k8s.io/v1") + field(2, kind.encode())
    return MAGIC + field(1, type_meta) + field(2, raw) + field(3, b"") + field(4, b"")


ATTRIBUTES = ["namespace", "verb", "group", "version", "resource", "subresource", "name"]
texts = st.text(st.characters(codec="utf-8"), max_size=20)
# Fields a newer client may add (any number above the ones read, any wire type).
unknown = st.lists(
    st.tuples(st.integers(8, 1000), st.one_of(st.integers(0, 2**64 - 1), st.binary(max_size=8))),
    max_size=3,
)


@given(st.dictionaries(st.sampled_from(ATTRIBUTES), texts), unknown)
def test_resource_attributes_round_trip(
    attributes: dict[str, str], extra: list[tuple[int, bytes | int]]
) -> None:
    message = b"".join(field(ATTRIBUTES.index(k) + 1, v.encode()) for k, v in attributes.items())
    message += b"".join(field(number, value) for number, value in extra)
    body = envelope("SelfSubjectAccessReview", field(1, b"") + field(2, field(1, message)))
    decoded = decode_review(body)
    assert decoded["spec"] == {"resourceAttributes": {k: v for k, v in attributes.items() if v}}


def decodes_or_refuses(body: bytes) -> None:
    """``body`` is a review, or a ProtobufError: any other exception fails the test."""
    with contextlib.suppress(ProtobufError):
        assert decode_review(body)["kind"] in ("SelfSubjectAccessReview", "SelfSubjectRulesReview")


@given(st.binary(max_size=200))
def test_hostile_bytes_are_a_protobuf_error(data: bytes) -> None:
    decodes_or_refuses(data)
    decodes_or_refuses(MAGIC + data)


@given(st.integers(0, len(KUBECTL_ACCESS) - 1), st.integers(0, 255))
def test_a_changed_or_cut_body_is_a_protobuf_error_or_a_review(at: int, byte: int) -> None:
    decodes_or_refuses(KUBECTL_ACCESS[:at] + bytes([byte]) + KUBECTL_ACCESS[at + 1 :])
    decodes_or_refuses(KUBECTL_ACCESS[:at])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{}", "the body does not start with the Kubernetes protobuf prefix"),
        (MAGIC + b"\x80", "truncated varint"),
        (MAGIC + b"\x0a\x05ab", "a length past the end of the message"),
        (MAGIC + b"\x0b", "unsupported wire type 3"),
        (MAGIC + b"\x0a" + b"\xff" * 11, "varint longer than 10 bytes"),
        (envelope("Pod", b""), "the body is a Pod, not a review"),
        (MAGIC + field(1, field(2, b"\xff")), "field 2 is not UTF-8 text"),
        (MAGIC + field(1, 7), "field 1 is not length-delimited"),
    ],
)
def test_each_malformation_is_named(body: bytes, message: str) -> None:
    with pytest.raises(ProtobufError) as raised:
        decode_review(body)
    assert str(raised.value) == message


# -- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    with (
        run_sandbox_in_thread(demo_cluster()) as sandbox,
        httpx.Client(base_url=sandbox.url) as http,
    ):
        yield sandbox, http


def post(
    http: httpx.Client, path: str, body: bytes, content_type: str = PROTOBUF
) -> httpx.Response:
    return http.post(path, content=body, headers={"Content-Type": content_type})


def test_kubectls_reviews_are_answered(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    access = post(http, REVIEWS, KUBECTL_ACCESS)
    assert access.status_code == 201
    assert access.json()["status"] == {"allowed": True}
    rules = post(http, RULES, KUBECTL_RULES)
    assert rules.status_code == 201
    assert rules.json()["status"]["incomplete"] is False


def test_a_media_type_not_read_is_the_api_servers_415(served: tuple[Sandbox, httpx.Client]) -> None:
    _, http = served
    yaml = post(http, REVIEWS, b"kind: SelfSubjectAccessReview\n", "application/yaml")
    assert yaml.status_code == 415
    assert yaml.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types "
        f"include: application/json, {PROTOBUF}",
        "reason": "UnsupportedMediaType",
        "code": 415,
    }
    # Leases are read as JSON only.
    lease = post(http, LEASES, MAGIC + b"\x0a\x00")
    assert (lease.status_code, lease.json()["message"]) == (
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json",
    )


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=100))
def test_hostile_protobuf_bodies_get_a_clean_400(
    served: tuple[Sandbox, httpx.Client], data: bytes
) -> None:
    _, http = served
    for path in (REVIEWS, RULES):
        answer = post(http, path, MAGIC + data)
        assert answer.status_code in (201, 400, 422), answer.text
        assert answer.json()["kind"] in (
            "Status",
            "SelfSubjectAccessReview",
            "SelfSubjectRulesReview",
        )
