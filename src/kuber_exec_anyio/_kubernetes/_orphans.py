"""Ending what a dead replica's sessions left running, from the shared record.

A session record's entry names the pod, container and supervision id of the session's command;
when its replica died (``kill -9``, a lost node) or was shut down before it could clean up,
another replica runs the supervision's cleanup there (docs/cleanup.md) before it removes the
entry. Bounded like every cleanup: ``2 * grace + 2`` seconds per container.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from kuber_exec_core import (
    DEFAULT_SUBPROTOCOLS,
    ExecError,
    ExecStreams,
    ExecuteRun,
    ResolvedTarget,
)
from kuber_exec_core.supervision import CleanupOutcome, Supervision, parse_cleanup_output

from .._backend import Backend
from .._drivers import collect_execute

__all__ = ["clean_orphans"]

logger = logging.getLogger("kuber_exec")

_GRACE = 2.0
_MARGIN = 2.0
_OUTPUT_CAP = 4096
_AT_ONCE = 16


async def clean_orphans(
    backend: Backend, target: ResolvedTarget, sessions: Sequence[tuple[str, bool]]
) -> None:
    """Run the cleanup of each ``(supervision id, hangup)`` in ``target``; never raises."""
    limiter = anyio.CapacityLimiter(_AT_ONCE)
    outcomes: list[CleanupOutcome] = []

    async def clean_one(session_id: str, hangup: bool) -> None:
        command = Supervision(session_id).cleanup_command(grace=_GRACE, hangup=hangup)
        streams = ExecStreams(stdin=False, stdout=True, stderr=True, tty=False)
        outcome = CleanupOutcome.FAILED
        with anyio.move_on_after(2 * _GRACE + _MARGIN):
            try:
                async with (
                    limiter,
                    backend.exec(target, command, streams, DEFAULT_SUBPROTOCOLS) as connection,
                ):
                    run = ExecuteRun(
                        target,
                        connection.subprotocol,
                        stdout_cap=_OUTPUT_CAP,
                        stderr_cap=_OUTPUT_CAP,
                    )
                    result = await collect_execute(run, connection)
                outcome = parse_cleanup_output(result.stdout, result.exit_code)
            except ExecError as error:
                logger.warning(
                    "cleaning up after a dead replica in %s/%s failed: %s",
                    target.namespace,
                    target.pod,
                    error,
                )
        outcomes.append(outcome)

    async with anyio.create_task_group() as tasks:
        for session_id, hangup in sessions:
            tasks.start_soon(clean_one, session_id, hangup)
    logger.info(
        "cleaned up %d sessions of a dead replica in %s/%s: %s",
        len(sessions),
        target.namespace,
        target.pod,
        ", ".join(sorted({outcome.value for outcome in outcomes})),
    )
