"""What the supervised start costs (issue 20): ``true``'s latency and 100 MB of throughput with
the prologue and without it (``cleanup=False``), interleaved in one run, as ratios.

    python benchmarks/cleanup.py [--rounds N] [--iterations N] [--bytes N]

Two servers, each in its own process: the benchmark server (``fast_server.py``, which answers the
prologue's start mark without starting a shell: the client's share of the cost) and the sandbox
(pods are local processes: the prologue's ``/bin/sh`` really starts, which is what a container
pays). Prints one JSON line per server and row, then the with/without ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from harness import Job, rounds, server_process

ROWS = ("trio-cached-latency", "asyncio-cached-latency", "trio-interactive", "asyncio-interactive")


def jobs(args: argparse.Namespace) -> list[Job]:
    listed = []
    for kind in ROWS:
        options = (
            ("--iterations", str(args.iterations))
            if kind.endswith("latency")
            else ("--bytes", str(args.bytes))
        )
        for cleanup in ("1", "0"):
            env = {**os.environ, "KUBER_BENCH_CLEANUP": cleanup}
            key = f"{kind}/{'supervised' if cleanup == '1' else 'unsupervised'}"
            listed.append(Job(key, kind, options, env))
    return listed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30, help="latency samples per round")
    parser.add_argument("--bytes", type=int, default=100_000_000, help="throughput size")
    args = parser.parse_args(argv)
    ratios: dict[str, Any] = {}
    for server in ("fast", "sandbox"):
        with server_process(server) as endpoint:
            samples = rounds(endpoint, jobs(args), args.rounds, server, alternate=True)
        for kind in ROWS:
            on, off = samples[f"{kind}/supervised"], samples[f"{kind}/unsupervised"]
            for sample in (on, off):
                if sample.error:
                    print(json.dumps({"server": server, "row": sample.key, "error": sample.error}))
                    return 1
            if kind.endswith("latency"):
                with_, without = on.median("median_seconds"), off.median("median_seconds")
                unit = "seconds"
            else:
                with_, without = on.rate, off.rate
                unit = "bytes_per_second"
            assert with_ is not None
            assert without is not None
            row = {"server": server, "row": kind, unit: {"with": with_, "without": without}}
            print(json.dumps(row))
            ratios[f"{server}/{kind}"] = round(with_ / without, 3)
    print(json.dumps({"with_over_without": ratios}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
