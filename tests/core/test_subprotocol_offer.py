"""A user's subprotocol offer (issue 11, item 2): validated, kept in order, and stdin for
``execute`` only where v5 can close it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import DEFAULT_SUBPROTOCOLS, ExecError, ExecErrorCode, ExecuteRun, Subprotocol
from kuber_exec_core.validation import validate_subprotocols

offers = st.lists(st.sampled_from(Subprotocol), min_size=1, unique=True)


@given(offers, st.booleans())
def test_an_offer_keeps_its_order_by_member_or_name(offer: list[Subprotocol], names: bool) -> None:
    given_offer = [p.value for p in offer] if names else offer
    assert validate_subprotocols(given_offer) == tuple(offer)


@given(offers)
def test_execute_offers_only_v5_with_stdin(offer: list[Subprotocol]) -> None:
    assert ExecuteRun.subprotocols(stdin=False, offer=offer) == tuple(offer)
    if Subprotocol.V5 in offer:
        assert ExecuteRun.subprotocols(stdin=True, offer=offer) == (Subprotocol.V5,)
    else:
        with pytest.raises(ExecError) as caught:
            ExecuteRun.subprotocols(stdin=True, offer=offer)
        assert caught.value.code is ExecErrorCode.INVALID
        assert caught.value.message.startswith(
            "execute with stdin needs v5.channel.k8s.io (older subprotocols cannot close stdin)"
        )


def test_the_default_is_unchanged() -> None:
    assert ExecuteRun.subprotocols(stdin=False) == DEFAULT_SUBPROTOCOLS
    assert ExecuteRun.subprotocols(stdin=True) == (Subprotocol.V5,)


@pytest.mark.parametrize(
    "offer",
    [[], (), "channel.k8s.io", b"x", None, 5, ["channel.k8s.io", 1], ["v3.channel.k8s.io"]],
)
def test_bad_offers_are_invalid(offer: object) -> None:
    with pytest.raises(ExecError) as caught:
        validate_subprotocols(offer)
    assert caught.value.code is ExecErrorCode.INVALID
    assert "v5.channel.k8s.io, v4.channel.k8s.io" in caught.value.message  # names the known


def test_a_repeated_protocol_is_invalid() -> None:
    with pytest.raises(ExecError, match="offered twice"):
        validate_subprotocols([Subprotocol.LEGACY, "channel.k8s.io"])
