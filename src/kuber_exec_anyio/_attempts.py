"""One exec's attempts: opening each, the retry its end allows, and the cleanup after the last.

An exec is at most three attempts: supervised; unsupervised on the same pod when the prologue
could not start (no shell in the image, or ``ARGV[0]`` not found, whose real error only the
runtime gives); and once on another pod when the runtime refused to start anything (a stopped
container during a rollout). Nothing is retried once output, an exit or the start mark has
arrived. The rules are the core's (:mod:`kuber_exec_core.supervision`); this module holds what a
service remembers between calls (which containers have no shell) and what one call does with
them.

:class:`Attempts` is the loop ``ExecService.execute`` and ``ExecService.open_interactive``
share::

    for attempt in Attempts(...):
        async with attempt as (target, connection):
            attempt.runs(session)
            ...  # run it

Entering an attempt opens the exec (``_retarget``: with the one retry a stale cached target
gets) and notes it in the call's slot; leaving it closes the connection, then either plans the
next attempt (the loop goes on) or ends the call's attempts: the cleanup of what the attempt may
have left running, and the audit record's ``ended`` event when the attempt's end is the call's.
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kuber_exec_core import (
    Error,
    ExecError,
    ExecRequest,
    ExecSession,
    ExecStreams,
    Exit,
    ResolvedTarget,
    Subprotocol,
)
from kuber_exec_core.supervision import (
    CleanupOutcome,
    StartMark,
    Supervision,
    is_missing_shell,
    is_start_failure,
)

from ._audit._record import AuditRecord
from ._backend import ExecConnection
from ._cleanup import CleanupCrew
from ._drivers import resolve_target
from ._kubernetes._session_slot import SessionSlot
from ._retarget import open_retargeted

if TYPE_CHECKING:
    from ._service import ExecService

__all__ = [
    "Attempts",
    "NextAttempt",
    "ShellRegistry",
    "needs_cleanup",
    "next_attempt",
]

logger = logging.getLogger("kuber_exec")

_SHELLESS_REMEMBERED = 4096


class ShellRegistry:
    """The containers found to have no shell (bounded: the oldest are forgotten first), so that
    later execs there start unsupervised at once instead of trying the prologue each time."""

    def __init__(self, capacity: int = _SHELLESS_REMEMBERED) -> None:
        self._capacity = capacity
        self._shellless: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    @staticmethod
    def _key(target: ResolvedTarget) -> tuple[str, str, str]:
        # The pod's uid, not its name: a new pod of a new image may well have a shell.
        return (target.namespace, target.pod_uid, target.container)

    def has_shell(self, target: ResolvedTarget) -> bool:
        """Whether a shell is assumed in ``target``'s container (until shown otherwise)."""
        return self._key(target) not in self._shellless

    def lacks_shell(self, target: ResolvedTarget) -> None:
        """Remember that ``target``'s container has no shell."""
        key = self._key(target)
        self._shellless[key] = None
        self._shellless.move_to_end(key)
        while len(self._shellless) > self._capacity:
            self._shellless.popitem(last=False)


class NextAttempt(enum.Enum):
    """What to do after an attempt that failed before its command started."""

    #: The same pod, without the prologue.
    UNSUPERVISED = "unsupervised"
    #: Resolve again, ranking this pod last, and run there.
    ELSEWHERE = "elsewhere"


def next_attempt(
    session: ExecSession, *, retried_elsewhere: bool, shells: ShellRegistry, target: ResolvedTarget
) -> NextAttempt | None:
    """The retry an attempt's end allows, or ``None`` (report it). Decided by structure: the
    start mark, the Status's reason and code, and whether any output arrived."""
    final = session.final_frame
    if not isinstance(final, Error) or session.bytes_out:
        return None
    if session.supervision is not None:
        if session.start_mark is StartMark.MISSING:
            return NextAttempt.UNSUPERVISED  # the runtime's own "not found" error, unchanged
        if session.start_mark is None and is_missing_shell(final):
            shells.lacks_shell(target)
            logger.warning(
                "container %s of pod %s/%s has no %s: its execs run unsupervised (a cancelled "
                "one is not cleaned up; see docs/cleanup.md)",
                target.container,
                target.namespace,
                target.pod,
                "/bin/sh",
            )
            return NextAttempt.UNSUPERVISED
    if (
        not retried_elsewhere
        and session.start_mark is None
        and session.server_reported_end
        and is_start_failure(final)
    ):
        return NextAttempt.ELSEWHERE
    return None


