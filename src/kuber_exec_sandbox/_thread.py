"""``run_sandbox_in_thread``: the trio sandbox for asyncio code and other threads.

The sandbox runs under ``trio.run`` in a daemon thread; the caller gets the same
:class:`Sandbox` object. Leaving the ``with`` block asks the trio side to leave its ``async with``
(which kills and reaps every child process) and joins the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from ._cluster import Cluster
from ._server import Sandbox, serve_sandbox

__all__ = ["run_sandbox_in_thread"]

_STOP_TIMEOUT_SECONDS = 30.0
_log = logging.getLogger("kuber_exec_sandbox")


@contextmanager
def run_sandbox_in_thread(cluster: Cluster | None = None, **kwargs: Any) -> Iterator[Sandbox]:
    """Run :func:`serve_sandbox` (same arguments) on trio in a background thread.

    Raises:
        Whatever ``serve_sandbox`` raised while starting (e.g. ``NonLoopbackError``).
        RuntimeError: the server thread did not stop within 30 seconds.

    Mutate ``sandbox.cluster`` only while no request is being served (e.g. before connecting).
    """
    started: queue.Queue[tuple[Sandbox, trio.lowlevel.TrioToken, trio.Event] | BaseException] = (
        queue.Queue()
    )

    async def main() -> None:
        stop = trio.Event()
        try:
            async with serve_sandbox(cluster, **kwargs) as sandbox:
                started.put((sandbox, trio.lowlevel.current_trio_token(), stop))
                await stop.wait()
        except BaseException as error:
            started.put(error)
            raise

    def target() -> None:
        try:
            trio.run(main)
        except BaseException:
            # Also handed to the caller through the queue; logged for a crash while serving.
            _log.exception("the sandbox server stopped with an error")

    thread = threading.Thread(target=target, name="kuber-exec-sandbox", daemon=True)
    thread.start()
    first = started.get()
    if isinstance(first, BaseException):
        thread.join()
        raise first
    sandbox, token, stop = first
    try:
        yield sandbox
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(_STOP_TIMEOUT_SECONDS)
        if thread.is_alive():
            raise RuntimeError("the sandbox thread did not stop")
    if not started.empty():
        # The server crashed while serving: report it rather than lose it with the thread.
        late = started.get()
        if isinstance(late, BaseException):
            raise RuntimeError("the sandbox server failed while serving") from late
