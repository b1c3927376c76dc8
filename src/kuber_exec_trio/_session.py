"""``InteractiveSession``: the seed's ``DuplexSession`` on trio.

One reader task ("next event; if it needs data, await a message and feed it") moves frames from
the core's session into a bounded memory channel of ``queue_capacity`` frames; when the consumer
stops reading, the channel fills, the reader stops reading the socket, and TCP pushes back on the
server. One locked send path writes the client's frames. The core decides everything else.
"""

from __future__ import annotations

import logging

import trio

from kuber_exec_core import (
    ClientFrame,
    Close,
    ExecConnection,
    ExecError,
    ExecErrorCode,
    ExecSession,
    Resize,
    ResolvedTarget,
    ServerFrame,
    Stdin,
    Subprotocol,
    pump_session,
)

__all__ = ["InteractiveSession"]

logger = logging.getLogger("kuber_exec.trio.session")


class InteractiveSession:
    """A running interactive exec, yielded by ``ExecService.open_interactive``.

    Iterate it for ``Stdout`` / ``Stderr`` frames followed by exactly one ``Exit`` or ``Error``
    (then iteration ends); ``send`` ``Stdin`` / ``Resize`` / ``Close`` frames. After ``aclose``
    (or a ``Close`` frame) iteration ends at once and ``send`` raises ``EXEC_ABORTED``.
    Cancelling the task that awaits ``send`` or the iteration cancels only that await; leaving
    the ``open_interactive`` block closes the socket.
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
        self._frames_in, self._frames_out = trio.open_memory_channel[ServerFrame](queue_capacity)
        self._send_lock = trio.Lock()
        self._reader_scope = trio.CancelScope()
        self._closed = False

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
        if isinstance(frame, Close):
            await self.aclose()
            return
        if not isinstance(frame, Stdin | Resize):
            raise ExecError(ExecErrorCode.INVALID, "Unknown interactive exec frame")
        async with self._send_lock:
            # Under the lock, so that two senders' chunks never interleave.
            for message in self._session.send(frame):
                await self._connection.send_message(message)

    async def aclose(self) -> None:
        """Close from the client side: no more frames are yielded; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._session.send(Close())
        self._reader_scope.cancel()
        await self._frames_out.aclose()

    def __aiter__(self) -> InteractiveSession:
        return self

    async def __anext__(self) -> ServerFrame:
        # A plain iterator, not an async generator: breaking out of ``async for`` must not
        # leave a half-run generator for the garbage collector to finalize.
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self._frames_out.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def run_reader(self) -> None:
        """The reader task: core events into the bounded channel until the terminal frame."""
        with self._reader_scope:
            async with self._frames_in:
                await pump_session(self._session, self._connection, self._deliver)

    async def _deliver(self, frame: ServerFrame) -> bool:
        try:
            await self._frames_in.send(frame)
        except trio.BrokenResourceError:
            return False  # The consumer closed: nothing more to deliver.
        return True
