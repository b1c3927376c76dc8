"""``kuber-exec exec``: from parsed options to one streamed session on the chosen cluster.

Contract of :func:`run_exec`: what can be checked locally (the caps' range, ``-it`` needing a
terminal) is checked before anything is contacted; then the backend is opened (the in-process
sandbox, or a kubeconfig context) and the request goes through
:class:`~kuber_exec_trio.ExecService`, so the target is resolved, checked and ranked exactly as a
platform backend using the library would, and the bytes move over the same session code. It
returns the remote exit code and raises ``ExecError`` for everything else.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from kuber_exec_core import StreamName
from kuber_exec_trio import (
    ClusterConfig,
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecService,
    KubernetesBackend,
)

from ._arguments import CopyOptions, ExecOptions
from ._sandbox import open_demo_sandbox
from ._streaming import LocalStreams, stream_session

__all__ = ["open_backend", "run_exec"]


async def run_exec(options: ExecOptions, streams: LocalStreams) -> int:
    """``kuber-exec exec``: connect as ``options`` says and stream one session.

    Returns the remote exit code. Raises ``ExecError`` for everything else.
    """
    limits = ExecLimits()
    # Validated up front, with the service's bounds, before anything is contacted.
    stdout_cap = _cap(options.stdout_cap, "stdout", limits)
    stderr_cap = _cap(options.stderr_cap, "stderr", limits)
    if options.stdin and options.tty and not os.isatty(streams.stdin_fd):
        raise ExecError(
            ExecErrorCode.INVALID,
            "-it needs a terminal on stdin, and stdin is a pipe or a file; "
            "drop -t to pipe data into the command",
        )
    request = options.request()
    async with open_backend(options) as backend:
        service = ExecService(backend, limits, subprotocols=options.subprotocols or None)
        return await stream_session(
            service,
            request,
            streams,
            stdin=options.stdin,
            tty=options.tty,
            stdout_cap=stdout_cap,
            stderr_cap=stderr_cap,
        )


def _cap(value: int | None, stream: StreamName, limits: ExecLimits) -> int | None:
    # The service's rule for a cap (1..max_output_cap_bytes; argparse already made it an int),
    # in the option's name rather than the service's keyword (stdoutCapBytes).
    if value is None or 1 <= value <= limits.max_output_cap_bytes:
        return value
    raise ExecError(
        ExecErrorCode.INVALID,
        f"--{stream}-cap must be between 1 and {limits.max_output_cap_bytes} bytes",
    )


@asynccontextmanager
async def open_backend(options: ExecOptions | CopyOptions) -> AsyncIterator[KubernetesBackend]:
    """A backend for the options' cluster: the in-process sandbox, or a kubeconfig context."""
    if options.sandbox:
        async with open_demo_sandbox() as url, KubernetesBackend(ClusterConfig(url)) as backend:
            yield backend
        return
    # Loading may run an exec credential plugin: keep it off the event loop.
    config = await trio.to_thread.run_sync(
        ClusterConfig.from_kubeconfig, options.kubeconfig, options.context
    )
    async with KubernetesBackend(config) as backend:
        yield backend
