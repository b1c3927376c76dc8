"""``InteractiveSession``: a running interactive exec, its frames and its bounded queue.

One reader task ("next event; if it needs data, await a message and feed it") moves frames from
the core's session into a bounded queue (``FrameQueue``) of ``queue_capacity`` frames; when the
consumer stops reading, the queue fills, the reader stops reading the socket, and TCP pushes back
on the server. One locked send path writes the client's frames. The core decides everything else:
which frames may be sent, when and how the session has ended (its ``final_frame``), what a close
means, and the bytes moved. :func:`run_session` is the session's life in its owner's hands: the
reader, the time limits, and the release of both when the owner's block is left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

try:
    # Not public API: the running backend, looked up once per session (see __init__). The
    # bound in pyproject.toml (anyio<5) and tests/async_layer/test_anyio_private.py guard it.
    from anyio._core._eventloop import get_async_backend
except ImportError as error:  # pragma: no cover - only with an anyio we do not support
    raise ImportError(
        "kuber_exec_anyio needs anyio 4 (anyio._core._eventloop.get_async_backend is gone): "
        "install anyio>=4.4,<5"
    ) from error

from kuber_exec_core import (
    SESSION_ENDED,
    ClientFrame,
    Close,
    Error,
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
from kuber_exec_core.limits import SessionDeadlines
from kuber_exec_core.state import SessionState

from ._audit._record import AuditRecord
from ._backend import ExecConnection
from ._drivers import pump_session
from ._frame_queue import FrameQueue
from ._groups import single_exception
from ._limits import enforce_session_limits

if TYPE_CHECKING:
    from ._audit._recording import SessionRecorder

__all__ = ["InteractiveSession", "run_session"]


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
        deadlines: SessionDeadlines | None = None,
        recorder: SessionRecorder | None = None,
        *,
        initial_frames: Sequence[ServerFrame] = (),
        audit: AuditRecord | None = None,
    ) -> None:
        self.target = target
        # Pulled before the session was handed over (while its start mark was awaited).
        self._initial_frames = tuple(initial_frames)
        self._connection = connection
        self._session = session
        self._frames = FrameQueue[ServerFrame](queue_capacity)
        self._send_lock = anyio.Lock()
        self._reader_scope = anyio.CancelScope()
        # Told of each moment of activity when an idle timeout is set (else never: the clock is
        # read per frame only when something needs it).
        watched = deadlines is not None and deadlines.watches_activity
        self._deadlines = deadlines if watched else None
        self._recorder = recorder
        #: The session's audit record (a shared session adds its viewers' events to it).
        self.audit = audit
        # anyio.lowlevel.checkpoint_if_cancelled asks sniffio for the running library on every
        # call, which was a measurable share of a frame's cost: the backend is looked up once.
        self._checkpoint_if_cancelled = get_async_backend().checkpoint_if_cancelled

    def __repr__(self) -> str:
        return (
            f"<InteractiveSession pod={self.target.pod!r} container={self.target.container!r} "
            f"{self.protocol.value} {self._session.state.name}>"
        )

    @property
    def protocol(self) -> Subprotocol:
        """The negotiated subprotocol (stdin EOF needs ``v5.channel.k8s.io``)."""
        return self._session.subprotocol

    @property
    def state(self) -> SessionState:
        """The core session's state (:class:`~kuber_exec_core.state.SessionState`)."""
        return self._session.state

    @property
    def final_frame(self) -> Exit | Error | None:
        """How the session ended: the ``Exit`` or ``Error`` received, or the ``Error`` it was
        ended with (:meth:`end`); ``None`` while it runs, or when the client closed it first."""
        return self._session.final_frame

    @property
    def bytes_in(self) -> int:
        """stdin bytes sent to the process."""
        return self._session.bytes_in

    @property
    def bytes_out(self) -> int:
        """stdout and stderr bytes received from the process."""
        return self._session.bytes_out

    async def send(self, frame: ClientFrame) -> None:
        """Send a client frame.

        Raises:
            ExecError: ``EXEC_ABORTED`` once the session has ended or was closed;
                ``EXEC_INVALID`` for a frame the session cannot carry (nothing is sent);
                ``EXEC_FAILED`` when the connection broke while sending.
        """
        # The core validates and accounts for the frame before anything is written; the lock
        # is taken with no checkpoint in between, so frames go out in the order they came.
        messages = self._session.send(frame)
        if self._recorder is not None:
            self._recorder.sent(frame)
        if self._deadlines is not None and isinstance(frame, Stdin | Resize):
            self._deadlines.activity(anyio.current_time())
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
            await self._checkpoint_if_cancelled()
            try:
                return self._frames.get_nowait()
            except anyio.WouldBlock:
                return await self._frames.get()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    def end(self, error: Error) -> None:
        """End the session now with ``error`` as its terminal frame (a limit, the platform): the
        socket is no longer read, iteration yields ``error`` and stops, and ``send`` raises
        ``EXEC_ABORTED`` naming ``error.message``. Nothing is sent to the process (see
        docs/errors.md). No effect once the session has ended or was closed (a terminal frame
        already on its way to the consumer stays the one it gets)."""
        if self._session.end(error):
            self._reader_scope.cancel()

    async def run_reader(self) -> None:
        """The reader task: core events into the bounded stream until the terminal frame."""
        try:
            with self._reader_scope:
                for frame in self._initial_frames:
                    if not await self._deliver(frame):
                        return
                await pump_session(self._session, self._connection, self._deliver)
            # A local end cancelled the pump: the core still holds the terminal frame it was
            # given; after a client close it holds nothing.
            if (event := self._session.next_event()) is not SESSION_ENDED:
                assert isinstance(event, Error)
                await self._deliver(event)
        finally:
            self._frames.close_sender()

    def _release(self) -> None:
        # After a client close nothing more is delivered: stop the reader (which closes the
        # stream's sending side, waking a consumer blocked in ``__anext__``).
        self._reader_scope.cancel()

    async def _deliver(self, frame: ServerFrame) -> bool:
        if self._deadlines is not None and isinstance(frame, Stdout | Stderr):
            self._deadlines.activity(anyio.current_time())
        if self._recorder is not None and isinstance(frame, Stdout | Stderr):
            await self._recorder.received(frame)
        try:
            # As in __anext__: straight into the queue while it has room; wait only when full.
            try:
                self._frames.put_nowait(frame)
            except anyio.WouldBlock:
                await self._frames.put(frame)
        except anyio.BrokenResourceError:
            return False  # The consumer closed: nothing more to deliver.
        return True


@asynccontextmanager
async def run_session(
    session: InteractiveSession, deadlines: SessionDeadlines | None
) -> AsyncIterator[InteractiveSession]:
    """Run ``session`` for the block: its reader, and its time limits when ``deadlines`` has
    any. Leaving the block closes the session from the client side, stops both tasks and
    releases the frame stream; an exception from the block or a task comes out as itself."""
    try:
        with single_exception():
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(session.run_reader)
                if deadlines is not None and deadlines.next_deadline() is not None:
                    tasks.start_soon(enforce_session_limits, session, deadlines)
                try:
                    yield session
                finally:
                    await session.aclose()
                    tasks.cancel_scope.cancel()
    finally:
        session._frames.close_receiver()
