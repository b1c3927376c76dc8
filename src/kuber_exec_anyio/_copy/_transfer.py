"""One transfer of a copy: an interactive exec (no TTY) whose stdin and stdout carry the bytes.

Built on ``ExecService.open_interactive``, so a copy is targeted, ownership-checked, limited
and audited exactly as any exec, and whatever the service does about a cancelled exec applies
to it. Memory stays flat: stdin goes out one frame (at most ``max_stdin_frame_bytes``) at a
time, each ``send`` waiting for the socket (backpressure from the server); stdout is handed to
the caller frame by frame from the session's bounded queue, so a slow local disk stops the
socket being read. Only stderr is kept, up to :data:`STDERR_CAP` bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable

import anyio

from kuber_exec_core import (
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    Exit,
    ResolvedTarget,
    Stderr,
    Stdin,
    Stdout,
    Subprotocol,
)

from .._groups import single_exception
from .._service import ExecService

__all__ = ["STDERR_CAP", "Transfer", "run_transfer"]

#: The stderr a transfer keeps: the tools' messages and the ``kx-`` summary lines.
STDERR_CAP = 64 * 1024

Source = AsyncIterable[bytes] | Iterable[bytes]


class Transfer:
    """How one transfer ended: its terminal frame (``None``: no frame came), its stderr, the
    stdin bytes sent, and the target it ran on."""

    def __init__(self) -> None:
        self.final: Exit | Error | None = None
        self.stderr = bytearray()
        self.sent = 0
        self.target: ResolvedTarget | None = None

    @property
    def exited_cleanly(self) -> bool:
        return isinstance(self.final, Exit) and self.final.exit_code == 0


async def run_transfer(
    service: ExecService,
    request: ExecRequest,
    *,
    source: Source | None = None,
    on_stdout: Callable[[bytes], Awaitable[None] | None] | None = None,
    on_piece: Callable[[bytes], None] | None = None,
    on_sent: Callable[[int], None] | None = None,
    on_target: Callable[[ResolvedTarget], None] | None = None,
) -> Transfer:
    """Run ``request``; send ``source``'s pieces as its stdin (then close stdin where the
    subprotocol can; with v4 the command must stop reading by itself, ``head -c N``), telling
    ``on_piece`` of each piece before it goes and ``on_sent`` of the bytes sent, and hand each
    stdout piece to ``on_stdout``. Returns when the command has exited or the connection
    ended; an exception from ``on_stdout`` ends the exec and propagates.

    Raises:
        ExecError: any of ``open_interactive``'s on entry.
    """
    transfer = Transfer()
    limit = service.limits.max_stdin_frame_bytes
    async with service.open_interactive(request, tty=False, stdin=source is not None) as session:
        transfer.target = session.target
        if on_target is not None:
            on_target(session.target)

        # Small pieces (a tar header, a small file, padding) are joined into frames of up to
        # ``limit`` bytes: a tree of many small files would otherwise cost one WebSocket
        # message, and one await on the socket, per 512-byte header.
        joined = bytearray()

        async def send_all() -> None:
            assert source is not None
            if isinstance(source, Iterable):
                pieces = iter(source)
                try:
                    for piece in pieces:
                        if not await _send(piece):
                            return
                finally:
                    # A generator left early closes its open file now.
                    stop = getattr(pieces, "close", None)
                    if stop is not None:
                        stop()
            else:
                iterator = aiter(source)
                try:
                    async for piece in iterator:
                        if not await _send(piece):
                            return
                finally:
                    # An async generator left early is closed now, not by the collector.
                    close = getattr(iterator, "aclose", None)
                    if close is not None:
                        await close()
            if joined and not await _flush(bytes(joined)):
                return
            if session.protocol is Subprotocol.V5:
                await _deliver(Stdin(b"", eof=True))

        async def _send(piece: bytes) -> bool:
            if on_piece is not None:
                on_piece(piece)
            view = memoryview(piece)
            if joined:
                room = limit - len(joined)
                joined.extend(view[:room])
                view = view[room:]
                if len(joined) < limit:
                    return True
                chunk = bytes(joined)
                joined.clear()
                if not await _flush(chunk):
                    return False
            while len(view) >= limit:
                if not await _flush(bytes(view[:limit])):
                    return False
                view = view[limit:]
            joined.extend(view)
            return True

        async def _flush(chunk: bytes) -> bool:
            if not await _deliver(Stdin(chunk)):
                return False
            transfer.sent += len(chunk)
            if on_sent is not None:
                on_sent(len(chunk))
            return True

        async def _deliver(frame: Stdin) -> bool:
            try:
                await session.send(frame)
            except ExecError as error:
                # The command exited (or the connection broke) before it read everything: the
                # reader sees how, and that is what the copy reports. An error of the source
                # itself is not caught here: it ends the transfer.
                if error.code in (ExecErrorCode.ABORTED, ExecErrorCode.FAILED):
                    return False
                raise
            return True

        with single_exception():
            async with anyio.create_task_group() as tasks:
                if source is not None:
                    tasks.start_soon(send_all)
                async for frame in session:
                    if isinstance(frame, Stdout):
                        if on_stdout is not None:
                            pending = on_stdout(frame.data)
                            if pending is not None:
                                await pending
                    elif isinstance(frame, Stderr):
                        room = STDERR_CAP - len(transfer.stderr)
                        transfer.stderr += frame.data[: max(room, 0)]
                    elif isinstance(frame, Exit | Error):
                        transfer.final = frame
                tasks.cancel_scope.cancel()
    return transfer
