"""The benchmark tables and target checks, from the medians ``harness.rounds`` collected.

Pure formatting: every function takes the samples and returns lines (or JSON-ready rows).
1 MB = 10^6 bytes; CPU is user + system seconds of the client process (kubectl's: its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness import Samples

MB = 1_000_000
#: How much an interactive session's peak RSS may grow between the two output sizes and still
#: count as independent of output size.
FLAT_MEMORY_SLACK_KIB = 8 * 1024

LABELS = {
    "raw-sink": "raw socket sink (no client, 10x)",
    "asyncio-bare": "websockets bare loop",
    "asyncio-bare-keep": "websockets loop keeping output",
    "trio-bare": "trio-websocket bare loop",
    "trio-socket-bare": "trio socket read, no parsing",
    "trio-wsproto-bare": "wsproto on a trio stream",
    "trio-sansio-bare": "websockets sans-IO on trio",
    "trio-websockets-bare": "websockets' trio client",
    "asyncio-interactive": "kuber-exec asyncio interactive",
    "asyncio-execute": "kuber-exec asyncio execute",
    "trio-interactive": "kuber-exec trio interactive",
    "trio-execute": "kuber-exec trio execute",
    "kubectl": "kubectl exec",
    "official": "official client stream()",
    "trio-cached-latency": "kuber-exec trio, cache warm",
    "asyncio-cached-latency": "kuber-exec asyncio, cache warm",
    "trio-latency": "kuber-exec trio, no cache",
    "asyncio-latency": "kuber-exec asyncio, no cache",
    "trio-bare-latency": "trio-websocket bare exec",
    "asyncio-bare-latency": "websockets bare exec",
    "official-latency": "official client stream()",
}
KUBER_KINDS = ("asyncio-interactive", "asyncio-execute", "trio-interactive", "trio-execute")
#: The floor every client is compared with: the fastest bare WebSocket loop.
FLOOR = "asyncio-bare"
#: Rows that read the output without being a WebSocket client: never "the fastest client".
NOT_CLIENTS = ("raw-sink", "trio-socket-bare")

#: Issue 19's targets, as ratios in one run against the benchmark server.
HEADROOM_GOAL = 3.0
ASYNCIO_INTERACTIVE_GOAL = 0.95
EXECUTE_GOAL = 0.90
TRIO_INTERACTIVE_GOAL = 0.75
CACHE_GOAL = 1.2
OFFICIAL_GOAL = 100.0


def label(key: str) -> str:
    return LABELS.get(key, key)


def ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or baseline is None or baseline == 0:
        return None
    return value / baseline


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def times(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if value < 10 else f"{value:.0f}x"


def _number(value: float | None, digits: int = 0, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def size_text(size: int) -> str:
    return f"{size / MB:g} MB"


def _mark(ok: bool) -> str:
    return "pass" if ok else "MISS"


def _rate(samples: Mapping[str, Samples], key: str) -> float | None:
    sample = samples.get(key)
    return None if sample is None or sample.error else sample.rate


def throughput_table(samples: Mapping[str, Samples], *, server_cpu: bool) -> list[str]:
    """Client, MB/s, % of the floor, wall time, CPU per 100 MB, peak RSS, growth, vs kubectl."""
    floor = _rate(samples, FLOOR)
    kubectl = _rate(samples, "kubectl")
    header = (
        f"{'client':<32}{'MB/s':>8}{'% floor':>9}{'time s':>8}{'CPU s/100MB':>13}"
        + (f"{'server CPU':>12}" if server_cpu else "")
        + f"{'peak MiB':>10}{'+MiB':>6}{'vs kubectl':>12}"
    )
    lines = [header, "-" * len(header)]
    for key, sample in samples.items():
        rate = sample.rate
        if sample.error is not None or rate is None:
            lines.append(f"{label(key):<32}  failed: {sample.error}")
            continue
        peak, before = sample.median("peak_rss_kib"), sample.median("rss_before_kib")
        growth = None if peak is None or before is None else peak - before
        is_kuber = key in KUBER_KINDS
        cpu = _number(sample.per_100mb("cpu_seconds"), 3)
        row = (
            f"{label(key):<32}{rate / MB:>8,.0f}{percent(ratio(rate, floor)):>9}"
            f"{sample.median('seconds') or 0:>8.3f}{cpu:>13}"
        )
        if server_cpu:
            row += f"{_number(sample.per_100mb('server_cpu_seconds'), 3):>12}"
        row += (
            f"{_number(peak, 0, 1024):>10}{_number(growth, 0, 1024):>6}"
            f"{percent(ratio(rate, kubectl) if is_kuber else None):>12}"
        )
        lines.append(row)
    return lines


def latency_table(samples: Mapping[str, Samples]) -> list[str]:
    """Median and minimum time of ``true``; kuber-exec against the bare exec of its library."""
    header = f"{'client':<34}{'median ms':>11}{'min ms':>9}{'peak MiB':>10}{'vs bare exec':>14}"
    lines = [header, "-" * len(header)]
    for key, sample in samples.items():
        median = sample.median("median_seconds")
        if sample.error is not None or median is None:
            lines.append(f"{label(key):<34}  failed: {sample.error}")
            continue
        runtime = key.partition("-")[0]
        bare = samples.get(f"{runtime}-bare-latency")
        vs_bare = (
            ratio(median, bare.median("median_seconds"))
            if bare is not None and "bare" not in key and runtime in ("trio", "asyncio")
            else None
        )
        minimum = (sample.median("min_seconds") or 0) * 1000
        lines.append(
            f"{label(key):<34}{median * 1000:>11.2f}{minimum:>9.2f}"
            f"{_number(sample.median('peak_rss_kib'), 0, 1024):>10}{times(vs_bare):>14}"
        )
    return lines


class Targets:
    """The target lines: ``[pass]``, ``[MISS]``, ``[ n/a]`` or ``[info]``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.figures: dict[str, dict[str, Any]] = {}

    def check(
        self, name: str, value: float | None, goal: float, shown: Callable[[float], str] | str
    ) -> None:
        """``value >= goal`` (for "at most" goals, pass the inverse); ``shown`` says how."""
        self.figures[name] = {"value": value, "goal": goal, "met": None}
        if value is None:
            self.lines.append(f"  [ n/a] {name}: not measured")
            return
        self.figures[name]["met"] = value >= goal
        text = shown if isinstance(shown, str) else shown(value)
        self.lines.append(f"  [{_mark(value >= goal)}] {name}: {text}")

    def info(self, text: str) -> None:
        self.lines.append(f"  [info] {text}")


