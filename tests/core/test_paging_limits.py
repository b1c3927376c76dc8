"""PodListing stops a server that never finishes paging (no hang, a clear EXEC_FAILED)."""

from __future__ import annotations

import json

import pytest

from kuber_exec_core import ExecError, ExecErrorCode, LabelSelector
from kuber_exec_core.kube import ApiResponse, PodListing


def _page(token: str | None) -> ApiResponse:
    metadata = {"continue": token} if token else {}
    return ApiResponse(status=200, body=json.dumps({"items": [], "metadata": metadata}).encode())


def test_a_repeated_continue_token_is_refused() -> None:
    plan = PodListing("demo", LabelSelector.from_labels({"app": "web"}))
    plan.response_received(_page("same"))
    request = plan.next_event()
    assert request is not None
    assert ("continue", "same") in request.query
    with pytest.raises(ExecError) as caught:
        plan.response_received(_page("same"))
    assert caught.value.code is ExecErrorCode.FAILED
    assert "did not finish paging after 2 pages" in caught.value.message


def test_endless_paging_stops_at_the_page_limit() -> None:
    plan = PodListing("demo", LabelSelector.from_labels({"app": "web"}))
    for page in range(1, 200):
        plan.response_received(_page(f"page-{page}"))
    assert plan.next_event() is not None
    with pytest.raises(ExecError) as caught:
        plan.response_received(_page("page-200"))
    assert "did not finish paging after 200 pages" in caught.value.message


def test_paging_that_ends_is_followed_to_the_end() -> None:
    plan = PodListing("demo", LabelSelector.from_labels({"app": "web"}))
    for page in range(1, 5):
        plan.response_received(_page(f"page-{page}"))
    plan.response_received(_page(None))
    assert plan.next_event() is None
    assert plan.result() == ()
