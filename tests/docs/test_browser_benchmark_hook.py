"""The browser benchmark's docs table is drawn from the committed run, never copied by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "browser_benchmark.py"


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    spec = importlib.util.spec_from_file_location("docs_hook_browser_benchmark", HOOK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(describe: str, terminal: float, seconds: float | None) -> dict[str, Any]:
    return {
        "commit": {"describe": describe},
        "keys": 60,
        "baseline_ms": 8.84,
        "terminal_ms": terminal,
        "ratio": round(terminal / 8.84, 2),
        "keydown_to_send_ms": 0.9,
        "send_to_message_ms": 4.0,
        "message_to_screen_ms": None,
        "app_echo_ms": 2.04,
        "large_output_median_seconds": seconds,
    }


def test_every_tree_of_the_run_is_a_row_with_its_commit(hook: ModuleType) -> None:
    results = {
        "format": 1,
        "started": "2026-12-02T04:40:00+00:00",
        "large_output_bytes": 20_000_000,
        "machine": {
            "cpus": 2,
            "cpu_model": "Xeon",
            "load_average": 1.5,
            "chromium": "Chromium 156",
        },
        "results": {"this": _row("abc1234", 15.2, 25.0), "against": _row("def5678", 32.8, None)},
    }
    table = hook.browser_table(results).splitlines()
    assert table[2] == (
        "| this (`abc1234`) | 60 | 8.8 ms | 15.2 ms | 1.7x | 0.9 ms | 4.0 ms | - | 2.0 ms "
        "| 25.0 s (0.8 MB/s) |"
    )
    assert table[3].startswith("| against (`def5678`) | 60 | 8.8 ms | 32.8 ms | 3.7x |")
    assert table[3].endswith("| - |")
    assert "2026-12-02 04:40 UTC on 2 CPUs (Xeon, load 1.5), Chromium 156" in table[-1]


def test_the_marker_becomes_the_committed_runs_table(hook: ModuleType) -> None:
    committed = json.loads(hook.RESULTS.read_text(encoding="utf-8"))
    page = f"before\n\n{hook.MARKER}\n\nafter"
    rendered = hook.on_page_markdown(page, None, None, None)
    assert hook.MARKER not in rendered
    assert hook.browser_table(committed) in rendered
    assert hook.on_page_markdown("no marker", None, None, None) == "no marker"


def test_a_results_file_of_another_format_fails_the_build(hook: ModuleType, tmp_path: Path) -> None:
    from mkdocs.exceptions import PluginError

    path = tmp_path / "browser.json"
    path.write_text(json.dumps({"format": 99}), encoding="utf-8")
    with pytest.raises(PluginError, match="format 99"):
        hook.load_results(path)
    with pytest.raises(PluginError, match="make bench-browser"):
        hook.load_results(tmp_path / "missing.json")
