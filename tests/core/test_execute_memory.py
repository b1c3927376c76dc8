"""``execute``'s capture costs about one byte of memory per output byte, not two."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

from kuber_exec_core import ExecResult, ResolvedTarget, Subprotocol
from kuber_exec_core._execute import ExecuteRun, OutputBuffer

TARGET = ResolvedTarget(
    namespace="demo", deployment="web", deployment_uid="d", pod="p", pod_uid="u", container="c"
)
CHUNK = b"\x00" * 32 * 1024
TOTAL = 16 * 1024 * 1024


def _peak_while(work: Callable[[], None]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_capturing_n_bytes_peaks_near_n_bytes() -> None:
    def capture() -> None:
        buffer = OutputBuffer("stdout", TOTAL)
        for _ in range(TOTAL // len(CHUNK)):
            buffer.add(bytes(bytearray(CHUNK)))  # a fresh object each time, as received
        assert len(buffer.getvalue()) == TOTAL

    # Keeping chunks and joining them peaks at 2 N; one growing buffer handed over uncopied
    # stays within its growth slack (1/8) of N.
    assert _peak_while(capture) < 1.25 * TOTAL


def test_a_whole_run_peaks_near_its_output() -> None:
    def run() -> None:
        execute = ExecuteRun(TARGET, Subprotocol.V5, stdout_cap=TOTAL, stderr_cap=TOTAL)
        message = b"\x01" + CHUNK
        for _ in range(TOTAL // len(CHUNK)):
            execute.receive_message(message)
            execute.next_event()
        execute.receive_message(b'\x03{"metadata":{},"status":"Success"}')
        result = execute.next_event()
        assert isinstance(result, ExecResult)
        assert len(result.stdout) == TOTAL

    assert _peak_while(run) < 1.25 * TOTAL
