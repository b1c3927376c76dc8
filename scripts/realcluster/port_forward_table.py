"""The port-forward real-cluster results (bench_port_forward.py's JSON) as docs/port-forward.md's
table; with several files, first merged into one (``--merge OUT``: rows in order, later runs'
rows added, the ratios to kubectl computed again over the merged rows).

    python scripts/realcluster/port_forward_table.py RESULT.json [MORE.json ...] [--merge OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    merged = dict(results[0])
    merged["rows"] = {}
    merged["notes"] = []
    merged["runs"] = []
    for result in results:
        merged["rows"].update(result["rows"])
        merged["notes"].extend(result.get("notes", []))
        merged["runs"].append(
            {k: result.get(k) for k in ("commit", "date", "options")}
            | {"clients": list(result["rows"])}
        )
    baseline = merged["rows"].get("kubectl port-forward", {}).get("throughput_mib_s")
    for row in merged["rows"].values():
        if baseline and row.get("throughput_mib_s"):
            row["throughput_vs_kubectl"] = row["throughput_mib_s"] / baseline
    return merged


def _number(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _connections(row: dict[str, Any] | None) -> str:
    if not row:
        return ""
    return (
        f"{row['failures']} of {row['count']:,}, "
        f"{_number(row.get('p50_ms'), 1)} / {_number(row.get('p99_ms'), 1)}"
    )


def _failover(row: dict[str, Any]) -> str:
    if row.get("p50_ms") is not None:
        return f"{_number(row['p50_ms'])} / {_number(row['p95_ms'])} ({row['trials']} deletions)"
    if row.get("why"):
        return f"n/a: {row['why']}"
    if row.get("failed"):
        return f"failed: {row['failed']}"
    return ""


def table(result: dict[str, Any]) -> str:
    lines = [
        "| client | MiB/s | vs kubectl | sequential: failed, p50 / p99 ms "
        "| concurrent: failed, p50 / p99 ms | RSS per open connection, KiB "
        "| failover p50 / p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in result["rows"].items():
        if "throughput_mib_s" not in row:
            lines.append(f"| {name} | failed: {row.get('error', '')[:160]} | | | | | |")
            continue
        lines.append(
            f"| {name} | {_number(row['throughput_mib_s'], 1)} "
            f"| {_number(row.get('throughput_vs_kubectl'), 2)} "
            f"| {_connections(row.get('sequential'))} | {_connections(row.get('concurrent'))} "
            f"| {_number(row.get('rss_per_connection_kib'), 1)} "
            f"| {_failover(row.get('failover', {}))} |"
        )
        if row.get("error"):  # a later measurement of the row failed: say which, and how
            lines[-1] = lines[-1][: -len(" |")] + f" (then: {row['error'][:80]}) |"
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--merge", type=Path)
    options = parser.parse_args()
    results = [json.loads(path.read_text()) for path in options.results]
    result = merge(results) if len(results) > 1 else results[0]
    if options.merge:
        options.merge.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
