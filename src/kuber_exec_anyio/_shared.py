"""Shared sessions: an interactive session that outlives its viewers, who attach and detach.

A :class:`SessionHost` runs each :class:`SharedSession` in its own task, inside
``ExecService.open_interactive`` (so its recording, audit, limits and cleanup are the ones every
session has). The session's output goes into a bounded ring (``kuber_exec_core.sharing``):
viewers :meth:`SharedSession.attach` with a role and read from their own offset; one that comes
back after a drop resumes from the last byte it got (nothing lost, nothing twice) or is told how
many bytes it missed. While the ring is full of bytes a retaining viewer has not acknowledged,
the session stops reading the exec socket: the process waits. With no viewer attached for
``grace`` seconds, the session is ended with the core's own end (``InteractiveSession.end``),
and the process is cleaned up as any session's. A viewer whose connection broke before it got
the session's end (the rest of the output and the ``Exit``) may come back for it for another
``grace`` seconds after the end; the ring is kept for it meanwhile, the exec itself is not.

The host's join tokens (:meth:`SessionHost.issue_token`) carry a session, a role and an expiry
(``kuber_exec_core.sharing.JoinSigner``); who may join with which role is the caller's decision
(the browser terminal asks its ``authorize`` hook).
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import attrs

from kuber_exec_core import (
    ClientFrame,
    Close,
    Error,
    ExecError,
    ExecErrorCode,
    ExecRequest,
    Exit,
    Resize,
    ResolvedTarget,
    Stderr,
    Stdout,
    Subprotocol,
    Workspace,
)
from kuber_exec_core.sharing import (
    DEFAULT_RING_BYTES,
    Chunk,
    JoinClaims,
    JoinSigner,
    Missed,
    Role,
    SharedOutput,
    check_frame,
)

from ._audit._record import ViewerPhase
from ._audit._recording import Recording
from ._groups import single_exception
from ._session import InteractiveSession

if TYPE_CHECKING:
    from anyio.abc import TaskGroup, TaskStatus

    from ._service import ExecService

__all__ = [
    "DEFAULT_GRACE",
    "SessionHost",
    "SharedSession",
    "Viewer",
    "ViewerInfo",
]

logger = logging.getLogger("kuber_exec")

#: Seconds a shared session waits with no viewer attached before it ends.
DEFAULT_GRACE = 60.0
#: The most a viewer is handed at once.
_READ_CHUNK = 64 * 1024


class _Signal:
    """Wakes every waiter on each change (a condition without a lock: one event loop)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def wait(self) -> None:
        # The event is taken before the first checkpoint: a notify after the caller's check
        # cannot be missed.
        await self._event.wait()


@attrs.frozen
class ViewerInfo:
    """Who is watching: a viewer's public id, role, name, and whether it is attached now."""

    id: str
    role: Role
    name: str
    attached: bool


@attrs.define(eq=False)
class _ViewerState:
    id: str
    key: str = attrs.field(repr=False)
    role: Role
    name: str
    #: Bumped on each attach: an older connection of the same viewer stops.
    generation: int = 0
    attached: bool = False
    left: bool = False
    #: It was handed the session's last frame (it needs nothing more).
    finished: bool = False


