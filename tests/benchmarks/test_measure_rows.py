"""The bare rows of benchmarks/measure.py count exactly the stdout the benchmark server sent.

Correctness only (no timing): each row runs as ``make bench`` runs it, in its own interpreter, on
an odd size, in whole 32 KiB messages and in messages larger than a receive.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .fast_server_support import BENCHMARKS, FastServer

ROWS = (
    "trio-bare",
    "trio-socket-bare",
    "trio-wsproto-bare",
    "trio-sansio-bare",
    "trio-websockets-bare",
    "asyncio-bare",
    "asyncio-bare-keep",
)


def measure(fast_server: FastServer, kind: str, *options: str) -> dict[str, object]:
    argv = [sys.executable, str(BENCHMARKS / "measure.py"), kind, "--url", fast_server.url]
    argv += ["--kubeconfig", fast_server.kubeconfig, "--pod", fast_server.pod, *options]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return report


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize(
    "options",
    [
        ("--bytes", "1000003"),  # 30 whole 32 KiB messages and a short one
        ("--bytes", "700001", "--message-bytes", "300000"),  # messages over a 64 KiB receive
        ("--bytes", "100000", "--receive-bytes", "4096"),  # many receives per message
    ],
)
def test_a_bare_row_receives_exactly_the_output(
    fast_server: FastServer, kind: str, options: tuple[str, ...]
) -> None:
    report = measure(fast_server, kind, *options)
    assert report["kind"] == kind
    assert report["bytes"] == int(options[1])


def test_an_unparsed_read_counts_only_a_complete_stream() -> None:
    """The rows that parse nothing (raw-sink, trio-socket-bare) accept the byte count only when
    the stream ends with the success Status and the Close."""
    from measure import SUCCESS_STATUS, _check_unparsed

    end = bytes((0x82, len(SUCCESS_STATUS) + 1, 3)) + SUCCESS_STATUS + b"\x88\x02\x03\xe8"
    _check_unparsed("row", 1000, end, 1000)
    with pytest.raises(RuntimeError, match="did not end in the success Status"):
        _check_unparsed("row", 999, end, 1000)  # fewer wire bytes than the payload
    with pytest.raises(RuntimeError, match="did not end in the success Status"):
        _check_unparsed("row", 5000, end[:-1], 1000)  # cut off before the Close's end
