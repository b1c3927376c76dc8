"""Where trio's time goes: trio-websocket against one-task loops on a trio stream, in one run.

    python benchmarks/trio_ceiling.py [--rounds 5] [--size-mb 100] [--no-instructions]
        [--keep DIRECTORY]

Against the benchmark server (``fast_server.py``: 32 KiB stdout messages from memory), each row a
``measure.py`` kind in a fresh interpreter, interleaved round by round (the order reversed every
other round); medians. The rows peel trio-websocket's costs off one at a time:

- ``asyncio-bare``: the websockets asyncio loop, the floor every client is compared with;
- ``trio-bare``: trio-websocket (a reader task parsing with wsproto, a memory channel to the
  caller, each message joined from its parts), 256 KiB receives as the trio adapter sets them,
  and ``trio-bare-4k`` with trio-websocket's default 4 KiB receives;
- ``trio-websockets-bare``: the websockets library's own trio client (a reader task too, 64 KiB
  receives): what swapping the library would give;
- ``trio-wsproto-bare``: wsproto fed in the caller's task (no reader task, no channel);
- ``trio-sansio-bare``: websockets' sans-IO ``ClientProtocol`` (its C speedups) fed in the
  caller's task, 256 KiB receives, and ``trio-sansio-bare-64k`` with 64 KiB ones;
- ``trio-socket-bare``: the same bytes read from the trio stream, parsing nothing: trio's floor;
- ``trio-interactive``: kuber-exec's trio interactive session (on trio-websocket), for scale.

Then (unless ``--no-instructions``) the user-space instructions each row executes per 32 KiB
message, counted by valgrind's callgrind as ``make bench-compare ARGS=--instructions`` counts
them (each row at 8 and 24 MB, the difference over 16 MB, so start-up cancels out): the figure a
busy machine cannot move. ``--keep`` keeps callgrind's output files there (for
``callgrind_annotate``). Prints a table and writes it with every figure, the machine, the date and
the commit to ``--json`` (``benchmarks/results/trio_ceiling.json``; ``--quick``:
``results/trio_ceiling-quick.json``), which docs/benchmarks.md quotes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from compare import INSTRUCTION_SIZES_MB, instructions
from harness import Job, Samples, rounds, server_process, show_progress
from report import FLOOR, MB, label, percent, ratio, size_text
from run import RESULTS, git_commit, machine, versions


@attrs.frozen
class Row:
    key: str
    kind: str
    text: str
    options: tuple[str, ...] = ()


ROWS = (
    Row(FLOOR, FLOOR, label(FLOOR) + " (asyncio, the floor)"),
    Row("trio-bare", "trio-bare", "trio-websocket, 256 KiB receives"),
    Row(
        "trio-bare-4k",
        "trio-bare",
        "trio-websocket, 4 KiB (its default)",
        ("--receive-bytes", "4096"),
    ),
    Row("trio-websockets-bare", "trio-websockets-bare", "websockets' trio client, 64 KiB"),
    Row("trio-wsproto-bare", "trio-wsproto-bare", "wsproto in one trio task, 256 KiB"),
    Row("trio-sansio-bare", "trio-sansio-bare", "websockets sans-IO in one task, 256 KiB"),
    Row(
        "trio-sansio-bare-64k",
        "trio-sansio-bare",
        "websockets sans-IO in one task, 64 KiB",
        ("--receive-bytes", "65536"),
    ),
    Row("trio-socket-bare", "trio-socket-bare", "trio stream read, no parsing, 256 KiB"),
    Row("trio-interactive", "trio-interactive", "kuber-exec trio interactive"),
)
#: 1 MB = 10^6 bytes; the server's stdout messages are 32 KiB.
MESSAGE_BYTES = 32768


def count_instructions(
    endpoint: Any, rows: Sequence[Row], directory: Path
) -> dict[str, float | str]:
    """Instructions per 32 KiB message of each row (or the error that stopped it)."""
    low, high = INSTRUCTION_SIZES_MB
    messages = (high - low) * MB / MESSAGE_BYTES
    found: dict[str, float | str] = {}
    env = dict(os.environ)
    for row in rows:
        show_progress(f"callgrind: {row.key}")
        try:
            counts = [
                instructions(endpoint, row.kind, env, size, directory, row.options)
                for size in (low, high)
            ]
        except RuntimeError as error:
            found[row.key] = str(error)
            continue
        found[row.key] = (counts[1] - counts[0]) / messages
    show_progress("")
    return found


def table(
    samples: dict[str, Samples], counted: dict[str, float | str] | None
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The rows: MB/s, % of the floor, CPU per 100 MB, k instructions per message, and the
    instructions against trio-websocket's."""
    floor = samples[FLOOR].rate if not samples[FLOOR].error else None
    header = f"{'row':<44}{'MB/s':>7}{'% floor':>9}{'CPU s/100MB':>13}"
    if counted is not None:
        header += f"{'k instr/msg':>13}{'vs trio-ws':>12}"
    lines = [header, "-" * len(header)]
    figures: dict[str, dict[str, Any]] = {}
    reference = counted.get("trio-bare") if counted else None
    for row in ROWS:
        sample = samples[row.key]
        if sample.error is not None or sample.rate is None:
            lines.append(f"{row.text:<44}  failed: {sample.error}")
            figures[row.key] = {"error": sample.error}
            continue
        cpu = sample.per_100mb("cpu_seconds")
        line = (
            f"{row.text:<44}{sample.rate / MB:>7,.0f}{percent(ratio(sample.rate, floor)):>9}"
            f"{'-' if cpu is None else f'{cpu:.3f}':>13}"
        )
        figures[row.key] = {
            "kind": row.kind,
            "options": list(row.options),
            "text": row.text,
            "bytes_per_second": sample.rate,
            "of_floor": ratio(sample.rate, floor),
            "cpu_seconds_per_100mb": cpu,
            "per_round": [r["bytes"] / r["seconds"] for r in sample.reports],
        }
        if counted is not None:
            per_message = counted.get(row.key)
            if isinstance(per_message, float):
                share = ratio(per_message, reference if isinstance(reference, float) else None)
                line += f"{per_message / 1000:>13,.0f}{percent(share):>12}"
                figures[row.key]["instructions_per_message"] = per_message
            else:
                line += f"  callgrind failed: {per_message}"
                figures[row.key]["instructions_error"] = per_message
        lines.append(line)
    return lines, figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, help="interleaved rounds (5)")
    parser.add_argument("--size-mb", type=float, help="stdout per run (100)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 4 MB")
    parser.add_argument("--no-instructions", dest="instructions", action="store_false")
    parser.add_argument("--keep", type=Path, help="keep callgrind's output files here")
    parser.add_argument("--json", type=Path, help="where to write the results as JSON")
    args = parser.parse_args(argv)
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("counting instructions needs valgrind on PATH (or --no-instructions)")
    repeat = args.rounds or (1 if args.quick else 5)
    size = int((args.size_mb or (4 if args.quick else 100)) * MB)
    started = datetime.datetime.now(datetime.UTC)
    before = machine()
    jobs = [Job(row.key, row.kind, ("--bytes", str(size), *row.options)) for row in ROWS]
    counted: dict[str, float | str] | None = None
    with server_process("fast") as endpoint:
        samples = rounds(endpoint, jobs, repeat, f"stdout {size_text(size)}", alternate=True)
        if args.instructions:
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                counted = count_instructions(endpoint, ROWS, args.keep)
            else:
                with tempfile.TemporaryDirectory(prefix="kuber-exec-callgrind-") as directory:
                    counted = count_instructions(endpoint, ROWS, Path(directory))
    elapsed = datetime.datetime.now(datetime.UTC) - started
    commit = git_commit()
    lines, figures = table(samples, counted)
    low, high = INSTRUCTION_SIZES_MB
    out = [
        f"trio: where the time goes, {started:%Y-%m-%d %H:%M} UTC, {elapsed.total_seconds():.0f} s"
        f", commit {commit['describe']}",
        f"Python {platform.python_version()} on {before['cpu_model']} x {before['cpus']} CPUs, "
        f"load average {before['load_average']:.1f} at the start",
        f"Benchmark server, stdout {size_text(size)} in 32 KiB messages; medians of {repeat} "
        "interleaved rounds; CPU: the client's user+sys;",
        f"k instr/msg: callgrind's user-space instructions per 32 KiB message ({low} and {high} "
        f"MB runs, the difference over {high - low} MB); vs trio-ws: against trio-websocket's.",
        "",
        *lines,
    ]
    print("\n".join(out), flush=True)
    results = {
        "format": 1,
        "source": "benchmarks/trio_ceiling.py",
        "started": started.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed.total_seconds(), 1),
        "quick": args.quick,
        "commit": commit,
        "machine": {**before, "load_average_end": machine()["load_average"]},
        "versions": {**versions(None), **_more_versions()},
        "plan": {"rounds": repeat, "bytes": size, "instruction_sizes_mb": [low, high]},
        "rows": figures,
        "table": out,
    }
    name = "trio_ceiling-quick.json" if args.quick else "trio_ceiling.json"
    json_path: Path = args.json or RESULTS / name
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    failed = any("error" in entry or "instructions_error" in entry for entry in figures.values())
    return 1 if failed else 0


def _more_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in ("wsproto", "trio"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


if __name__ == "__main__":
    sys.exit(main())
