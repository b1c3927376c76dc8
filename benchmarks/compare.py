"""``make bench-compare REF=<git ref>``: the working tree against REF, interleaved in one run.

    python benchmarks/compare.py REF [--size-mb 100] [--repeat 5] [--iterations 30] [--quick]

REF is checked out in a temporary git worktree (removed afterwards). Both sides run in this
virtual environment, the same measurement scripts (this tree's ``measure.py``) against one
benchmark server (this tree's ``fast_server.py``), each measurement in a fresh interpreter whose
``PYTHONPATH`` starts with that side's ``src`` — so only kuber-exec's own code differs between
them. Every report names the directory kuber-exec was imported from, and a side that did not
import its own tree is an error. Rows run new, old in one round and old, new in the next.

Printed: for each kuber-exec row, the new and old medians of throughput, client CPU per 100 MB,
peak RSS and the latency of ``true``, and their new/old ratio (above 1 is better for throughput;
below 1 is better for CPU, RSS and latency). The websockets bare loop runs in every round as a
control: it is the same code on both sides, so it shows how much the machine drifted.

``--instructions`` adds a figure that a busy machine cannot move: the user-space instructions
each row executes per 32 KiB message, counted by valgrind's callgrind (each row run at 8 and 24 MB
in a fresh interpreter under ``PYTHONHASHSEED=0``; the difference over 16 MB, so start-up
cancels out). It excludes the kernel (socket reads, page faults), and callgrind counts a memory
copy as about one instruction per byte, so a 32 KiB copy weighs ~33 k: compare it with the CPU
row, not instead of it. It also counts the instructions of one ``execute(["true"])`` with the
target cache warm (each cached-latency row at 20 and 120 calls, the difference over 100), new
and old against the bare WebSocket exec of the same library. About twenty minutes on top.

Caveat: REF runs with this tree's dependencies; a REF that needs others fails its rows (each
failure is reported with the measurement's last line of stderr).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import report
from harness import (
    Endpoint,
    Job,
    Samples,
    check_source,
    rounds,
    server_process,
    show_progress,
    source_env,
)
from report import MB, label, ratio, size_text

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
THROUGHPUT_KINDS = ("asyncio-interactive", "asyncio-execute", "trio-interactive", "trio-execute")
LATENCY_KINDS = (
    "trio-cached-latency",
    "asyncio-cached-latency",
    "trio-latency",
    "asyncio-latency",
)
CONTROL = "asyncio-bare"
SIDES = ("new", "old")


def git(*argv: str) -> str:
    """Run git in this repository; its stdout.

    Raises:
        SystemExit: git failed (its message).
    """
    done = subprocess.run(
        ["git", "-C", str(REPOSITORY), *argv], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextmanager
def worktree(ref: str) -> Iterator[tuple[Path, str]]:
    """REF checked out (detached) in a temporary worktree, and its commit."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="kuber-exec-compare-") as directory:
        path = Path(directory) / "ref"
        git("worktree", "add", "--detach", "--quiet", str(path), commit)
        try:
            if not (path / "src" / "kuber_exec_core").is_dir():
                raise SystemExit(f"{ref} ({commit[:12]}) has no src/kuber_exec_core")
            yield path, commit
        finally:
            git("worktree", "remove", "--force", str(path))


def jobs(
    kinds: Sequence[str], options: tuple[str, ...], envs: Mapping[str, dict[str, str]]
) -> list[Job]:
    return [Job(f"{kind}:{side}", kind, options, envs[side]) for kind in kinds for side in SIDES]


def check_sources(samples: Mapping[str, Samples], trees: Mapping[str, Path]) -> None:
    """Fail a row whose reports imported kuber-exec from another tree than its side's."""
    for key, sample in samples.items():
        side = key.rpartition(":")[2]
        if side in trees:
            check_source(sample, trees[side])


#: The two sizes (MB) each row runs at under callgrind; their difference is what is counted.
INSTRUCTION_SIZES_MB = (8, 24)
#: ``execute(["true"])`` with the target cache warm is counted at these iteration counts; the
#: difference over the gap is one execute (start-up and warm-up cancel out). A wide gap: the
#: garbage collector's full collections and the keepalive's timers land in one window or the
#: other, and over 100 calls moved the figure by up to a third; over 400, by about 2 %.
INSTRUCTION_ITERATIONS = (20, 420)
#: Each cached-latency row and the bare exec of the same library it is held against.
LATENCY_INSTRUCTION_KINDS = (
    ("trio-cached-latency", "trio-bare-latency"),
    ("asyncio-cached-latency", "asyncio-bare-latency"),
)
_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(
    endpoint: Endpoint,
    kind: str,
    env: Mapping[str, str],
    size_mb: int,
    directory: Path,
    options: Sequence[str] = (),
) -> int:
    """User-space instructions of one ``measure.py`` run of ``kind`` (with ``options``) under
    callgrind.

    Raises:
        RuntimeError: the run failed (its last line of output says why).
    """
    out = directory / f"callgrind-{kind}-{'-'.join(options)}-{size_mb}.out"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    argv += [sys.executable, str(HERE / "measure.py"), kind, "--url", endpoint.url]
    argv += ["--kubeconfig", endpoint.kubeconfig, "--pod", endpoint.pod]
    argv += ["--bytes", str(size_mb * MB), *options]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, env={**env, "PYTHONHASHSEED": "0"}
    )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        lines = (done.stderr.strip() or f"exit status {done.returncode}").splitlines()
        raise RuntimeError(lines[-1])
    return int(found.group(1))


