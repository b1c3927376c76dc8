"""The sandbox for one test, served on trio in a thread of its own, whatever loop the test runs.

Like ``kuber_exec_sandbox.run_sandbox_in_thread``, but it keeps the server loop's trio
token, so that a test on any event loop can wait for something that happens on the server's
(``wait_processes_reaped``) without polling.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import trio

    from kuber_exec_sandbox import Cluster, Sandbox

__all__ = ["SandboxThread"]

T = TypeVar("T")
_STOP_TIMEOUT_SECONDS = 30.0


class SandboxThread:
    """``serve_sandbox(cluster, **options)`` on trio in a daemon thread (start, call, stop)."""

    def __init__(self, cluster: Cluster, options: dict[str, Any]) -> None:
        self._cluster = cluster
        self._options = options
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._failure: BaseException | None = None

    def start(self) -> Sandbox:
        """Start serving and return the running sandbox.

        Raises:
            Whatever ``serve_sandbox`` raised while starting (``NonLoopbackError``, ``OSError``).
        """
        import trio

        from kuber_exec_sandbox import serve_sandbox

        started: queue.Queue[Sandbox | BaseException] = queue.Queue()

        async def main() -> None:
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            try:
                async with serve_sandbox(self._cluster, **self._options) as sandbox:
                    started.put(sandbox)
                    await self._stop.wait()
            except BaseException as error:
                started.put(error)
                raise

        def target() -> None:
            try:
                trio.run(main)
            except BaseException as error:
                self._failure = error

        self._thread = threading.Thread(target=target, name="kuber-exec-sandbox", daemon=True)
        self._thread.start()
        first = started.get()
        if isinstance(first, BaseException):
            self._thread.join()
            raise first
        return first

    def call(self, function: Callable[[], Awaitable[T]]) -> T:
        """Run ``function()`` on the server's loop and return its result (blocks this thread)."""
        import trio

        assert self._token is not None, "the sandbox is not running"
        return trio.from_thread.run(function, trio_token=self._token)

    def stop(self) -> None:
        """Stop serving (every child process is killed and reaped) and join the thread.

        Raises:
            RuntimeError: the server failed while serving, or did not stop within 30 seconds.
        """
        import trio

        if self._thread is None or self._token is None or self._stop is None:
            return
        stop = self._stop
        # RunFinishedError: it had already stopped (with a failure, reported below).
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(stop.set, trio_token=self._token)
        self._thread.join(_STOP_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            raise RuntimeError("the kuber-exec sandbox thread did not stop")
        if self._failure is not None:
            raise RuntimeError("the kuber-exec sandbox failed while serving") from self._failure