def targets(
    big: Mapping[str, Samples],
    small: Mapping[str, Samples],
    latency: Mapping[str, Samples],
    sizes: tuple[int, int],
) -> Targets:
    """Issue 19's targets (and the earlier ones still stated in docs/benchmarks.md)."""
    found = Targets()
    big_size, small_size = sizes
    floor, sink = _rate(big, FLOOR), _rate(big, "raw-sink")
    fastest = max(
        (key for key in big if key not in NOT_CLIENTS and _rate(big, key)),
        key=lambda key: _rate(big, key) or 0.0,
        default=None,
    )
    fastest_rate = _rate(big, fastest) if fastest else None
    found.check(
        f"server headroom: raw sink >= {HEADROOM_GOAL:g}x the fastest client",
        ratio(sink, fastest_rate),
        HEADROOM_GOAL,
        lambda value: (
            f"{_number(sink, 0, MB)} MB/s, {value:.1f}x {label(fastest or '')} "
            f"({_number(fastest_rate, 0, MB)} MB/s)"
        ),
    )

    def of(key: str, base: str, goal: float) -> None:
        found.check(
            f"{label(key)} >= {goal:.0%} of {label(base)}",
            ratio(_rate(big, key), _rate(big, base)),
            goal,
            lambda value: f"{value:.0%}",
        )

    floor_sample = big.get(FLOOR)
    if floor_sample is not None:
        client_cpu = floor_sample.per_100mb("cpu_seconds")
        server_cpu = floor_sample.per_100mb("server_cpu_seconds")
        if client_cpu and server_cpu:
            found.info(
                f"server CPU per byte: {server_cpu:.3f} s per 100 MB while serving "
                f"{label(FLOOR)}, whose own is {client_cpu:.3f}: {client_cpu / server_cpu:.1f}x "
                "less (the headroom when both wait for a core alike)"
            )
    of("asyncio-interactive", FLOOR, ASYNCIO_INTERACTIVE_GOAL)
    of("asyncio-execute", "asyncio-interactive", EXECUTE_GOAL)
    of("trio-interactive", FLOOR, TRIO_INTERACTIVE_GOAL)
    of("trio-execute", "trio-interactive", EXECUTE_GOAL)
    keeping = ratio(_rate(big, "asyncio-bare-keep"), floor)
    if keeping is not None:
        found.info(
            f"what keeping the output costs any client: {label('asyncio-bare-keep')} is "
            f"{keeping:.0%} of {label(FLOOR)} (execute keeps it; interactive does not)"
        )
    kubectl = _rate(big, "kubectl")
    for key in KUBER_KINDS:
        found.check(
            f"{label(key)} >= kubectl",
            ratio(_rate(big, key), kubectl),
            1.0,
            lambda value: f"{value:.0%} of kubectl's throughput",
        )
    for runtime, library in (("trio", "trio-websocket"), ("asyncio", "websockets")):
        cached = latency.get(f"{runtime}-cached-latency")
        bare = latency.get(f"{runtime}-bare-latency")
        value = ratio(
            bare.median("median_seconds") if bare else None,
            cached.median("median_seconds") if cached else None,
        )
        found.check(
            f"{runtime} `true` with the cache warm <= {CACHE_GOAL}x the {library} bare exec",
            value,
            1 / CACHE_GOAL,
            lambda value: f"{1 / value:.2f}x",
        )
    official = _rate(small, "official")
    for key in KUBER_KINDS:
        found.check(
            f"{label(key)} >= {OFFICIAL_GOAL:g}x official at {size_text(small_size)}",
            ratio(_rate(small, key), official),
            OFFICIAL_GOAL,
            lambda value: f"{value:.0f}x the official client",
        )
    trio_bare = _rate(big, "trio-bare")
    if trio_bare is not None and floor is not None:
        found.info(
            f"trio's ceiling: {label('trio-bare')} is {trio_bare / floor:.0%} of "
            f"{label(FLOOR)} ({_number(trio_bare, 0, MB)} vs {_number(floor, 0, MB)} MB/s)"
        )
    sansio = _rate(big, "trio-sansio-bare")
    if sansio is not None and floor is not None and trio_bare is not None:
        found.info(
            f"what a one-task trio transport could reach: {label('trio-sansio-bare')} is "
            f"{sansio / floor:.0%} of {label(FLOOR)}, {sansio / trio_bare:.2f}x "
            f"{label('trio-bare')} (docs/benchmarks.md, trio: where the time goes)"
        )
    for key in KUBER_KINDS:
        runtime = key.partition("-")[0]
        cpu = big[key].per_100mb("cpu_seconds") if key in big else None
        own = big.get(f"{runtime}-bare")
        floor_sample = big.get(FLOOR)
        own_ratio = ratio(cpu, own.per_100mb("cpu_seconds") if own else None)
        floor_ratio = ratio(cpu, floor_sample.per_100mb("cpu_seconds") if floor_sample else None)
        if own_ratio is not None and floor_ratio is not None:
            found.info(
                f"{label(key)} uses {own_ratio:.2f}x the CPU per byte of "
                f"{label(f'{runtime}-bare')} ({floor_ratio:.2f}x {label(FLOOR)}'s)"
            )
    for key in ("trio-interactive", "asyncio-interactive"):
        small_peak = small[key].median("peak_rss_kib") if key in small else None
        big_peak = big[key].median("peak_rss_kib") if key in big else None
        value = None
        if small_peak is not None and big_peak is not None:
            value = FLAT_MEMORY_SLACK_KIB - (big_peak - small_peak)
        shown = (
            f"{_number(small_peak, 0, 1024)} MiB at {size_text(small_size)}, "
            f"{_number(big_peak, 0, 1024)} MiB at {size_text(big_size)}"
        )
        found.check(
            f"{label(key)} peak memory independent of output size",
            value,
            0.0,
            shown,
        )
    for key in ("trio-execute", "asyncio-execute"):
        small_peak = small[key].median("peak_rss_kib") if key in small else None
        big_peak = big[key].median("peak_rss_kib") if key in big else None
        if small_peak is not None and big_peak is not None:
            per_byte = (big_peak - small_peak) * 1024 / (big_size - small_size)
            found.info(
                f"{label(key)} returns the output: {per_byte:.1f} bytes of RSS per byte "
                f"({_number(small_peak, 0, 1024)} MiB at {size_text(small_size)}, "
                f"{_number(big_peak, 0, 1024)} MiB at {size_text(big_size)})"
            )
    return found


