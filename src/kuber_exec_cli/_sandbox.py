"""The in-process sandbox, as the command line uses it: ``--sandbox``, ``demo`` and ``sandbox``.

``kuber_exec_sandbox`` is imported only when one of those is used, so that ``kuber-exec exec``
against a real cluster does not load a server. The demo workspace's names here are the ones the
sandbox's ``demo_cluster`` labels its Deployment ``web`` with; they are the ``--sandbox``
defaults and what ``kuber-exec demo`` runs in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kuber_exec_core import ExecError, ExecErrorCode

from ._local import EXIT_ERROR, LocalStreams, report

__all__ = ["DEMO_PROJECT", "DEMO_WORKSPACE_UID", "open_demo_sandbox", "run_sandbox_command"]

#: The sandbox's demo workspace, the defaults of ``--sandbox``.
DEMO_PROJECT = "demo"
DEMO_WORKSPACE_UID = "demo-uid"


@asynccontextmanager
async def open_demo_sandbox() -> AsyncIterator[str]:
    """Serve the sandbox with the demo cluster on loopback for the block; yields its URL.

    The sandbox runs on trio, in a thread of its own (the command line runs on asyncio);
    leaving the block stops it, its child processes killed and reaped."""
    from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread

    # Its start and stop block the event loop for a moment, on purpose: nothing else runs then,
    # and a stop that waited in a worker thread could be skipped by a cancellation (Ctrl-C).
    with run_sandbox_in_thread(demo_cluster()) as sandbox:
        yield sandbox.url


def run_sandbox_command(argv: list[str]) -> int:
    """``kuber-exec sandbox ARGV``: the sandbox's own command line, options and help included."""
    try:
        from kuber_exec_sandbox import main as sandbox_main
    except ImportError as error:
        report(
            LocalStreams.of_process(),
            ExecError(ExecErrorCode.FAILED, f"the sandbox is not available: {error}"),
        )
        return EXIT_ERROR
    return sandbox_main(argv)
