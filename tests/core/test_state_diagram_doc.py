"""docs/state-machine.md shows the diagram generated from the state table, verbatim."""

from __future__ import annotations

from pathlib import Path

from kuber_exec_core.state import TRANSITIONS, state_diagram

PAGE = Path(__file__).parents[2] / "docs" / "state-machine.md"


def test_the_docs_page_holds_the_generated_diagram() -> None:
    assert f"```mermaid\n{state_diagram()}```" in PAGE.read_text(encoding="utf-8")


def test_the_diagram_has_one_edge_per_transition() -> None:
    edges = [line for line in state_diagram().splitlines() if ": " in line]
    assert len(edges) == len(TRANSITIONS)