def rows(samples: Mapping[str, Samples]) -> dict[str, dict[str, Any]]:
    """The medians of every row as JSON (bytes, seconds, KiB), with each round's figure."""
    found: dict[str, dict[str, Any]] = {}
    for key, sample in samples.items():
        found[key] = {
            "label": label(key),
            "kind": sample.kind,
            "error": sample.error,
            "rounds": len(sample.reports),
            "bytes_per_second": sample.rate,
            "cpu_seconds_per_100mb": sample.per_100mb("cpu_seconds"),
            "server_cpu_seconds_per_100mb": sample.per_100mb("server_cpu_seconds"),
            **{
                name: sample.median(name)
                for name in (
                    "seconds",
                    "cpu_seconds",
                    "server_cpu_seconds",
                    "peak_rss_kib",
                    "rss_before_kib",
                    "median_seconds",
                    "min_seconds",
                )
            },
            "per_round": [_round_figure(report) for report in sample.reports],
        }
    return found


def _round_figure(report: Mapping[str, Any]) -> float | None:
    if report.get("bytes") and report.get("seconds"):
        return float(report["bytes"] / report["seconds"])
    value = report.get("median_seconds")
    return None if value is None else float(value)


def issue_table(samples: Mapping[str, Samples], order: Sequence[str]) -> list[str]:
    """The issue's table: client, MB/s, % of the bare websockets loop, CPU s per 100 MB."""
    floor = _rate(samples, FLOOR)
    lines = [
        "| client | MB/s | % of the bare websockets loop | CPU s per 100 MB |",
        "|---|---|---|---|",
    ]
    for key in order:
        sample = samples.get(key)
        if sample is None or sample.rate is None:
            continue
        lines.append(
            f"| {label(key)} | {sample.rate / MB:,.0f} | {percent(ratio(sample.rate, floor))} | "
            f"{_number(sample.per_100mb('cpu_seconds'), 3)} |"
        )
    return lines
