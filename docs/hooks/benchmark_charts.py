"""MkDocs hook: the benchmark charts and tables, drawn from the committed results of a real run.

``make bench`` (``benchmarks/run.py``) writes ``benchmarks/results/latest.json``; this hook reads
it at build time, adds SVG charts (matplotlib) to the site under ``assets/benchmarks/``, and
replaces two markers in docs/benchmarks.md with what the run printed, so no figure on that page
is ever copied by hand:

- ``throughput.svg``: MB/s of every client on the benchmark server at both sizes, with the raw
  socket sink (the server's floor), the bare WebSocket loops, kubectl and the official client;
- ``cpu.svg``: client CPU seconds per 100 MB (the steadier figure on a shared machine), with
  the server's own CPU for the same transfers;
- ``latency.svg``: median and minimum time of ``true`` (cache warm, no cache, bare exec);
- ``memory.svg``: peak RSS against output size;
- ``endtoend.svg``: the same clients on the sandbox, whose pods are processes;
- ``<!-- benchmark-summary -->``: the client / MB/s / % of the floor / CPU table;
- ``<!-- benchmark-table -->``: the whole table ``run.py`` printed;
- ``<!-- results-table NAME -->``: the table another benchmark printed and saved with its
  figures in ``benchmarks/results/NAME.json`` (``load.py``'s ``load``, ``trio_ceiling.py``'s
  ``trio_ceiling``).

Each chart is labelled with the run's machine, date, commit and versions.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "latest.json"
MB = 1_000_000
MIB_KIB = 1024
FORMAT = 2
SUMMARY_MARKER = "<!-- benchmark-summary -->"
TABLE_MARKER = "<!-- benchmark-table -->"
RESULTS_TABLE = re.compile(r"<!-- results-table ([a-z0-9_]+) -->")

#: Bar colours: kuber-exec, the bare loops, kubectl, the official client, the raw sink.
COLOURS = {
    "kuber": "#3f51b5",
    "bare": "#9fa8da",
    "kubectl": "#ff9800",
    "official": "#e53935",
    "sink": "#9e9e9e",
}
LEGEND = {
    "kuber": "kuber-exec",
    "bare": "bare WebSocket loop",
    "kubectl": "kubectl exec",
    "official": "official client",
    "sink": "raw socket sink (no client)",
}
KUBER_KINDS = ("trio-execute", "trio-interactive", "asyncio-execute", "asyncio-interactive")
SUMMARY_ORDER = (
    "raw-sink",
    "asyncio-bare",
    "trio-bare",
    "asyncio-interactive",
    "asyncio-execute",
    "trio-interactive",
    "trio-execute",
    "kubectl",
    "official",
)


def _family(kind: str) -> str:
    if kind == "raw-sink":
        return "sink"
    if "bare" in kind:
        return "bare"
    if kind.startswith("official"):
        return "official"
    if kind == "kubectl":
        return "kubectl"
    return "kuber"


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    try:
        results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"cannot read the benchmark results {path}: {exc}") from exc
    if results.get("format") != FORMAT or results.get("quick"):
        raise PluginError(
            f"{path} is not a full `make bench` run of format {FORMAT} (run `make bench`)"
        )
    return results


def provenance(results: dict[str, Any]) -> str:
    """Two lines: when, on what machine, at which commit; with which versions."""
    versions = results.get("versions", {})
    shown = ", ".join(f"{name} {value}" for name, value in versions.items() if value)
    machine = results.get("machine", {})
    commit = results.get("commit", {})
    load = machine.get("load_average")
    shown_load = "?" if load is None else f"{load:.1f}"
    return (
        f"Run {str(results.get('started', '?'))[:16].replace('T', ' ')} UTC at commit "
        f"{commit.get('describe') or '?'}, on {machine.get('cpu_model') or '?'} x "
        f"{machine.get('cpus', '?')} CPUs (load average {shown_load}), "
        f"{machine.get('platform', '?')}\n{shown}"
    )


def _new_figure(height: float) -> tuple[Figure, Any]:
    figure, axes = plt.subplots(figsize=(8.0, height), layout="constrained")
    return figure, axes


def _finish(figure: Figure, results: dict[str, Any], title: str) -> str:
    figure.suptitle(title, fontsize=12, fontweight="bold")
    figure.text(0.005, 0.002, provenance(results), fontsize=6.5, color="#555555", va="bottom")
    bottom = 0.34 / figure.get_figheight()  # two small lines of provenance, in inches
    figure.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))  # type: ignore[union-attr, call-arg]
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    plt.close(figure)
    return out.getvalue()


def _sizes(group: dict[str, Any]) -> list[int]:
    return sorted((int(size) for size in group), reverse=True)


def _legend(axes: Any, families: list[str]) -> None:
    shown = [family for family in COLOURS if family in families]
    # Below the x label whatever the chart's height: about half an inch under the axes.
    below = 0.5 / max(axes.figure.get_figheight() - 1.4, 1.0)
    axes.legend(
        [Rectangle((0, 0), 1, 1, color=COLOURS[family]) for family in shown],
        [LEGEND[family] for family in shown],
        loc="upper center",
        bbox_to_anchor=(0.5, -below),
        ncols=min(len(shown), 3),
        fontsize=8,
        frameon=False,
    )


def _bars(group: dict[str, Any], value_key: str, scale: float) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    sizes = _sizes(group)
    for size in sizes:
        for kind, row in group[str(size)].items():
            if row.get(value_key):
                suffix = f"  ·  {size / MB:g} MB" if len(sizes) > 1 else ""
                rows.append((f"{row['label']}{suffix}", kind, row[value_key] / scale))
    return rows


def _bar_chart(
    results: dict[str, Any], rows: list[tuple[str, str, float]], xlabel: str, title: str, fmt: str
) -> str:
    figure, axes = _new_figure(0.3 * len(rows) + 1.7)
    labels = [label for label, _, _ in rows][::-1]
    values = [value for _, _, value in rows][::-1]
    colours = [COLOURS[_family(kind)] for _, kind, _ in rows][::-1]
    bars = axes.barh(labels, values, color=colours)
    axes.bar_label(bars, labels=[fmt.format(value) for value in values], padding=3, fontsize=7)
    axes.set_xlabel(xlabel)
    axes.tick_params(axis="y", labelsize=7.5)
    axes.margins(x=0.14)
    axes.grid(axis="x", alpha=0.3)
    _legend(axes, [_family(kind) for _, kind, _ in rows])
    return _finish(figure, results, title)


def throughput_chart(results: dict[str, Any]) -> str:
    rows = _bars(results["throughput"]["fast"], "bytes_per_second", MB)
    return _bar_chart(
        results,
        rows,
        "stdout throughput, MB/s (higher is better; medians of interleaved rounds)",
        "Throughput on the benchmark server (32 KiB messages, from memory)",
        "{:,.0f}",
    )


def endtoend_chart(results: dict[str, Any]) -> str:
    group = results["throughput"].get("sandbox") or {}
    rows = _bars(group, "bytes_per_second", MB)
    if not rows:
        raise PluginError("the benchmark results have no sandbox rows (run `make bench`)")
    return _bar_chart(
        results,
        rows,
        "stdout throughput, MB/s (higher is better; medians)",
        "End to end on the sandbox (its pods are local processes)",
        "{:,.0f}",
    )


def cpu_chart(results: dict[str, Any]) -> str:
    group = results["throughput"]["fast"]
    size = str(_sizes(group)[0])
    rows = [
        (row["label"], kind, row["cpu_seconds_per_100mb"], row.get("server_cpu_seconds_per_100mb"))
        for kind, row in group[size].items()
        if row.get("cpu_seconds_per_100mb")
    ]
    figure, axes = _new_figure(0.34 * len(rows) + 1.7)
    labels = [label for label, _, _, _ in rows][::-1]
    values = [value for _, _, value, _ in rows][::-1]
    servers = [server or 0 for _, _, _, server in rows][::-1]
    colours = [COLOURS[_family(kind)] for _, kind, _, _ in rows][::-1]
    bars = axes.barh(labels, values, color=colours)
    axes.bar_label(bars, labels=[f"{value:.3f}" for value in values], padding=3, fontsize=7)
    axes.scatter(servers, labels, color="black", marker="|", s=150, zorder=3)
    axes.set_xlabel("client CPU s per 100 MB (lower is better; medians)")
    axes.set_title(
        "black mark: the benchmark server's CPU for the same runs", fontsize=8, color="#555555"
    )
    axes.tick_params(axis="y", labelsize=7.5)
    axes.margins(x=0.14)
    axes.grid(axis="x", alpha=0.3)
    _legend(axes, [_family(kind) for _, kind, _, _ in rows])
    return _finish(figure, results, f"CPU per byte, {int(size) / MB:g} MB of stdout")


def latency_chart(results: dict[str, Any]) -> str:
    rows = [
        (row["label"], kind, row["median_seconds"], row.get("min_seconds"))
        for kind, row in results["latency"]["fast"].items()
        if row.get("median_seconds") is not None
    ]
    figure, axes = _new_figure(0.42 * len(rows) + 1.7)
    labels = [label for label, _, _, _ in rows][::-1]
    medians = [median * 1000 for _, _, median, _ in rows][::-1]
    minimums = [(minimum or 0) * 1000 for _, _, _, minimum in rows][::-1]
    colours = [COLOURS[_family(kind)] for _, kind, _, _ in rows][::-1]
    bars = axes.barh(labels, medians, color=colours, label="median")
    axes.scatter(minimums, labels, color="black", marker="|", s=200, label="minimum", zorder=3)
    axes.bar_label(bars, labels=[f"{value:.2f} ms" for value in medians], padding=3, fontsize=7)
    axes.set_xlabel("time of `true`, ms (lower is better; medians)")
    axes.set_title(
        "cache warm: the WebSocket alone; no cache: 3 REST reads first;"
        " bare exec: the library alone",
        fontsize=8,
        color="#555555",
    )
    axes.tick_params(axis="y", labelsize=7.5)
    axes.margins(x=0.15)
    axes.grid(axis="x", alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    return _finish(figure, results, "Latency of a small command on the benchmark server")


def memory_chart(results: dict[str, Any]) -> str:
    group = results["throughput"]["fast"]
    sizes = sorted(int(size) for size in group)
    figure, axes = _new_figure(4.2)
    kinds: list[str] = []
    for size in sizes:
        for kind in group[str(size)]:
            if kind not in kinds:
                kinds.append(kind)
    styles = {"trio": "-", "asyncio": "--"}
    for kind in kinds:
        if kind == "raw-sink":
            continue  # it reads ten times the bytes: not a point of this size axis
        points = [
            (size / MB, row["peak_rss_kib"] / MIB_KIB)
            for size in sizes
            if (row := group[str(size)].get(kind)) and row.get("peak_rss_kib")
        ]
        if len(points) < 2:
            continue
        label = group[str(sizes[0])].get(kind, {}).get("label", kind)
        colour = COLOURS[_family(kind)]
        if kind in KUBER_KINDS and kind.endswith("execute"):
            colour = "#7986cb"
        xs, ys = zip(*points, strict=True)
        axes.plot(
            xs, ys, styles.get(kind.partition("-")[0], ":"), marker="o", color=colour, label=label
        )
    axes.set_xlabel("output size, MB")
    axes.set_ylabel("peak RSS of the client, MiB (lower is better)")
    axes.set_xticks([size / MB for size in sizes])
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", ncols=2)
    return _finish(figure, results, "Peak memory against output size")


def summary_table(results: dict[str, Any]) -> str:
    """The client / MB/s / % of the bare websockets loop / CPU table (Markdown)."""
    group = results["throughput"]["fast"]
    size = str(_sizes(group)[0])
    small = str(_sizes(group)[-1])
    rows = {
        **{k: (v, small) for k, v in group[small].items()},
        **{k: (v, size) for k, v in group[size].items()},
    }
    floor = group[size].get("asyncio-bare", {}).get("bytes_per_second")
    lines = [
        "| client | MB/s | % of the bare websockets loop | CPU s per 100 MB |",
        "|---|---|---|---|",
    ]
    for kind in SUMMARY_ORDER:
        if kind not in rows or not rows[kind][0].get("bytes_per_second"):
            continue
        row, at = rows[kind]
        rate = row["bytes_per_second"]
        share = f"{rate / floor:.0%}" if floor and at == size else "-"
        note = "" if at == size else f" (at {int(at) / MB:g} MB)"
        lines.append(
            f"| {row['label']}{note} | {rate / MB:,.0f} | {share} | "
            f"{row['cpu_seconds_per_100mb']:.3f} |"
        )
    commit = results.get("commit", {}).get("describe") or "?"
    lines.append("")
    lines.append(
        f"*{int(size) / MB:g} MB of stdout on the benchmark server; run "
        f"{str(results.get('started', '?'))[:16].replace('T', ' ')} UTC at commit `{commit}`.*"
    )
    return "\n".join(lines)


CHARTS = {
    "throughput": throughput_chart,
    "cpu": cpu_chart,
    "latency": latency_chart,
    "memory": memory_chart,
    "endtoend": endtoend_chart,
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    plt.rcParams["svg.hashsalt"] = "kuber-exec"
    results = load_results()
    for name, chart in CHARTS.items():
        files.append(
            File.generated(config, f"assets/benchmarks/{name}.svg", content=chart(results))
        )
    return files


def results_table(name: str) -> str:
    """The ``table`` lines of ``benchmarks/results/NAME.json`` as a text block."""
    path = RESULTS.parent / f"{name}.json"
    try:
        lines: list[str] = json.loads(path.read_text(encoding="utf-8"))["table"]
    except (OSError, ValueError, KeyError) as exc:
        raise PluginError(f"cannot read the table of {path}: {exc!r}") from exc
    return "```text\n" + "\n".join(lines) + "\n```"


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    markdown = RESULTS_TABLE.sub(lambda found: results_table(found.group(1)), markdown)
    if SUMMARY_MARKER not in markdown and TABLE_MARKER not in markdown:
        return markdown
    results = load_results()
    table = "```text\n" + "\n".join(results["table"]) + "\n```"
    return markdown.replace(SUMMARY_MARKER, summary_table(results)).replace(TABLE_MARKER, table)
