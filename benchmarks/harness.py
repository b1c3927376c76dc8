"""Running the benchmarks: the API servers in processes of their own, and each measurement in a
fresh interpreter (``measure.py``), interleaved round by round so that a noisy neighbour slows
every row alike.

Two servers, each printing one JSON line when ready and stopping when its stdin closes:

- ``fast``: ``fast_server.py``, the benchmark server (output from memory, one epoll loop), which
  the client rows run against; it reports its own CPU time, so every measurement also records
  the server CPU it cost (``server_cpu_seconds``);
- ``sandbox``: ``sandbox_server.py``, the sandbox (pods are local processes), the end-to-end
  figure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
MEASURE = HERE / "measure.py"
SERVERS = {"fast": HERE / "fast_server.py", "sandbox": HERE / "sandbox_server.py"}
MEASUREMENT_TIMEOUT_SECONDS = 300.0
#: The benchmark server's own figures (fast_server.STATS_PATH).
STATS_PATH = "/fast-server/stats"


@attrs.frozen
class Endpoint:
    """A running API server: its URL, kubeconfig, the ready pod of Deployment ``web``."""

    server: str
    url: str
    kubeconfig: str
    pod: str

    def stats(self) -> dict[str, Any] | None:
        """The benchmark server's CPU, memory and connection counts (``None`` for the sandbox)."""
        if self.server != "fast":
            return None
        with urllib.request.urlopen(self.url + STATS_PATH, timeout=30) as answer:
            stats: dict[str, Any] = json.load(answer)
        return stats


@attrs.frozen
class Job:
    """One row of a round: a ``measure.py`` kind with its options, and the environment to run
    it in (``None``: this one). ``key`` names the row in the results."""

    key: str
    kind: str
    options: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    #: The script (and its leading arguments) that measures ``kind``.
    script: tuple[str, ...] = (str(MEASURE),)
    timeout: float = MEASUREMENT_TIMEOUT_SECONDS


@attrs.define
class Samples:
    """The reports of one row (one per round), or the failure that stopped it."""

    key: str
    kind: str
    reports: list[dict[str, Any]] = attrs.Factory(list)
    error: str | None = None

    def median(self, key: str) -> float | None:
        values = [report[key] for report in self.reports if report.get(key) is not None]
        return statistics.median(values) if values else None

    @property
    def rate(self) -> float | None:
        """Median throughput in bytes per second."""
        rates = [
            report["bytes"] / report["seconds"] for report in self.reports if "bytes" in report
        ]
        return statistics.median(rates) if rates else None

    def per_100mb(self, key: str) -> float | None:
        """The median of ``key`` per 100 MB transferred (CPU seconds per 100 MB)."""
        values = [
            report[key] * 1e8 / report["bytes"]
            for report in self.reports
            if report.get(key) is not None and report.get("bytes")
        ]
        return statistics.median(values) if values else None


@contextmanager
def server_process(server: str, env: Mapping[str, str] | None = None) -> Iterator[Endpoint]:
    """``server`` (``fast`` or ``sandbox``) in its own process; it exits when its stdin closes."""
    process = subprocess.Popen(
        [sys.executable, str(SERVERS[server])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=None if env is None else dict(env),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {server} server exited before it was ready")
        ready = json.loads(line)
        yield Endpoint(server, ready["url"], ready["kubeconfig"], ready["pod"])
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def measure(endpoint: Endpoint, job: Job) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its JSON report (with the server
    CPU it cost, on the benchmark server).

    Raises:
        RuntimeError: the measurement failed (its stderr's last line says why).
    """
    argv = [sys.executable, *job.script, job.kind, "--url", endpoint.url]
    argv += ["--kubeconfig", endpoint.kubeconfig, "--pod", endpoint.pod, *job.options]
    before = endpoint.stats()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=job.timeout,
            env=None if job.env is None else dict(job.env),
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {job.timeout:g} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise RuntimeError(lines[-1])
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    after = endpoint.stats()
    if before is not None and after is not None:
        # The whole process's life, not just the timed transfer: an upper bound.
        report["server_cpu_seconds"] = after["cpu_seconds"] - before["cpu_seconds"]
    return report


def rounds(
    endpoint: Endpoint,
    jobs: Sequence[Job],
    repeat: int,
    progress: str,
    *,
    alternate: bool = False,
) -> dict[str, Samples]:
    """``repeat`` rounds, each running every job once, in order (interleaved, so drift hits
    every row alike; ``alternate`` reverses the order every other round, so that no row always
    runs right after another); a job that fails once is not run again."""
    samples = {job.key: Samples(job.key, job.kind) for job in jobs}
    for number in range(repeat):
        for job in reversed(jobs) if alternate and number % 2 else jobs:
            sample = samples[job.key]
            if sample.error is not None:
                continue
            show_progress(f"{progress}: round {number + 1}/{repeat}, {job.key}")
            try:
                sample.reports.append(measure(endpoint, job))
            except RuntimeError as error:
                sample.error = str(error)
    show_progress("")
    return samples


def check_source(sample: Samples, expected: Path) -> None:
    """Fail ``sample`` if one of its reports imported kuber-exec from elsewhere than
    ``expected`` (reports of rows that do not import it name no source)."""
    for report in sample.reports:
        source = report.get("source")
        if source is not None and Path(source) != expected:
            sample.error = f"imported kuber-exec from {source}, not {expected}"
            sample.reports.clear()
            return


def show_progress(text: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\x1b[K{text}")
        sys.stderr.flush()


def source_env(src: Path) -> dict[str, str]:
    """This environment with ``src`` first on ``PYTHONPATH``: its packages shadow the editable
    install's (whose path entry comes after ``PYTHONPATH``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    return env