def _validate_positive(value: object, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ExecError(ExecErrorCode.INVALID, f"{name} must be a positive number")
    return float(value)


class Viewer:
    """One connection of a viewer to a :class:`SharedSession` (from :meth:`SharedSession.attach`).

    Iterate it for :class:`~kuber_exec_core.sharing.Chunk` (output bytes and the offset they end
    at), :class:`~kuber_exec_core.sharing.Missed` (bytes it fell behind by) and, once the
    session ended and everything was read, its ``Exit`` or ``Error``; iteration then stops (it
    stops too when a newer connection of the same viewer attached). ``send`` what its role
    allows. ``key`` (secret: never shown to other viewers or logged) attaches it again.

    With ``auto_ack`` the last frame counts as received once it is handed out; without, only
    once :meth:`acknowledge_end` says so (a frame sent over a connection that was breaking may
    never arrive): until then the viewer may come back for it after the end.
    """

    def __init__(self, shared: SharedSession, state: _ViewerState, *, auto_ack: bool) -> None:
        self._shared = shared
        self._state = state
        self._generation = state.generation
        self._auto_ack = auto_ack
        self._final_sent = False

    def __repr__(self) -> str:
        return f"<Viewer {self.id} {self.role.value} of session {self._shared.id}>"

    @property
    def id(self) -> str:
        """The viewer's public id (in audit events and :attr:`SharedSession.viewers`)."""
        return self._state.id

    @property
    def key(self) -> str:
        """The viewer's secret: :meth:`SharedSession.attach` ``(viewer=key)`` resumes it."""
        return self._state.key

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def position(self) -> int:
        """The offset of the next byte this viewer will be sent."""
        cursor = self._shared._output.cursors.get(self._state.key)
        return self._shared.bytes_written if cursor is None else cursor.position

    @property
    def _current(self) -> bool:
        state = self._state
        return state.attached and state.generation == self._generation and not state.left

    def __aiter__(self) -> Viewer:
        return self

    async def __anext__(self) -> Chunk | Missed | Exit | Error:
        shared = self._shared
        while True:
            await anyio.lowlevel.checkpoint_if_cancelled()
            if not self._current or self._final_sent:
                raise StopAsyncIteration
            answer = shared._output.next_output(self._state.key, _READ_CHUNK)
            if isinstance(answer, Missed):
                shared._changed.notify()  # It retains again: the floor moved.
                return answer
            if answer is not None:
                if self._auto_ack:
                    self.acknowledge(answer.end)
                return answer
            if shared._final is not None:
                self._final_sent = True
                if self._auto_ack:
                    self._state.finished = True
                return shared._final
            await shared._changed.wait()

    def acknowledge(self, offset: int) -> None:
        """This viewer has shown the stream up to ``offset`` (only with ``auto_ack=False``
        does it need saying): bytes before it may be dropped from the ring.
        ``EXEC_INVALID`` for an offset past what it was sent."""
        if not self._current:
            return
        self._shared._output.acknowledge(self._state.key, offset)
        self._shared._changed.notify()

    def acknowledge_end(self) -> None:
        """This viewer has shown the session's last frame (with ``auto_ack=False``): it needs
        nothing more, and leaves as it detaches. ``EXEC_INVALID`` before that frame was sent
        on this connection."""
        if not self._final_sent:
            raise ExecError(ExecErrorCode.INVALID, "the session's end was not sent to this viewer")
        if not self._state.finished:
            self._state.finished = True
            self._shared._changed.notify()

    async def send(self, frame: ClientFrame) -> None:
        """Send ``frame`` to the process, if this viewer's role allows it.

        Raises:
            ExecError: ``EXEC_TARGET_FORBIDDEN`` for a frame its role may not send (an
                observer's input, a peer's resize); ``EXEC_ABORTED`` when this connection was
                replaced or detached, or the session ended; as ``InteractiveSession.send``.
        """
        check_frame(self._state.role, frame)
        if not self._current:
            raise ExecError(ExecErrorCode.ABORTED, "this viewer's connection is closed")
        if isinstance(frame, Close):
            self._shared._end(f"ended by its owner ({self.id})")
            return
        if isinstance(frame, Resize):
            self._shared.size = frame
            self._shared._roster.notify()
        await self._shared._session.send(frame)

    async def end(self) -> None:
        """End the session for everyone (the owner only): ``EXEC_TARGET_FORBIDDEN`` else."""
        await self.send(Close())

    def leave(self) -> None:
        """Leave for good: this viewer's place is dropped and it cannot attach again. When
        the last viewer leaves, the session ends at once (no grace period)."""
        self._shared._leave(self._state)


class SharedSession:
    """An interactive session in a :class:`SessionHost`: it runs on while viewers come and go.

    ``id`` names it (in join tokens and URLs); ``target`` is where it runs. See the module's
    docstring for the ring, the grace period and the roles.
    """

    def __init__(
        self,
        session: InteractiveSession,
        workspace: Workspace,
        *,
        ring_bytes: int,
        grace: float,
        session_id: str | None = None,
    ) -> None:
        self.id = session_id if session_id is not None else secrets.token_urlsafe(16)
        self.workspace = workspace
        self._session = session
        self._output = SharedOutput(ring_bytes)
        self._grace = grace
        self._viewers: dict[str, _ViewerState] = {}
        self._changed = _Signal()
        # Viewers came, went or left, or the owner resized: a narrower signal than _changed
        # (which every output chunk sets), for whoever shows who is watching.
        self._roster = _Signal()
        self._final: Exit | Error | None = None
        self._ending = False
        # After the end: the platform or the host cut the wait for viewers coming back.
        self._lingering_cut = False
        self.ended = anyio.Event()
        #: The terminal's size: the owner's last resize.
        self.size: Resize | None = None

    def __repr__(self) -> str:
        return f"<SharedSession {self.id} pod={self.target.pod!r} viewers={len(self._viewers)}>"

    @property
    def target(self) -> ResolvedTarget:
        return self._session.target

    @property
    def protocol(self) -> Subprotocol:
        """The exec's negotiated subprotocol."""
        return self._session.protocol

    def role_of(self, key: str) -> Role:
        """The role of the viewer whose secret is ``key``; ``EXEC_TARGET_NOT_FOUND`` when no
        viewer of this session has it."""
        state = self._viewers.get(key) if isinstance(key, str) else None
        if state is None:
            raise ExecError(ExecErrorCode.TARGET_NOT_FOUND, "no such viewer in this session")
        return state.role

    @property
    def final_frame(self) -> Exit | Error | None:
        """How the session ended, once it has (viewers get it after the output)."""
        return self._final

    @property
    def bytes_written(self) -> int:
        """Output bytes the session has put into its ring (the offset of the next one)."""
        return self._output.end

    @property
    def viewers(self) -> tuple[ViewerInfo, ...]:
        """Who is watching (viewers that left are not listed)."""
        return tuple(
            ViewerInfo(state.id, state.role, state.name, state.attached)
            for state in self._viewers.values()
        )

    @property
    def attached(self) -> int:
        """How many viewers are attached now."""
        return sum(1 for state in self._viewers.values() if state.attached)

    async def roster_changed(self) -> None:
        """Returns at the next change of :attr:`viewers` or :attr:`size`, or the end."""
        await self._roster.wait()

    def _audit(self, phase: ViewerPhase, state: _ViewerState) -> None:
        self._roster.notify()
        if self._session.audit is not None:
            self._session.audit.viewer(phase, state.id, state.role.value)

    @asynccontextmanager
    async def attach(
        self,
        role: Role | str | None = None,
        *,
        viewer: str | None = None,
        resume_from: int | None = None,
        name: str = "",
        auto_ack: bool = True,
    ) -> AsyncIterator[Viewer]:
        """Attach a viewer for the block; leaving it detaches (the viewer may come back).

        A new viewer gives its ``role`` (and a ``name`` shown to the others); one coming back
        gives its ``viewer`` key (:attr:`Viewer.key`) and the offset it got to
        (``resume_from``: the end of the last :class:`Chunk` it received). Without
        ``resume_from``, a viewer is sent all the ring holds. With ``auto_ack`` (the default)
        what it reads counts as shown; else it calls :meth:`Viewer.acknowledge`. A viewer that
        attaches again while its older connection is still attached replaces it.

        Once the session has ended, only a viewer that had not got its end yet may come back
        (for the rest of the output and the last frame), while its host keeps the session.

        Raises:
            ExecError: ``EXEC_ABORTED`` for a new viewer once the session has ended;
                ``EXEC_TARGET_NOT_FOUND`` for an unknown viewer key (or one that left);
                ``EXEC_INVALID`` for a bad role, name or offset, or a role given with a key
                that is not its own.
        """
        if viewer is None and (self._final is not None or self._ending):
            raise ExecError(ExecErrorCode.ABORTED, "the shared session has ended")
        if not isinstance(name, str) or len(name) > 100:
            raise ExecError(ExecErrorCode.INVALID, "a viewer's name must be text of at most 100")
        joined = False
        if viewer is None:
            try:
                wanted = Role(role)  # type: ignore[arg-type]
            except ValueError:
                raise ExecError(ExecErrorCode.INVALID, f"no such role: {role!r}") from None
            key = secrets.token_urlsafe(24)
            state = _ViewerState(secrets.token_hex(4), key, wanted, name)
            joined = True
        else:
            found = self._viewers.get(viewer) if isinstance(viewer, str) else None
            if found is None or found.left:
                raise ExecError(ExecErrorCode.TARGET_NOT_FOUND, "no such viewer in this session")
            if role is not None and Role(role) is not found.role:
                raise ExecError(ExecErrorCode.INVALID, "a viewer keeps its role")
            state = found
        # Checks the offset before anything changes.
        self._output.attach(state.key, resume_from)
        self._viewers[state.key] = state
        if state.attached:
            # Its older connection (not yet seen to be gone) is replaced.
            self._audit("detached", state)
        state.generation += 1
        state.attached = True
        if joined:
            self._audit("joined", state)
        self._audit("attached", state)
        self._changed.notify()
        handle = Viewer(self, state, auto_ack=auto_ack)
        try:
            yield handle
        finally:
            if handle._current:
                state.attached = False
                self._output.detach(state.key)
                self._audit("detached", state)
                self._changed.notify()
                if self.ended.is_set() and state.finished:
                    self._leave(state)  # it has everything: it needs no place to come back to

    def _leave(self, state: _ViewerState) -> None:
        if state.left:
            return
        if state.attached:
            state.attached = False
            self._audit("detached", state)
        state.left = True
        self._output.forget(state.key)
        self._viewers.pop(state.key, None)
        self._audit("left", state)
        self._changed.notify()
        if not self._viewers and self._final is None and not self._ending:
            # Nobody can come back (a new viewer needs a join token): end now, not after
            # the grace period.
            self._end("every viewer left")

    def _end(self, message: str, *, linger: bool = True) -> None:
        """End the session for everyone through the core's own end (cleanup as usual); once
        it has ended, stop waiting for viewers to come back for its end (:meth:`linger`).
        ``linger=False``: nobody is waited for after this end either."""
        if not linger or self.ended.is_set():
            self._lingering_cut = True
            self._changed.notify()
            if self.ended.is_set():
                return
        self._ending = True
        self._session.end(Error(ExecErrorCode.ABORTED, message))
        self._changed.notify()

    async def end(self, message: str = "ended by the platform") -> None:
        """End the session (the platform's call) and wait until it has ended."""
        self._end(message)
        await self.ended.wait()

    async def run(self) -> None:
        """The session's life: its output into the ring, the grace period; returns once it
        ended (every viewer then left)."""
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._watch_grace)
                await self._pump()
                tasks.cancel_scope.cancel()
        finally:
            if self._final is None:
                self._final = Error(ExecErrorCode.ABORTED, "the shared session was stopped")
            self.ended.set()
            self._changed.notify()
            self._roster.notify()
            # Attached viewers read to the end first, and leave as they detach; detached ones
            # may come back for it (:meth:`linger`).

    def _awaits_viewers(self) -> bool:
        """After the end: whether a viewer may still come back for it (:meth:`linger`)."""
        return not self._lingering_cut and any(
            not state.finished for state in self._viewers.values()
        )

    async def linger(self, seconds: float) -> None:
        """After the end (:meth:`run` returned): wait at most ``seconds`` while a viewer that
        has not been handed the last frame may come back for it (its connection broke just
        as the session ended: without this it would never learn the exit code); then every
        viewer leaves. Returns at once when each has it, or when :meth:`end` is called."""
        try:
            with anyio.move_on_after(seconds):
                while self._awaits_viewers():
                    await self._changed.wait()
        finally:
            for state in list(self._viewers.values()):
                self._leave(state)

    async def _pump(self) -> None:
        output = self._output
        async for frame in self._session:
            if isinstance(frame, Stdout | Stderr):
                data = frame.data
                while data and not self._ending:
                    taken = output.write(data)
                    if taken:
                        data = data[taken:]
                        self._changed.notify()
                    else:
                        # The ring is full of bytes a viewer has not shown yet: the reader
                        # stops reading the exec socket until one acknowledges or is cut off.
                        await self._changed.wait()
            elif isinstance(frame, Exit | Error):
                self._final = frame
        if self._final is None:
            self._final = self._session.final_frame or Error(
                ExecErrorCode.ABORTED, "the shared session was closed"
            )
        self._changed.notify()

    async def _watch_grace(self) -> None:
        while True:
            if self.attached:
                await self._changed.wait()
                continue
            with anyio.move_on_after(self._grace):
                while not self.attached:
                    await self._changed.wait()
            if not self.attached:
                logger.info(
                    "shared session %s: no viewer for %g s, ending it", self.id, self._grace
                )
                # Every viewer had its grace period to come back: none gets another.
                self._end(f"no viewer for {self._grace:g} seconds", linger=False)
                return


