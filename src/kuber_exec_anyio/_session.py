"""``InteractiveSession``: a running interactive exec, its frames and its bounded queue.

One reader task ("next event; if it needs data, await a message and feed it") moves frames from
the core's session into a bounded memory stream of ``queue_capacity`` frames; when the consumer
stops reading, the stream fills, the reader stops reading the socket, and TCP pushes back on the
server. One locked send path writes the client's frames. The core decides everything else: which
frames may be sent, when the session has ended, what a close means.
"""

from __future__ import annotations

import anyio

from kuber_exec_core import (
    ClientFrame,
    Close,
    Error,
    ExecError,
    ExecErrorCode,
    ExecSession,
    Exit,
    Resize,
    ResolvedTarget,
    ServerFrame,
    Stderr,
    Stdin,
    Stdout,
    Subprotocol,
)
from kuber_exec_core.state import SessionState

from ._backend import ExecConnection
from ._drivers import pump_session

__all__ = ["InteractiveSession"]


class InteractiveSession:
    """A running interactive exec, yielded by ``ExecService.open_interactive``.

    Iterate it for ``Stdout`` / ``Stderr`` frames followed by exactly one ``Exit`` or ``Error``
    (then iteration ends); ``send`` ``Stdin`` / ``Resize`` / ``Close`` frames. After ``aclose``
    (or a ``Close`` frame) iteration ends at once and ``send`` raises ``EXEC_ABORTED``.
    Cancelling the task that awaits ``send`` or the iteration cancels only that await (a
    cancelled ``send`` may have written part of its frame); leaving the ``open_interactive``
    block closes the socket.
    """

    def __init__(
        self,
        target: ResolvedTarget,
        connection: ExecConnection,
        session: ExecSession,
        queue_capacity: int,
    ) -> None:
        self.target = target
        self._connection = connection
        self._session = session
        self._frames_in, self._frames_out = anyio.create_memory_object_stream[ServerFrame](
            queue_capacity
        )
        self._send_lock = anyio.Lock()
        self._reader_scope = anyio.CancelScope()
        # For the audit events and the session limits (kuber_exec_anyio._audit): stdin bytes
        # sent, output bytes received, the time of the last of either (or of a resize), the
        # terminal frame received, and the Error a service limit ended the session with.
        self._bytes_in = 0
        self._bytes_out = 0
        self._last_activity = anyio.current_time()
        self._terminal: Exit | Error | None = None
        self._ended_by: Error | None = None

    def __repr__(self) -> str:
        return (
            f"<InteractiveSession pod={self.target.pod!r} container={self.target.container!r} "
            f"{self.protocol.value} {self._session.state.name}>"
        )

    @property
    def protocol(self) -> Subprotocol:
        """The negotiated subprotocol (stdin EOF needs ``v5.channel.k8s.io``)."""
        return self._session.subprotocol

    async def send(self, frame: ClientFrame) -> None:
        """Send a client frame.

        Raises:
            ExecError: ``EXEC_ABORTED`` once the session has ended or was closed;
                ``EXEC_INVALID`` for a frame the session cannot carry (nothing is sent);
                ``EXEC_FAILED`` when the connection broke while sending.
        """
        if self._ended_by is not None and not isinstance(frame, Close):
            raise ExecError(
                ExecErrorCode.ABORTED, f"the session has ended: {self._ended_by.message}"
            )
        # The core validates and accounts for the frame before anything is written; the lock
        # is taken with no checkpoint in between, so frames go out in the order they came.
        messages = self._session.send(frame)
        if isinstance(frame, Stdin | Resize):
            self._last_activity = anyio.current_time()
            if isinstance(frame, Stdin):
                self._bytes_in += len(frame.data)
        if self._session.state is SessionState.CLOSED:
            self._release()
            return
        async with self._send_lock:
            # Under the lock, so that two senders' chunks never interleave.
            for message in messages:
                await self._connection.send_message(message)

    async def aclose(self) -> None:
        """Close from the client side: no more frames are yielded; idempotent."""
        await self.send(Close())

    def __aiter__(self) -> InteractiveSession:
        return self

    async def __anext__(self) -> ServerFrame:
        # A plain iterator, not an async generator: breaking out of ``async for`` must not
        # leave a half-run generator for the garbage collector to finalize.
        if self._session.state is SessionState.CLOSED:
            raise StopAsyncIteration
        try:
            # A queued frame is taken without a trip through the event loop (one per frame on
            # each side is most of the per-message cost); a cancelled caller still stops here.
            await anyio.lowlevel.checkpoint_if_cancelled()
            try:
                return self._frames_out.receive_nowait()
            except anyio.WouldBlock:
                return await self._frames_out.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def run_reader(self) -> None:
        """The reader task: core events into the bounded stream until the terminal frame."""
        async with self._frames_in:
            with self._reader_scope:
                await pump_session(self._session, self._connection, self._deliver)
            if self._ended_by is not None:
                await self._deliver(self._ended_by)  # A service limit: the terminal frame.

    @property
    def _finished(self) -> bool:
        # Nothing more will be read: the session ended, was closed, or a limit ended it.
        return self._session.is_finished or self._ended_by is not None

    def _end_with(self, error: Error) -> None:
        """For the service's limits: stop reading and deliver ``error`` as the terminal frame."""
        if self._finished:
            return
        self._ended_by = error
        self._terminal = error
        self._reader_scope.cancel()

    def _dispose(self) -> None:
        """For the owner, once the reader has stopped: release the frame stream's receiving end."""
        self._frames_out.close()

    def _release(self) -> None:
        # After a client close nothing more is delivered: stop the reader (which closes the
        # stream's sending side, waking a consumer blocked in ``__anext__``).
        self._reader_scope.cancel()

    async def _deliver(self, frame: ServerFrame) -> bool:
        if isinstance(frame, Stdout | Stderr):
            self._bytes_out += len(frame.data)
            self._last_activity = anyio.current_time()
        elif isinstance(frame, Exit | Error) and self._terminal is None:
            self._terminal = frame
        try:
            # As in __anext__: straight into the queue while it has room; wait only when full.
            try:
                self._frames_in.send_nowait(frame)
            except anyio.WouldBlock:
                await self._frames_in.send(frame)
        except anyio.BrokenResourceError:
            return False  # The consumer closed: nothing more to deliver.
        return True