def instruction_table(
    endpoint: Endpoint, envs: Mapping[str, dict[str, str]]
) -> tuple[list[str], dict[str, Any]]:
    """Instructions per 32 KiB message of each kuber-exec row, new against old."""
    low, high = INSTRUCTION_SIZES_MB
    messages = (high - low) * MB / 32768
    header = f"{'':<34}{'new k/msg':>14}{'old k/msg':>14}{'new/old':>9}"
    lines = [header, "-" * len(header)]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kuber-exec-callgrind-") as directory:
        for kind in THROUGHPUT_KINDS:
            per_message: dict[str, float] = {}
            try:
                for side in SIDES:
                    show_progress(f"callgrind: {kind}, {side}")
                    counts = [
                        instructions(endpoint, kind, envs[side], size, Path(directory))
                        for size in (low, high)
                    ]
                    per_message[side] = (counts[1] - counts[0]) / messages
            except RuntimeError as error:
                lines.append(f"{label(kind):<34}  failed: {error}")
                figures[kind] = {"error": str(error)}
                continue
            new, old = per_message["new"], per_message["old"]
            lines.append(
                f"{label(kind):<34}{new / 1000:>14,.0f}{old / 1000:>14,.0f}"
                f"{report.times(ratio(new, old)):>9}"
            )
            figures[kind] = {"new": new, "old": old, "new_over_old": ratio(new, old)}
    show_progress("")
    return lines, figures


def latency_instruction_table(
    endpoint: Endpoint, envs: Mapping[str, dict[str, str]]
) -> tuple[list[str], dict[str, Any]]:
    """Instructions per ``execute(["true"])`` with the cache warm, new against old, and each
    side against the bare WebSocket exec of the same library (its target is <= 1.2x)."""
    low, high = INSTRUCTION_ITERATIONS
    header = f"{'':<34}{'new M':>9}{'old M':>9}{'bare M':>9}{'new/old':>9}{'new/bare':>9}"
    lines = [header, "-" * len(header)]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kuber-exec-callgrind-") as directory:
        for kind, bare_kind in LATENCY_INSTRUCTION_KINDS:
            per_call: dict[str, float] = {}
            try:
                # The bare exec is the same code on both sides: counted once, with new's env.
                for side, row, env in (
                    ("new", kind, envs["new"]),
                    ("old", kind, envs["old"]),
                    ("bare", bare_kind, envs["new"]),
                ):
                    show_progress(f"callgrind: {row}, {side}")
                    counts = [
                        instructions(
                            endpoint,
                            row,
                            env,
                            1,
                            Path(directory),
                            ("--iterations", str(iterations)),
                        )
                        for iterations in (low, high)
                    ]
                    per_call[side] = (counts[1] - counts[0]) / (high - low)
            except RuntimeError as error:
                lines.append(f"{label(kind):<34}  failed: {error}")
                figures[kind] = {"error": str(error)}
                continue
            new, old, bare = per_call["new"], per_call["old"], per_call["bare"]
            lines.append(
                f"{label(kind):<34}{new / 1e6:>9.2f}{old / 1e6:>9.2f}{bare / 1e6:>9.2f}"
                f"{report.times(ratio(new, old)):>9}{report.times(ratio(new, bare)):>9}"
            )
            figures[kind] = {
                "new": new,
                "old": old,
                "bare": bare,
                "new_over_old": ratio(new, old),
                "new_over_bare": ratio(new, bare),
            }
    show_progress("")
    return lines, figures