def needs_cleanup(session: ExecSession | None) -> bool:
    """Whether a supervised attempt ended without the server's account of its process's end
    (the caller left, a cap, a limit, a lost connection): the process may still be running."""
    if session is None or session.supervision is None:
        return False
    return not session.server_reported_end and session.start_mark is not StartMark.MISSING


class Attempts:
    """One call's attempts, and each attempt as a block (this object, armed for the next one).

    Iterating gives the attempts to make: the first on the resolved target, then each one that
    leaving the previous block planned. ``async with attempt as (target, connection)`` opens
    the exec (``target``: the pod it reached) and notes the attempt in ``slot``; inside, the
    caller builds its session under :attr:`supervision` and passes it to :meth:`runs`.

    Leaving the block closes the connection first; then, for a session run:

    - handed over (:meth:`hand_over`): clean up, and the ``ended`` event reports the session's
      terminal frame, however the block was left;
    - an ``ExecError`` with ``reports_errors`` (``execute``: the raised error is the call's
      outcome): retried when the session's end allows (the block swallows it and the loop goes
      on), else clean up and the ``ended`` event reports the error;
    - any other exception: clean up (the admission block reports it);
    - left normally otherwise (a result, or a retry planned with :meth:`retry`): nothing.

    An attempt left before :meth:`runs` (its session could not be built) ends the attempts with
    no cleanup: nothing was started.

    Args:
        service: the service whose backend, limits and cleanup settings are used.
        shells: the service's registry of containers without a shell.
        crew: gives the service's cleanup crew (called only when a cleanup is needed).
        request: the call's request.
        record: the call's audit record (told of retargets, the cleanup and, as above, the end).
        slot: the call's workspace slot.
        target: the resolved target of the first attempt.
        streams: the streams each attempt opens.
        subprotocols: the subprotocols each attempt offers.
        supervise: whether to run under the supervising prologue (while the image allows).
        hangup: noted in ``slot`` with each attempt: whether another replica cleaning up after
            it sends the terminal's hangup (a TTY session).
        reports_errors: see above.
    """

    __slots__ = (
        "_block",
        "_crew",
        "_handed_over",
        "_hangup",
        "_next",
        "_record",
        "_reports_errors",
        "_request",
        "_retried_elsewhere",
        "_service",
        "_session",
        "_shells",
        "_slot",
        "_streams",
        "_subprotocols",
        "_supervise",
        "_target",
        "supervision",
    )

    def __init__(
        self,
        service: ExecService,
        shells: ShellRegistry,
        crew: Callable[[], CleanupCrew],
        request: ExecRequest,
        record: AuditRecord,
        slot: SessionSlot,
        target: ResolvedTarget,
        streams: ExecStreams,
        subprotocols: Sequence[Subprotocol],
        *,
        supervise: bool,
        hangup: bool,
        reports_errors: bool,
    ) -> None:
        self._service = service
        self._shells = shells
        self._crew = crew
        self._request = request
        self._record = record
        self._slot = slot
        self._streams = streams
        self._subprotocols = subprotocols
        self._supervise = supervise
        self._hangup = hangup
        self._reports_errors = reports_errors
        self._retried_elsewhere = False
        #: The target of the attempt to make next (``None``: no more attempts).
        self._next: ResolvedTarget | None = target
        self._target = target
        self._block: AbstractAsyncContextManager[Any] | None = None
        self._session: ExecSession | None = None
        self._handed_over = False
        #: The current attempt's supervision (``None``: it runs unsupervised).
        self.supervision: Supervision | None = None

    def __iter__(self) -> Iterator[Attempts]:
        while (target := self._next) is not None:
            self._next = None
            self._target = target
            self._session = None
            yield self

    async def __aenter__(self) -> tuple[ResolvedTarget, ExecConnection]:
        service = self._service
        request = self._request
        target = self._target
        supervision = None
        if self._supervise and self._shells.has_shell(target):
            command = request.command
            supervision = Supervision(
                secrets.token_hex(8), executable=str(command[0]) if command else ""
            )
        self.supervision = supervision
        self._block, (target, connection) = await open_retargeted(
            service.backend,
            request,
            service.limits,
            target,
            request.command
            if supervision is None
            else supervision.supervised_command(request.command),
            self._streams,
            self._subprotocols,
            self._record.retargeted,
        )
        self._target = target
        # Where this attempt runs and under which supervision: what another replica needs to
        # clean up after it.
        self._slot.note_attempt(
            target, None if supervision is None else supervision.session_id, hangup=self._hangup
        )
        return target, connection

    def runs(self, session: ExecSession) -> None:
        """The attempt's session (what its retry, cleanup and audit are decided from)."""
        self._session = session

    def hand_over(self) -> None:
        """The session goes to the caller: no more retries, and its terminal frame is the
        call's outcome."""
        self._handed_over = True

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        block = self._block
        assert block is not None
        self._block = None
        # What the connection's own exit raises replaces the block's error, as in any block.
        replaced: BaseException | None = None
        try:
            if await block.__aexit__(error_type, error, traceback):
                error = None
        except BaseException as raised:
            error = replaced = raised
        session = self._session
        if session is not None:
            if self._handed_over:
                await self._clean_up(session)
                _record_end(self._record, session)
            elif error is None:
                pass  # a result, or a retry already planned
            elif isinstance(error, ExecError) and self._reports_errors:
                if await self.retry():
                    return True
                await self._clean_up(session)
                # An output cap or a failed status: the audit event counts what did move.
                self._record.failed(
                    error.code,
                    error.message,
                    bytes_in=session.bytes_in,
                    bytes_out=session.bytes_out,
                )
            else:
                await self._clean_up(session)
        if replaced is not None:
            raise replaced
        return False

    async def retry(self) -> bool:
        """Whether the session's end allows another attempt, which is then planned (leaving the
        block starts it): the same pod, or another one resolved again ranking this one last. A
        start failure is retried only on another pod (the same stopped container would refuse
        again), and not when resolving again fails."""
        session = self._session
        assert session is not None
        target = self._target
        service = self._service
        retry = next_attempt(
            session,
            retried_elsewhere=self._retried_elsewhere,
            shells=self._shells,
            target=target,
        )
        if retry is None:
            return False
        if retry is NextAttempt.UNSUPERVISED:
            if session.start_mark is StartMark.MISSING:
                # The runtime's refusal that follows is the expected "not found": no reason to
                # move.
                self._retried_elsewhere = True
            self._supervise = False
            self._next = target
            return True
        self._retried_elsewhere = True
        try:
            fresh = await resolve_target(
                service.backend, self._request, service.limits, avoid=target.pod
            )
        except ExecError:
            return False
        if fresh.pod == target.pod:
            return False
        logger.info(
            "the command could not start in %s/%s; retrying once on pod %s",
            target.namespace,
            target.pod,
            fresh.pod,
        )
        self._record.retargeted(fresh)
        self._next = fresh
        return True

    async def _clean_up(self, session: ExecSession) -> None:
        # End what the session may have left running (when it needs it), and note the outcome
        # for the audit event; a cleanup going on in the background keeps the session in its
        # slot's record until it settles. Never raises; holds the caller at most the cleanup's
        # timeout.
        record = self._record
        if session.supervision is None:
            if self._supervise and not session.server_reported_end:
                record.cleaned_up(CleanupOutcome.UNSUPERVISED)  # wanted; the image has no shell
            return
        if not needs_cleanup(session):  # the server reported the process's end
            return
        service = self._service
        settings = service.cleanup_settings
        crew = self._crew()
        outcome = await crew.clean(
            self._target,
            session.supervision,
            # The start mark had not arrived: the command may still have been starting.
            wait_for_start=settings.grace if session.start_mark is None else 0.0,
            hangup=session.tty,
            bound=settings.timeout,
        )
        if outcome is CleanupOutcome.PENDING:
            settled = crew.settlement(session.supervision.session_id)
            if settled is not None:
                self._slot.release_after(settled)
        record.cleaned_up(outcome)


def _record_end(record: AuditRecord, session: ExecSession) -> None:
    # The ended event of a session handed over: how it ended (no terminal frame: the client
    # left first), and the bytes it moved.
    final: Exit | Error | None = session.final_frame
    bytes_in, bytes_out = session.bytes_in, session.bytes_out
    if isinstance(final, Exit):
        record.exited(final.exit_code, bytes_in=bytes_in, bytes_out=bytes_out)
    elif isinstance(final, Error):
        record.failed(final.code, final.message, bytes_in=bytes_in, bytes_out=bytes_out)
    else:
        record.closed(bytes_in=bytes_in, bytes_out=bytes_out)
