"""MkDocs hook: the browser terminal's keystroke table, from the committed results of a real run.

``make bench-browser`` (``benchmarks/browser_keystroke.py``) writes
``benchmarks/results/browser.json``; this hook replaces the marker ``<!-- browser-benchmark -->``
in a page with a Markdown table of its medians (one row per source tree measured in that run;
"echo without a browser" is a WebSocket client's keystroke echo from the same app),
followed by the run's machine, browser, date and commits, so no figure is copied by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "browser.json"
MARKER = "<!-- browser-benchmark -->"
FORMAT = 1


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    """The run's JSON; a missing, unreadable or other-format file fails the build."""
    try:
        results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PluginError(f"{path}: {error} (run make bench-browser)") from error
    if results.get("format") != FORMAT:
        raise PluginError(f"{path}: format {results.get('format')!r}, expected {FORMAT}")
    return results


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def browser_table(results: dict[str, Any]) -> str:
    """The Markdown table of ``results`` (the JSON ``browser_keystroke.py`` writes)."""
    size = results["large_output_bytes"]
    lines = [
        "| tree | keys | baseline | terminal | ratio | keydown to send | send to echo "
        f"| echo to screen | echo without a browser | {size / 1e6:g} MB of `yes` |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results["results"].items():
        commit = row["commit"].get("describe") or "?"
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.1f}x"
        seconds = row["large_output_median_seconds"]
        large = "-" if seconds is None else f"{seconds:.1f} s ({size / seconds / 1e6:.1f} MB/s)"
        lines.append(
            f"| {name} (`{commit}`) | {row['keys']} | {_ms(row['baseline_ms'])} "
            f"| {_ms(row['terminal_ms'])} | {ratio} | {_ms(row['keydown_to_send_ms'])} "
            f"| {_ms(row['send_to_message_ms'])} | {_ms(row['message_to_screen_ms'])} "
            f"| {_ms(row.get('app_echo_ms'))} | {large} |"
        )
    machine = results.get("machine", {})
    lines.append("")
    lines.append(
        f"*Medians; run {str(results.get('started', '?'))[:16].replace('T', ' ')} UTC on "
        f"{machine.get('cpus', '?')} CPUs ({machine.get('cpu_model') or '?'}, load "
        f"{machine.get('load_average', 0):.1f}), {machine.get('chromium') or 'Chromium'} "
        "headless.*"
    )
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, browser_table(load_results()))