def _cell(value: float | None, scale: float, digits: int) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def comparison_table(
    samples: Mapping[str, Samples],
    kinds: Sequence[str],
    figure: str,
    unit: str,
    scale: float,
    digits: int,
) -> tuple[list[str], dict[str, Any]]:
    """One figure of each kind, new against old."""

    def value(sample: Samples) -> float | None:
        if figure == "rate":
            return sample.rate
        if figure == "cpu":
            return sample.per_100mb("cpu_seconds")
        return sample.median(figure)

    header = f"{'':<34}{'new ' + unit:>14}{'old ' + unit:>14}{'new/old':>9}"
    lines = [header, "-" * len(header)]
    figures: dict[str, Any] = {}
    for kind in kinds:
        new, old = samples[f"{kind}:new"], samples[f"{kind}:old"]
        if new.error or old.error:
            lines.append(f"{label(kind):<34}  failed: {new.error or old.error}")
            figures[kind] = {"error": new.error or old.error}
            continue
        new_value, old_value = value(new), value(old)
        quotient = ratio(new_value, old_value)
        lines.append(
            f"{label(kind):<34}{_cell(new_value, scale, digits):>14}"
            f"{_cell(old_value, scale, digits):>14}{report.times(quotient):>9}"
        )
        figures[kind] = {"new": new_value, "old": old_value, "new_over_old": quotient}
    return lines, figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kuber-exec: the working tree against a ref")
    parser.add_argument("ref", help="a git ref: a branch, tag or commit")
    parser.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    parser.add_argument("--size-mb", type=float, help="stdout size (100)")
    parser.add_argument("--repeat", type=int, help="rounds (5)")
    parser.add_argument("--iterations", type=int, help="latency samples per round (30)")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions per message under valgrind's callgrind (~5 minutes)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on PATH")
    size = int((args.size_mb or (4 if args.quick else 100)) * MB)
    repeat = args.repeat or (1 if args.quick else 5)
    iterations = args.iterations or (5 if args.quick else 30)
    head = git("describe", "--always", "--dirty")
    with worktree(args.ref) as (path, commit):
        trees = {"new": (REPOSITORY / "src").resolve(), "old": (path / "src").resolve()}
        envs = {side: source_env(tree) for side, tree in trees.items()}
        size_options = ("--bytes", str(size))
        throughput_jobs = [Job(CONTROL, CONTROL, size_options)]
        throughput_jobs += jobs(THROUGHPUT_KINDS, size_options, envs)
        latency_jobs = jobs(LATENCY_KINDS, ("--iterations", str(iterations)), envs)
        with server_process("fast") as endpoint:
            throughput = rounds(
                endpoint, throughput_jobs, repeat, f"stdout {size_text(size)}", alternate=True
            )
            latency = rounds(endpoint, latency_jobs, repeat, "latency", alternate=True)
            counted = instruction_table(endpoint, envs) if args.instructions else None
            counted_latency = (
                latency_instruction_table(endpoint, envs) if args.instructions else None
            )
    check_sources(throughput, trees)
    check_sources(latency, trees)
    out = [
        f"bench-compare: new = working tree ({head}), old = {args.ref} ({commit[:12]})",
        f"benchmark server, stdout {size_text(size)} in 32 KiB messages, medians of {repeat} "
        "interleaved rounds (new, old / old, new); latency: "
        f"{iterations} runs of `true` per round",
        "",
    ]
    figures: dict[str, Any] = {"ref": args.ref, "commit": commit, "head": head, "size": size}
    for title, samples, kinds, figure, unit, scale, digits in (
        ("Throughput (higher is better)", throughput, THROUGHPUT_KINDS, "rate", "MB/s", MB, 0),
        (
            "Client CPU s per 100 MB (lower is better)",
            throughput,
            THROUGHPUT_KINDS,
            "cpu",
            "s",
            1,
            3,
        ),
        (
            "Peak RSS (lower is better)",
            throughput,
            THROUGHPUT_KINDS,
            "peak_rss_kib",
            "MiB",
            1024,
            1,
        ),
        (
            "Latency of `true` (lower is better)",
            latency,
            LATENCY_KINDS,
            "median_seconds",
            "ms",
            1e-3,
            2,
        ),
    ):
        lines, figures[title] = comparison_table(samples, kinds, figure, unit, scale, digits)
        out += [f"{title}:", *lines, ""]
    if counted is not None:
        title = "User-space instructions per 32 KiB message, callgrind (lower is better)"
        lines, figures[title] = counted
        out += [f"{title}:", *lines, ""]
    if counted_latency is not None:
        title = "User-space instructions per execute of `true`, cache warm, callgrind"
        lines, figures[title] = counted_latency
        out += [f"{title}:", *lines, ""]
    control = throughput[CONTROL]
    spread = [entry["bytes"] / entry["seconds"] / MB for entry in control.reports]
    if spread:
        out.append(
            f"Control ({label(CONTROL)}, the same code on both sides): "
            f"{min(spread):,.0f} to {max(spread):,.0f} MB/s over the rounds"
        )
    print("\n".join(out), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    failed = any(s.error for group in (throughput, latency) for s in group.values()) or any(
        table is not None and any("error" in entry for entry in table[1].values())
        for table in (counted, counted_latency)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
