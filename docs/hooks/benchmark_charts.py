"""MkDocs hook: the benchmark charts, drawn by matplotlib from the committed results.

``make bench`` (``benchmarks/run.py``) writes ``benchmarks/results/latest.json``; this hook reads
it at build time and adds three SVG charts to the site under ``assets/benchmarks/``, which
docs/benchmarks.md embeds:

- ``throughput.svg``: MB/s of every client at both sizes, kuber-exec next to the bare WebSocket
  loops, kubectl and the official client;
- ``latency.svg``: median and minimum time of a small command;
- ``memory.svg``: peak RSS against output size.

Each chart is labelled with the run's machine, date and versions.
"""

from __future__ import annotations

import io
import json
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

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "latest.json"
MB = 1_000_000
MIB_KIB = 1024

#: Bar colours: kuber-exec, the bare loops (the ceiling), kubectl, the official client.
COLOURS = {"kuber": "#3f51b5", "bare": "#9fa8da", "kubectl": "#ff9800", "official": "#e53935"}
KUBER_KINDS = ("trio-execute", "trio-interactive", "asyncio-execute", "asyncio-interactive")


def _family(kind: str) -> str:
    if kind.endswith("-bare"):
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
    return results


def provenance(results: dict[str, Any]) -> str:
    """One line: when, on what, with which versions (and whether the run was --quick)."""
    versions = results.get("versions", {})
    shown = ", ".join(f"{name} {value}" for name, value in versions.items() if value)
    machine = results.get("machine", {})
    quick = " (--quick)" if results.get("quick") else ""
    return (
        f"Run {str(results.get('started', '?'))[:16].replace('T', ' ')} UTC{quick} on "
        f"{machine.get('cpus', '?')} CPUs, {machine.get('platform', '?')}\n{shown}"
    )


def _new_figure(height: float) -> tuple[Figure, Any]:
    figure, axes = plt.subplots(figsize=(8.0, height), layout="constrained")
    return figure, axes


def _finish(figure: Figure, results: dict[str, Any], title: str) -> str:
    figure.suptitle(title, fontsize=12, fontweight="bold")
    figure.text(0.005, 0.002, provenance(results), fontsize=7, color="#555555", va="bottom")
    bottom = 0.34 / figure.get_figheight()  # two 7-point lines of provenance, in inches
    figure.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))  # type: ignore[union-attr, call-arg]
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    plt.close(figure)
    return out.getvalue()


def _sizes(results: dict[str, Any]) -> list[int]:
    return sorted((int(size) for size in results["throughput"]), reverse=True)


def throughput_chart(results: dict[str, Any]) -> str:
    sizes = _sizes(results)
    rows: list[tuple[str, str, float]] = []
    for size in sizes:
        for kind, row in results["throughput"][str(size)].items():
            if row.get("bytes_per_second"):
                rows.append((f"{row['label']}  ·  {size / MB:g} MB", kind, row["bytes_per_second"]))
    figure, axes = _new_figure(0.32 * len(rows) + 1.6)
    labels = [label for label, _, _ in rows][::-1]
    values = [rate / MB for _, _, rate in rows][::-1]
    colours = [COLOURS[_family(kind)] for _, kind, _ in rows][::-1]
    bars = axes.barh(labels, values, color=colours)
    axes.bar_label(bars, labels=[f"{value:.1f}" for value in values], padding=3, fontsize=8)
    axes.set_xlabel("stdout throughput, MB/s (higher is better; medians)")
    axes.tick_params(axis="y", labelsize=8)
    axes.margins(x=0.12)
    axes.grid(axis="x", alpha=0.3)
    handles = [Rectangle((0, 0), 1, 1, color=colour) for colour in COLOURS.values()]
    first_size = sum(1 for label, _, _ in rows if label.endswith(f" {sizes[0] / MB:g} MB"))
    axes.axhline(len(rows) - first_size - 0.5, color="#999999", linewidth=0.8)
    axes.legend(
        handles,
        ["kuber-exec", "bare WebSocket loop", "kubectl exec", "official client"],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.09),
        ncols=4,
        fontsize=8,
        frameon=False,
    )
    return _finish(
        figure, results, "Throughput against the bare loop, kubectl and the official client"
    )


def latency_chart(results: dict[str, Any]) -> str:
    rows = [
        (row["label"], kind, row["median_seconds"], row.get("min_seconds"))
        for kind, row in results["latency"].items()
        if row.get("median_seconds") is not None
    ]
    figure, axes = _new_figure(0.45 * len(rows) + 1.6)
    labels = [label for label, _, _, _ in rows][::-1]
    medians = [median * 1000 for _, _, median, _ in rows][::-1]
    minimums = [(minimum or 0) * 1000 for _, _, _, minimum in rows][::-1]
    colours = [COLOURS[_family(kind)] for _, kind, _, _ in rows][::-1]
    bars = axes.barh(labels, medians, color=colours, label="median")
    axes.scatter(minimums, labels, color="black", marker="|", s=200, label="minimum", zorder=3)
    axes.bar_label(bars, labels=[f"{value:.1f} ms" for value in medians], padding=3, fontsize=8)
    axes.set_xlabel("time of `true`, ms (lower is better; medians)")
    axes.set_title(
        "kuber-exec: full resolution (3 REST reads) and the WebSocket;"
        " the official client: the WebSocket to a known pod",
        fontsize=8,
        color="#555555",
    )
    axes.tick_params(axis="y", labelsize=8)
    axes.margins(x=0.15)
    axes.grid(axis="x", alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    return _finish(figure, results, "Latency of a small command")


def memory_chart(results: dict[str, Any]) -> str:
    sizes = sorted(int(size) for size in results["throughput"])
    figure, axes = _new_figure(4.2)
    kinds: list[str] = []
    for size in sizes:
        for kind in results["throughput"][str(size)]:
            if kind not in kinds:
                kinds.append(kind)
    styles = {"trio": "-", "asyncio": "--"}
    for kind in kinds:
        points = [
            (size / MB, row["peak_rss_kib"] / MIB_KIB)
            for size in sizes
            if (row := results["throughput"][str(size)].get(kind)) and row.get("peak_rss_kib")
        ]
        if len(points) < 2:
            continue
        label = results["throughput"][str(sizes[0])].get(kind, {}).get("label", kind)
        family = _family(kind)
        colour = COLOURS[family]
        if kind in KUBER_KINDS and kind.endswith("execute"):
            colour = "#7986cb"
        xs, ys = zip(*points, strict=True)
        axes.plot(
            xs,
            ys,
            styles.get(kind.partition("-")[0], ":"),
            marker="o",
            color=colour,
            label=label,
        )
    axes.set_xlabel("output size, MB")
    axes.set_ylabel("peak RSS of the client, MiB (lower is better)")
    axes.set_xticks([size / MB for size in sizes])
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", ncols=2)
    return _finish(figure, results, "Peak memory against output size")


CHARTS = {
    "throughput": throughput_chart,
    "latency": latency_chart,
    "memory": memory_chart,
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    plt.rcParams["svg.hashsalt"] = "kuber-exec"
    results = load_results()
    for name, chart in CHARTS.items():
        files.append(
            File.generated(config, f"assets/benchmarks/{name}.svg", content=chart(results))
        )
    return files
