"""The benchmarks page quotes the committed results' tables, never copies of them.

``docs/hooks/benchmark_charts.py`` replaces ``<!-- results-table NAME -->`` with the table that
``benchmarks/results/NAME.json`` holds (load.py's, trio_ceiling.py's); a marker naming a missing
or malformed file fails the build (mkdocs --strict).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "benchmark_charts.py"
PAGE = ROOT / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def charts() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("matplotlib", reason="the docs extra is not installed")
    spec = importlib.util.spec_from_file_location("docs_hook_benchmark_charts", HOOK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_marker_becomes_the_table_of_its_results_file(
    charts: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "example.json").write_text(json.dumps({"table": ["a  b", "1  2"]}))
    monkeypatch.setattr(charts, "RESULTS", tmp_path / "latest.json")
    page: Any = object()
    shown = charts.on_page_markdown("before\n<!-- results-table example -->\nafter", page, {}, [])
    assert shown == "before\n```text\na  b\n1  2\n```\nafter"


@pytest.mark.parametrize("content", [None, "not json", json.dumps({"rows": []})])
def test_a_missing_or_malformed_results_file_fails_the_build(
    charts: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    from mkdocs.exceptions import PluginError

    if content is not None:
        (tmp_path / "example.json").write_text(content)
    monkeypatch.setattr(charts, "RESULTS", tmp_path / "latest.json")
    with pytest.raises(PluginError, match=r"example\.json"):
        charts.results_table("example")


def test_every_table_the_page_quotes_is_committed(charts: ModuleType) -> None:
    names = charts.RESULTS_TABLE.findall(PAGE.read_text(encoding="utf-8"))
    assert names, "docs/benchmarks.md quotes no results table"
    for name in names:
        assert charts.results_table(name).startswith("```text\n")


def test_every_marker_in_the_docs_names_a_committed_table(charts: ModuleType) -> None:
    # Any name the docs use, digits included (realcluster_1_37): one the hook's pattern missed
    # would stay an invisible HTML comment instead of its table.
    loose = re.compile(r"<!-- results-table (\S+) -->")
    found = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for name in loose.findall(page.read_text(encoding="utf-8")):
            found += 1
            assert charts.RESULTS_TABLE.fullmatch(f"<!-- results-table {name} -->"), page
            assert charts.results_table(name).startswith("```text\n"), name
    assert found >= 5
