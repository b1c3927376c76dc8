"""The drop test at the issue's scale: 100 tries per scenario, 30 s drops, both servers (issue 38).

    make drop-soak                  # in a loopback-only network namespace (root)
    python benchmarks/drop_soak.py [--tries 100] [--drop-seconds 30] [--parallel 30]
        [--runtime asyncio,trio] [--scenario seq,top,idle] [--json PATH]

For each server (uvicorn on asyncio, hypercorn on trio: ``tests/web/shared_server.py`` in a
child process with its own sandbox, recordings on, a reconnect grace of three drops), runs the
tries of ``tests/web/drop_soak.py``: every try is a page in a browser context of its own in
one headless Chromium, with its own shell and its own dropping proxy; ``--parallel`` of them at
a time. A try passes when, after its page's network was cut for ``--drop-seconds`` during
``seq 1 200000``, during ``top`` or idle, the page came back by itself to the same shell (PID,
directory, exported variable), was told of no missed byte, and received exactly the bytes of
the session's recording (length and CRC-32).

Writes ``results/drop_soak.json``: tries and passes in all, per server and per scenario, every
failure with its reason, and the reattach time (the network's return to the page's resumed
``open``, polled every 100 ms) p50 and p95. Exits 1 unless every try passed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from run import RESULTS, git_commit, machine  # noqa: E402

from browser_support import CHROMIUM, CHROMIUM_ARGS, loopback_only_problem  # noqa: E402
from web.app_server import DemoProcess  # noqa: E402
from web.drop_soak import SCENARIOS, SoakServer, TryResult, soak, summary  # noqa: E402

SERVER = ROOT / "tests" / "web" / "shared_server.py"


def _run_server(runtime: str, args: argparse.Namespace, where: Path) -> dict[str, Any]:
    recordings = where / "recordings"
    process = DemoProcess(
        "--runtime",
        runtime,
        "--record-dir",
        str(recordings),
        "--grace",
        str(max(60.0, 3 * args.drop_seconds)),
        # The app's default (25 s): a page or app silent for three of them is cut.
        "--ping-interval",
        "25",
        *(("--log-file", str(where / "server.log")) if args.work_dir else ()),
        audit_log=where / "audit.jsonl",
        command=(sys.executable, str(SERVER)),
    )
    done = [0]

    def progress(result: TryResult) -> None:
        done[0] += 1
        verdict = "ok" if result.ok else f"FAILED: {result.error}"
        print(
            f"  {runtime} {done[0]:>3}/{args.tries * len(args.scenario)} {result.scenario}"
            f" #{result.index}: {verdict} (reattach {result.reattach_seconds or 0:.2f} s,"
            f" {result.seconds} s)",
            flush=True,
        )

    started = time.monotonic()
    load = os.getloadavg()
    try:
        address = process.base.removeprefix("http://").rstrip("/")
        server = SoakServer(address, process.token, recordings)
        results = asyncio.run(
            soak(
                server,
                tries=args.tries,
                drop_seconds=args.drop_seconds,
                parallel=args.parallel,
                scenarios=args.scenario,
                chromium=str(CHROMIUM),
                chromium_args=CHROMIUM_ARGS,
                progress=progress,
            )
        )
    finally:
        status = process.stop()
    return {
        "runtime": runtime,
        "seconds": round(time.monotonic() - started, 1),
        "load_average_at_start": [round(value, 1) for value in load],
        "load_average_at_end": [round(value, 1) for value in os.getloadavg()],
        "server_log_tail": process.output[-4000:],
        "server_exit_status": status,
        **summary(results),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=100, help="per scenario and server")
    parser.add_argument("--drop-seconds", type=float, default=30.0)
    parser.add_argument("--parallel", type=int, default=30, help="pages at a time")
    parser.add_argument("--runtime", default="asyncio,trio")
    parser.add_argument("--scenario", default=",".join(SCENARIOS))
    parser.add_argument("--json", type=Path, default=RESULTS / "drop_soak.json")
    parser.add_argument("--note", action="append", default=[], help="kept in the results")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="keep the servers' audit logs and recordings"
    )
    args = parser.parse_args()
    args.scenario = [name for name in args.scenario.split(",") if name]
    unknown = set(args.scenario) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    problem = loopback_only_problem()
    if problem is not None:
        parser.error(f"run it in a loopback-only network namespace (make drop-soak): {problem}")
    started = datetime.datetime.now(datetime.UTC)
    clock = time.monotonic()
    servers = []
    with contextlib.ExitStack() as stack:
        scratch = args.work_dir or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="kuber-drop-soak-")
        )
        for runtime in args.runtime.split(","):
            print(f"{runtime}: {args.tries} tries x {args.scenario}, {args.drop_seconds:g} s drops")
            where = Path(scratch) / runtime
            where.mkdir(parents=True)
            servers.append(_run_server(runtime, args, where))
    tries = sum(server["tries"] for server in servers)
    passes = sum(server["passes"] for server in servers)
    document = {
        "format": 1,
        "source": "benchmarks/drop_soak.py",
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - clock, 1),
        "commit": git_commit(),
        "machine": machine(),
        "settings": {
            "tries_per_scenario": args.tries,
            "drop_seconds": args.drop_seconds,
            "parallel_pages": args.parallel,
            "scenarios": args.scenario,
            "reattach": "from the network's return to the page's resumed open, polled every 0.1 s",
        },
        "notes": args.note,
        "tries": tries,
        "passes": passes,
        "servers": {server["runtime"]: server for server in servers},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    for server in servers:
        print(
            f"{server['runtime']}: {server['passes']}/{server['tries']} in {server['seconds']} s; "
            + "; ".join(
                f"{name} {block['passes']}/{block['tries']} reattach p50"
                f" {block['reattach_seconds_p50']} s p95 {block['reattach_seconds_p95']} s"
                for name, block in server["scenarios"].items()
            )
        )
    print(f"{passes}/{tries} passed; written to {args.json}")
    return 0 if passes == tries else 1


if __name__ == "__main__":
    sys.exit(main())
