"""Property: LIST pods with a ``labelSelector`` returns exactly what the core's matcher accepts.

Pods get random labels, the selector random requirements (every operator); the selector goes
through ``to_query`` and the HTTP query string, is parsed by the server, and the listing is
compared with the generated selector's own ``matches``.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import LabelSelector
from kuber_exec_core.kube import Requirement, SelectorOperator
from kuber_exec_sandbox import Cluster, Sandbox, run_sandbox_in_thread

KEYS = ["app", "tier", "kuber.dev/workspace-uid", "x"]
VALUES = ["a", "b", "web", "c-1"]
NAMESPACE = "prop"

labels_strategy = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    key = draw(st.sampled_from(KEYS))
    operator = draw(st.sampled_from(list(SelectorOperator)))
    if operator in (SelectorOperator.EQUALS, SelectorOperator.NOT_EQUALS):
        values = frozenset({draw(st.sampled_from(VALUES))})
    elif operator in (SelectorOperator.IN, SelectorOperator.NOT_IN):
        values = frozenset(draw(st.sets(st.sampled_from(VALUES), min_size=1)))
    else:
        values = frozenset()
    return Requirement(key, operator, values)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    with run_sandbox_in_thread(Cluster()) as sandbox, httpx.Client(base_url=sandbox.url) as http:
        yield sandbox, http


@given(
    pods=st.lists(labels_strategy, max_size=6),
    selector=st.lists(requirements(), max_size=3).map(lambda rs: LabelSelector(tuple(rs))),
)
def test_rest_listing_agrees_with_the_core_matcher(
    served: tuple[Sandbox, httpx.Client], pods: list[dict[str, str]], selector: LabelSelector
) -> None:
    sandbox, http = served
    # Requests are synchronous: nothing is being served while the model changes.
    namespace = sandbox.cluster.namespace(NAMESPACE)
    namespace.pods.clear()
    for index, labels in enumerate(pods):
        sandbox.cluster.add_pod(NAMESPACE, f"pod-{index}", labels=labels)
    response = http.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", params={"labelSelector": selector.to_query()}
    )
    assert response.status_code == 200, response.text
    listed = {item["metadata"]["name"] for item in response.json()["items"]}
    expected = {f"pod-{i}" for i, labels in enumerate(pods) if selector.matches(labels)}
    assert listed == expected