class SessionHost:
    """Runs shared sessions that outlive their viewers, in its own task group.

    ``async with SessionHost(service, secret=...) as host:``; :meth:`open` starts a session,
    :meth:`get` finds one by id; leaving the block ends every session (each cleaned up as
    usual) and waits for them.

    Args:
        service: the ``ExecService`` the sessions run on.
        ring_bytes: output kept per session for viewers that fell behind or dropped (default
            4 MiB); at most this much memory per session, attached or not.
        grace: seconds a session with no viewer attached waits before it ends (default 60).
        secret: the join tokens' HMAC key (at least 32 bytes); ``None``: a random one (tokens
            then work on this host only).
        clock: the wall clock tokens expire by (seconds since the epoch).
        replica: this host's address as the other replicas reach it (``host:port``): each
            session id then names it, signed with ``secret`` (:meth:`holder_of`), so that a
            replica a viewer reconnects to can find the session's (the browser terminal
            relays to it).

    Raises ``ExecError(EXEC_INVALID)`` for a bad ``ring_bytes``, ``grace`` or ``secret``.
    """

    def __init__(
        self,
        service: ExecService,
        *,
        ring_bytes: int = DEFAULT_RING_BYTES,
        grace: float = DEFAULT_GRACE,
        secret: bytes | None = None,
        clock: Callable[[], float] = time.time,
        replica: str | None = None,
    ) -> None:
        if isinstance(ring_bytes, bool) or not isinstance(ring_bytes, int) or ring_bytes <= 0:
            raise ExecError(ExecErrorCode.INVALID, "ring_bytes must be a positive integer")
        self.service = service
        self.ring_bytes = ring_bytes
        self.grace = _validate_positive(grace, "grace")
        self._signer = JoinSigner(secret if secret is not None else secrets.token_bytes(32))
        self._clock = clock
        #: This host's address as other replicas reach it (``host:port``), or ``None``.
        self.replica = replica
        self._sessions: dict[str, SharedSession] = {}
        self._tasks: TaskGroup | None = None

    def __repr__(self) -> str:
        return f"<SessionHost sessions={len(self._sessions)}>"

    async def __aenter__(self) -> SessionHost:
        tasks = anyio.create_task_group()
        await tasks.__aenter__()
        self._tasks = tasks
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        tasks, self._tasks = self._tasks, None
        assert tasks is not None
        for session in list(self._sessions.values()):
            session._end("the host is closing", linger=False)
        with single_exception():
            return await tasks.__aexit__(kind, error, traceback)

    @property
    def sessions(self) -> tuple[SharedSession, ...]:
        """The sessions running now, and the ended ones whose viewers may still come back for
        the end (:meth:`SharedSession.linger`, at most ``grace`` seconds)."""
        return tuple(self._sessions.values())

    async def open(
        self,
        request: ExecRequest,
        *,
        cleanup: bool | None = None,
        recording: Recording | None = None,
    ) -> SharedSession:
        """Start a shared session (a TTY and stdin) and return it once it runs; attach its
        owner next (:meth:`SharedSession.attach` with ``Role.OWNER``).

        Raises:
            ExecError: as ``ExecService.open_interactive``; ``EXEC_ABORTED`` when the host is
                not running.
        """
        if self._tasks is None:
            raise ExecError(ExecErrorCode.ABORTED, "the session host is not running")
        session: SharedSession = await self._tasks.start(self.run, request, cleanup, recording)
        return session

    async def run(
        self,
        request: ExecRequest,
        cleanup: bool | None = None,
        recording: Recording | None = None,
        *,
        task_status: TaskStatus[SharedSession] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run one shared session in the calling task, until it ends: ``shared = await
        tasks.start(host.run, request)`` in a task group of the caller's (an app without a
        long-lived task group of its own hosts each session in the request handler that
        opened it; the host then needs no ``async with``). Errors before the session runs
        are raised from ``start``; its end never raises."""
        started = False
        shared: SharedSession | None = None
        try:
            try:
                async with self.service.open_interactive(
                    request, tty=True, cleanup=cleanup, recording=recording
                ) as session:
                    session_id = None
                    if self.replica is not None:
                        session_id = self._signer.session_id(
                            secrets.token_urlsafe(16), self.replica
                        )
                    shared = SharedSession(
                        session,
                        request.workspace,
                        ring_bytes=self.ring_bytes,
                        grace=self.grace,
                        session_id=session_id,
                    )
                    self._sessions[shared.id] = shared
                    task_status.started(shared)
                    started = True
                    await shared.run()
                    if not shared._awaits_viewers():
                        # Gone from :meth:`get` at its end, before the exec's cleanup runs.
                        self._sessions.pop(shared.id, None)
            except Exception:
                if not started:
                    raise
                # The session ran; its end (a cleanup that failed, say) must not end the host.
                logger.exception("a shared session's end failed")
            if shared is not None:
                # Outside the exec's block: its slot and connection are given back meanwhile.
                await shared.linger(self.grace)
        finally:
            if shared is not None:
                self._sessions.pop(shared.id, None)

    def get(self, session_id: str) -> SharedSession:
        """The session ``session_id`` (running, or ended and lingering: :attr:`sessions`);
        ``EXEC_TARGET_NOT_FOUND`` when there is none (it ended, or runs on another replica)."""
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise ExecError(ExecErrorCode.TARGET_NOT_FOUND, "no such shared session here")
        return session

    def holder_of(self, session_id: str) -> str | None:
        """The replica holding ``session_id`` as its id says (``None``: the id names none, or
        its signature does not match this host's secret)."""
        return self._signer.holder_of(session_id)

    def issue_token(self, session_id: str, role: Role | str, ttl: float = 3600.0) -> str:
        """A join token for ``role`` in ``session_id``, valid for ``ttl`` seconds."""
        ttl = _validate_positive(ttl, "ttl")
        try:
            wanted = Role(role)
        except ValueError:
            raise ExecError(ExecErrorCode.INVALID, f"no such role: {role!r}") from None
        return self._signer.issue(session_id, wanted, self._clock() + ttl)

    def verify_token(self, session_id: str, token: str) -> JoinClaims:
        """The role ``token`` grants in ``session_id``; ``EXEC_TARGET_FORBIDDEN`` for a forged,
        expired or other session's token."""
        return self._signer.verify(token, session_id, self._clock())
