"""Running ``kuber-exec`` as a user does: a separate process, ``python -m kuber_exec_cli``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

#: Generous: a run takes well under a second; this only bounds a hang.
RUN_TIMEOUT_SECONDS = 60.0

KUBER_EXEC = (sys.executable, "-m", "kuber_exec_cli")


def cli_env() -> dict[str, str]:
    """The environment for a CLI process: ours, minus anything that could pick another cluster."""
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return env


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``kuber-exec ARGS``; returns its exit status, stdout and stderr (as bytes)."""
    return subprocess.run(
        [*KUBER_EXEC, *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=cli_env(),
        check=False,
    )


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test with ``reason``, or fail it when ``CI=true`` (CI never loses a test)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"required under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def spawn_cli(*args: str, stdin: int = subprocess.PIPE) -> Iterator[subprocess.Popen[bytes]]:
    """``kuber-exec ARGS`` running with piped stdout/stderr; killed and reaped on the way out."""
    process = subprocess.Popen(
        [*KUBER_EXEC, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait(RUN_TIMEOUT_SECONDS)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
