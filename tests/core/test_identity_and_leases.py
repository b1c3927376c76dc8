"""Impersonation's header-safety rules, and the Lease slot arithmetic (pure)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode, Impersonation
from kuber_exec_core.limits import (
    format_micro_time,
    is_expired,
    lease_body,
    parse_micro_time,
    slot_names,
    transitions_of,
)


@given(
    user=st.text(max_size=300),
    groups=st.lists(st.text(max_size=20), max_size=3),
    key=st.text(max_size=70),
    value=st.text(max_size=20),
)
def test_accepted_identities_make_safe_headers(
    user: str, groups: list[str], key: str, value: str
) -> None:
    refusal: ExecError | None = None
    try:
        identity = Impersonation(user, groups=groups, extras={key: value})
    except ExecError as error:
        refusal = error
    if refusal is not None:
        assert refusal.code is ExecErrorCode.INVALID
        return
    for name, text in identity.headers():
        assert name.isascii()
        assert all(0x21 <= ord(c) <= 0x7E for c in name)
        assert all(0x20 <= ord(c) <= 0x7E for c in text)
        assert text == text.strip()
        assert text
    assert identity.headers()[0] == ("Impersonate-User", user)


def test_headers_and_round_trips() -> None:
    identity = Impersonation("alice", groups=["dev", "ops"], extras={"scopes/x": ["a", "b"]})
    assert identity.headers() == [
        ("Impersonate-User", "alice"),
        ("Impersonate-Group", "dev"),
        ("Impersonate-Group", "ops"),
        ("Impersonate-Extra-scopes%2Fx", "a"),
        ("Impersonate-Extra-scopes%2Fx", "b"),
    ]
    assert attrs.evolve(identity, user="bob").extras == identity.extras
    assert "scopes" not in repr(identity)  # extras may be sensitive: not in the repr


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Impersonation(7), "on_behalf_of.user must be a string, not int"),
        (lambda: Impersonation("a", groups=["g"] * 65), "at most 64 groups"),
        (lambda: Impersonation("a", extras=["x"]), "must be a mapping"),
        (lambda: Impersonation("a", extras={"k": 5}), "must be a string or strings"),
    ],
)
def test_refusals_say_what_is_wrong(make: object, message: str) -> None:
    with pytest.raises(ExecError) as raised:
        make()  # type: ignore[operator]
    assert message in raised.value.message


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_micro_time_round_trips(seconds: float) -> None:
    text = format_micro_time(seconds)
    assert len(text) == len("2026-01-01T00:00:00.000000Z")
    parsed = parse_micro_time(text)
    assert parsed is not None
    assert abs(parsed - seconds) < 1e-5


@pytest.mark.parametrize("bad", [None, "", "yesterday", "2026-13-01T00:00:00Z", 5])
def test_unreadable_times_are_none(bad: object) -> None:
    assert parse_micro_time(bad) is None


def test_expiry_and_slot_names() -> None:
    assert slot_names("acme", 3) == ["acme-0", "acme-1", "acme-2"]
    lease = lease_body("acme-0", "r/1", 10, 1000.0)
    assert lease["spec"]["holderIdentity"] == "r/1"
    assert "resourceVersion" not in lease["metadata"]
    assert not is_expired(lease, 1009.999)
    assert is_expired(lease, 1010.0)
    released = {**lease, "spec": {**lease["spec"], "holderIdentity": ""}}
    assert is_expired(released, 1000.0)
    # Another tool's Lease without a renew time is never taken.
    foreign = {"spec": {"holderIdentity": "someone"}}
    assert not is_expired(foreign, 10**12)
    assert not is_expired({"spec": None}, 10**12)
    assert transitions_of(lease_body("x", "h", 1, 0.0, transitions=4)) == 4
    assert transitions_of({}) == 0
    update = lease_body("x", "h", 1, 5.0, resource_version="7", acquired_at=1.0)
    assert update["metadata"]["resourceVersion"] == "7"
    assert update["spec"]["acquireTime"] == format_micro_time(1.0)
