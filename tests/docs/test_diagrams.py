"""The site's diagrams are drawn from the code: the state table and the packages' imports.

``docs/hooks/diagrams.py`` writes the DOT that Graphviz renders at build time; these tests check
the DOT itself (no Graphviz needed), so a new state, transition or package dependency cannot be
left out of the pictures.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from kuber_exec_core.state import TRANSITIONS, SessionState

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "diagrams.py"


@pytest.fixture(scope="module")
def diagrams() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    spec = importlib.util.spec_from_file_location("docs_hook_diagrams", HOOK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_transition_is_an_arrow_of_the_state_diagram(diagrams: ModuleType) -> None:
    dot: str = diagrams.state_machine_dot()
    edges = {
        (source, target): label.split("\\n")
        for source, target, label in re.findall(
            r'^\s+(\w+) -> (\w+) \[label="([^"]*)"\];$', dot, re.M
        )
    }
    drawn = {
        (source, target, event) for (source, target), events in edges.items() for event in events
    }
    table = {
        (state.name, target.name, event.value) for (state, event), target in TRANSITIONS.items()
    }
    assert drawn == table
    for state in SessionState:
        assert re.search(rf'^\s+{state.name} \[label="{state.name}"\];$', dot, re.M), state


def test_the_state_machine_page_asks_for_the_drawn_diagram() -> None:
    page = (ROOT / "docs" / "state-machine.md").read_text(encoding="utf-8")
    assert "<!-- diagram: state-machine -->" in page


def test_the_architecture_picture_has_every_package_and_import(diagrams: ModuleType) -> None:
    dot: str = diagrams.architecture_dot()
    packages = {path.name for path in (ROOT / "src").iterdir() if (path / "__init__.py").is_file()}
    drawn = set(diagrams.PACKAGES)
    # Packages the picture leaves out must be deliberate: say so here.
    assert drawn <= packages
    assert {"kuber_exec_core", "kuber_exec_anyio", "kuber_exec_trio", "kuber_exec_asyncio"} <= drawn
    imports = diagrams.package_imports()
    assert ("kuber_exec_anyio", "kuber_exec_core") in imports
    for importer, imported in diagrams.reduced(imports):
        assert re.search(rf"^\s+{importer} -> {imported} \[style=dashed", dot, re.M)
