"""The cleanup crew: one service's cleanups, batched per container, continued in the background.

Issue 39: a cleanup exec per ended session cannot keep up with a crowd (3,000 sessions left at
once left 95% of their processes running: the cleanups waited for a slot past their bound). The
crew queues each ended session for its container (namespace, pod, container); a few *runners*
per container drain that queue into batch execs of up to
:data:`~kuber_exec_core.supervision.MAX_SESSIONS_PER_CLEANUP` sessions
(:func:`~kuber_exec_core.supervision.batch_cleanup_command`), so sessions that end together are
cleaned together, and what arrives while a batch runs goes into the next one. At most
``CleanupSlots.limit`` (32) cleanup execs run at once across containers, and at most
:data:`BATCHES_PER_CONTAINER` in one container (each polls the whole ``/proc``: more at once only
compete for the node's CPU).

Who runs the runners:

- the backend's background task group (``BackendHooks.background_tasks``, which
  ``KubernetesBackend`` has while it is open): a caller waits at most its bound and then gets
  :attr:`~kuber_exec_core.supervision.CleanupOutcome.PENDING`; the cleanup goes on, each
  session for at most :data:`BACKGROUND_LIMIT` seconds since it was queued, and its verdict is
  logged and counted (:class:`CleanupStatus`);
- without one, the callers themselves: the first caller of a container *leads* (its runners run
  in its own task group, for the other callers' sessions too) until the container's queue is
  empty or its own bound is over; a waiting caller then takes over. No caller is held longer
  than its bound, and what could not finish by then is abandoned (counted).
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Sequence

import anyio
import anyio.abc
import attrs

from kuber_exec_core import ExecError, ExecStreams, ExecuteRun, ResolvedTarget, Subprotocol
from kuber_exec_core.supervision import (
    MAX_SESSIONS_PER_CLEANUP,
    CleanupOutcome,
    CleanupRequest,
    Supervision,
    batch_cleanup_command,
    parse_batch_cleanup_output,
)

from ._backend import Backend, backend_hooks
from ._drivers import collect_execute
from ._supervise import CleanupSettings, CleanupSlots

__all__ = [
    "BACKGROUND_LIMIT",
    "BATCHES_PER_CONTAINER",
    "MAX_QUEUED_CLEANUPS",
    "CleanupCrew",
    "CleanupStatus",
]

logger = logging.getLogger("kuber_exec")

#: The longest one session's cleanup may go on in the background, from its queueing: a
#: container that answers no exec must not hold work (and memory) for ever.
BACKGROUND_LIMIT = 60.0
#: The most sessions waiting for a cleanup at once, across containers (a few hundred bytes
#: each); a session beyond it is not cleaned up (logged, counted as abandoned).
MAX_QUEUED_CLEANUPS = 65_536
#: The most cleanup execs at once in one container.
BATCHES_PER_CONTAINER = 4
# A verdict line is 16 hex digits, a space, a verdict and a newline: 128 of them fit in 4 KiB;
# the margin is for a shell's complaints on stderr.
_OUTPUT_CAP = 64 * 1024
_STREAMS = ExecStreams(stdin=False, stdout=True, stderr=True, tty=False)


@attrs.frozen
class CleanupStatus:
    """A snapshot of one service's cleanups (``ExecService.cleanup_status``), counted in sessions.

    Attributes:
        queued: sessions waiting for a cleanup exec.
        running: sessions in a cleanup exec in flight.
        done: sessions whose cleanup reported a verdict (``none``, ``terminated``, ``killed``).
        failed: sessions whose cleanup exec failed or gave no verdict for them (logged).
        abandoned: sessions given up without a verdict: the queue was full, the time limit
            (:data:`BACKGROUND_LIMIT`, or the caller's bound without a background host) passed,
            or the backend closed first (logged). Their processes may be left.
        pending: calls that returned :attr:`~CleanupOutcome.PENDING` (their session's cleanup
            went on in the background, and was counted in one of the above once it ended).
        execs: cleanup execs started (each for up to ``MAX_SESSIONS_PER_CLEANUP`` sessions).
    """

    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    abandoned: int = 0
    pending: int = 0
    execs: int = 0

    @property
    def in_progress(self) -> int:
        """Sessions not settled yet (``queued + running``)."""
        return self.queued + self.running


class _Waiter:
    """One caller of the crew: woken when one of its sessions settles or when it must lead."""

    __slots__ = ("lead", "unsettled", "wake")

    def __init__(self) -> None:
        self.wake = anyio.Event()
        self.lead: _Container | None = None
        self.unsettled = 0

    def notify(self) -> None:
        self.wake.set()


class _Job:
    """One session's cleanup, from queueing to its verdict (settled exactly once)."""

    __slots__ = (
        "background",
        "deadline",
        "outcome",
        "reported_pending",
        "request",
        "state",
        "waiter",
    )

    def __init__(self, request: CleanupRequest, waiter: _Waiter) -> None:
        self.request = request
        self.waiter = waiter
        self.state = "new"  # then queued, running, settled
        self.outcome: CleanupOutcome | None = None
        self.deadline = math.inf
        self.background = False
        self.reported_pending = False


class _Container:
    """One container's queue and its runners (in the host task group, ``host``, while any)."""

    def __init__(self, target: ResolvedTarget) -> None:
        self.target = target
        self.queue: collections.deque[_Job] = collections.deque()
        self.runners = 0
        self.waiting = 0  # runners not holding a batch
        self.host: anyio.abc.TaskGroup | None = None
        self.background = False
        self.led = False  # without a background host: a caller leads (or was asked to)


class CleanupCrew:
    """One service's cleanups (see the module's docstring): batched per container, bounded, and
    continued in the backend's background task group when it has one.

    Made on first use by the service (an anyio primitive belongs to its event loop), from the
    service's ``CleanupSlots`` (shared limit of cleanup execs in flight).
    """

    def __init__(
        self,
        backend: Backend,
        subprotocols: Sequence[Subprotocol],
        settings: CleanupSettings,
        slots: CleanupSlots,
        *,
        max_queued: int = MAX_QUEUED_CLEANUPS,
        background_limit: float = BACKGROUND_LIMIT,
    ) -> None:
        self._backend = backend
        self._subprotocols = subprotocols
        self._settings = settings
        self._slots = slots
        self._max_queued = max_queued
        self._background_limit = background_limit
        self._containers: dict[tuple[str, str, str], _Container] = {}
        self._queued = 0
        self._running = 0
        self._done = 0
        self._failed = 0
        self._abandoned = 0
        self._pending = 0
        self._execs = 0
        self._overflowing = False
        #: Sessions whose caller was told ``pending``: set when their cleanup settles.
        self._settlements: dict[str, anyio.Event] = {}

    def __repr__(self) -> str:
        return f"CleanupCrew({self.status})"

    @property
    def status(self) -> CleanupStatus:
        """The counts now (a snapshot)."""
        return CleanupStatus(
            queued=self._queued,
            running=self._running,
            done=self._done,
            failed=self._failed,
            abandoned=self._abandoned,
            pending=self._pending,
            execs=self._execs,
        )

    async def clean(
        self,
        target: ResolvedTarget,
        supervision: Supervision,
        *,
        wait_for_start: float,
        hangup: bool,
        bound: float,
    ) -> CleanupOutcome:
        """Clean up ``supervision``'s session in ``target`` (see
        :class:`~kuber_exec_core.supervision.CleanupRequest` for ``wait_for_start`` and
        ``hangup``): shielded from the caller's cancellation, and holding it at most ``bound``
        seconds. Its verdict; :attr:`CleanupOutcome.PENDING` when it is not in by then and the
        cleanup goes on in the background; :attr:`CleanupOutcome.FAILED` when it failed or was
        abandoned (logged). Never raises."""
        request = CleanupRequest(
            supervision.session_id, wait_for_start=wait_for_start, hangup=hangup
        )
        # Registered before the wait: the cleanup may settle in the background at any time
        # after the caller was told "pending".
        self._settlements[request.session_id] = anyio.Event()
        outcome = CleanupOutcome.FAILED
        try:
            with anyio.CancelScope(shield=True):
                outcome = (await self._clean(target, [request], bound))[request.session_id]
        finally:
            if outcome is not CleanupOutcome.PENDING:
                self._settlements.pop(request.session_id, None)
        return outcome

    def settlement(self, session_id: str) -> anyio.Event | None:
        """For a session whose :meth:`clean` answered ``pending``: an event set once its
        cleanup settles in the background (``None``: settled already, or never pending)."""
        return self._settlements.get(session_id)

    async def clean_sessions(
        self,
        target: ResolvedTarget,
        requests: Sequence[CleanupRequest],
        *,
        bound: float | None = None,
    ) -> dict[str, CleanupOutcome]:
        """Clean up the sessions ``requests`` name in ``target``'s container, without an
        ``ExecSession`` (a replica finishing what another left): each is batched with the
        container's other cleanups. Waits until every verdict is in, or ``bound`` seconds
        (``None``: the background limit, :data:`BACKGROUND_LIMIT`); then each session's
        verdict, :attr:`CleanupOutcome.PENDING` for one still going on in the background, or
        :attr:`CleanupOutcome.FAILED`. Not shielded: cancelling the caller stops its wait (the
        cleanups go on in the background when there is one). A session named twice is cleaned
        once.

        Raises:
            ValueError: ``requests`` holds two different requests for one session.
        """
        unique: dict[str, CleanupRequest] = {}
        for request in requests:
            if unique.setdefault(request.session_id, request) != request:
                raise ValueError(f"two different cleanups asked for session {request.session_id}")
        if not unique:
            return {}
        return await self._clean(
            target, list(unique.values()), self._background_limit if bound is None else bound
        )

    async def _clean(
        self, target: ResolvedTarget, requests: Sequence[CleanupRequest], bound: float
    ) -> dict[str, CleanupOutcome]:
        waiter = _Waiter()
        jobs = [_Job(request, waiter) for request in requests]
        waiter.unsettled = len(jobs)
        container = self._container(target)
        for job in jobs:
            self._enqueue(container, job, bound)
        if not container.led and container.host is None:
            self._vacated(container)  # all refused (a full queue): forget the container
        try:
            with anyio.move_on_after(bound):
                while waiter.unsettled:
                    await waiter.wake.wait()
                    waiter.wake = anyio.Event()
                    if waiter.lead is not None:
                        leading, waiter.lead = waiter.lead, None
                        await self._lead(leading)
        finally:
            # Whatever ended the wait (the bound, a cancellation): without a background host
            # nothing goes on once the caller leaves, so its sessions still queued are given up
            # and a leadership it was handed passes on.
            handed = waiter.lead
            waiter.lead = None
            for job in jobs:
                if job.state != "settled" and not job.background:
                    self._settle(job, None, "abandoned")
            if handed is not None:
                self._vacated(handed)
        outcomes: dict[str, CleanupOutcome] = {}
        for job in jobs:
            if job.outcome is not None:
                outcomes[job.request.session_id] = job.outcome
            else:
                job.reported_pending = True
                self._pending += 1
                outcomes[job.request.session_id] = CleanupOutcome.PENDING
        return outcomes

    # The queues.

    def _container(self, target: ResolvedTarget) -> _Container:
        key = (target.namespace, target.pod, target.container)
        container = self._containers.get(key)
        if container is None:
            container = self._containers[key] = _Container(target)
        return container

    def _enqueue(self, container: _Container, job: _Job, bound: float) -> None:
        if self._queued >= self._max_queued:
            if not self._overflowing:
                self._overflowing = True
                logger.warning(
                    "%d cleanups are waiting already: more ended sessions are not cleaned up "
                    "(processes may be left) until the queue drains",
                    self._queued,
                )
            self._settle(job, None, "abandoned")
            return
        now = anyio.current_time()
        if container.host is None and not container.led:
            host = backend_hooks(self._backend).background_tasks()
            if host is not None:
                container.host, container.background = host, True
        job.background = container.background
        job.deadline = now + (self._background_limit if job.background else bound)
        job.state = "queued"
        container.queue.append(job)
        self._queued += 1
        if container.host is None and not container.led:
            # No background host: this caller runs the container's runners itself.
            container.led = True
            job.waiter.lead = container
            job.waiter.notify()
            return
        self._staff(container)

    def _staff(self, container: _Container) -> None:
        """Start runners while the queue holds more than the waiting ones will take."""
        host = container.host
        if host is None:
            return  # a designated leader starts them
        while (
            container.runners < BATCHES_PER_CONTAINER
            and container.waiting * MAX_SESSIONS_PER_CLEANUP < self._live(container)
        ):
            container.runners += 1
            container.waiting += 1
            try:
                host.start_soon(self._run, container)
            except RuntimeError:  # the host task group has closed: the callers lead instead
                container.runners -= 1
                container.waiting -= 1
                container.host, container.background = None, False
                for job in container.queue:
                    job.background = False
                    job.deadline = min(job.deadline, anyio.current_time() + self._settings.timeout)
                self._vacated(container)
                return

    def _live(self, container: _Container) -> int:
        """The queue's unsettled sessions, dropping the settled ones at its head."""
        queue = container.queue
        while queue and queue[0].state != "queued":
            queue.popleft()
        return len(queue)

    def _take(self, container: _Container) -> list[_Job]:
        batch: list[_Job] = []
        # A session asked for twice (two callers cleaning up after one dead replica) waits for
        # the next batch: a batch names each session once.
        taken: set[str] = set()
        later: list[_Job] = []
        now = anyio.current_time()
        queue = container.queue
        while queue and len(batch) < MAX_SESSIONS_PER_CLEANUP:
            job = queue.popleft()
            if job.state != "queued":
                continue
            if job.deadline <= now:
                self._settle(job, None, "abandoned")
                continue
            if job.request.session_id in taken:
                later.append(job)
                continue
            taken.add(job.request.session_id)
            self._queued -= 1
            self._running += 1
            job.state = "running"
            batch.append(job)
        queue.extendleft(reversed(later))
        return batch

    async def _lead(self, container: _Container) -> None:
        """Run ``container``'s runners in this caller's task group until its queue is empty (or
        the caller's bound cancels them)."""
        try:
            async with anyio.create_task_group() as tasks:
                container.host = tasks
                self._staff(container)
        finally:
            container.host = None
            if container.runners == 0:
                self._vacated(container)

    def _vacated(self, container: _Container) -> None:
        """The container's last runner has gone: hand its queue on, or give it up."""
        if container.runners or container.host is not None:
            return
        if not self._live(container):
            container.led = False
            key = (container.target.namespace, container.target.pod, container.target.container)
            if self._containers.get(key) is container:
                del self._containers[key]
            return
        if container.background:
            # The background host was cancelled (the backend closed): nothing will run them.
            container.background = False
            given_up = [job for job in container.queue if job.state == "queued"]
            for job in given_up:
                self._settle(job, None, "abandoned")
            container.queue.clear()
            logger.warning(
                "%d cleanups in %s/%s were given up: the backend closed first (processes may "
                "be left)",
                len(given_up),
                container.target.namespace,
                container.target.pod,
            )
            self._vacated(container)
            return
        # Led by callers: the first one still waiting takes over.
        container.led = True
        container.queue[0].waiter.lead = container
        container.queue[0].waiter.notify()

    # The runners and their batches.

    async def _run(self, container: _Container) -> None:
        """One runner: a batch at a time, while the container's queue has sessions."""
        waiting = True
        try:
            while True:
                async with self._slots.limiter:
                    container.waiting -= 1
                    waiting = False
                    batch = self._take(container)
                    if not batch:
                        return
                    self._staff(container)  # more than one batch queued: more runners
                    await self._run_batch(container.target, batch)
                container.waiting += 1
                waiting = True
        except Exception:  # a bug: never let it take the host task group down
            logger.exception("a cleanup runner failed")
        finally:
            if waiting:
                container.waiting -= 1
            container.runners -= 1
            if container.runners == 0 and container.background:
                # A leader's task group is released by ``_lead``; the background host here.
                container.host = None
                self._vacated(container)

    async def _run_batch(self, target: ResolvedTarget, batch: list[_Job]) -> None:
        ids = [job.request.session_id for job in batch]
        command = batch_cleanup_command([job.request for job in batch], grace=self._settings.grace)
        self._execs += 1
        outcomes: dict[str, CleanupOutcome] | None = None
        # Without verdicts: "failed" when the exec failed, else given up ("abandoned": the time
        # limit passed, or a cancellation: the host closed, a leading caller's bound).
        failure = "abandoned"
        # The batch may run as long as its latest session may wait.
        deadline = max(job.deadline for job in batch)
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                try:
                    async with self._backend.exec(
                        target, command, _STREAMS, self._subprotocols
                    ) as connection:
                        run = ExecuteRun(
                            target,
                            connection.subprotocol,
                            stdout_cap=_OUTPUT_CAP,
                            stderr_cap=_OUTPUT_CAP,
                        )
                        result = await collect_execute(run, connection)
                    outcomes = parse_batch_cleanup_output(result.stdout, result.exit_code, ids)
                    if CleanupOutcome.FAILED in outcomes.values():
                        logger.warning(
                            "the cleanup of %d sessions in %s/%s did not report for all: "
                            "exit %d, %r",
                            len(ids),
                            target.namespace,
                            target.pod,
                            result.exit_code,
                            result.stderr[:200],
                        )
                except ExecError as error:
                    failure = "failed"
                    logger.warning(
                        "the cleanup of %d sessions in %s/%s failed (processes may be left): %s",
                        len(ids),
                        target.namespace,
                        target.pod,
                        error,
                    )
        except TimeoutError:
            logger.warning(
                "the cleanup of %d sessions in %s/%s did not finish in time (processes may be "
                "left)",
                len(ids),
                target.namespace,
                target.pod,
            )
        finally:
            for job in batch:
                if outcomes is None:
                    self._settle(job, None, failure)
                else:
                    outcome = outcomes[job.request.session_id]
                    self._settle(
                        job, outcome, "failed" if outcome is CleanupOutcome.FAILED else "done"
                    )
        if outcomes is not None:
            late = sum(job.reported_pending for job in batch)
            counts = collections.Counter(outcome.value for outcome in outcomes.values())
            logger.info(
                "cleanup of %d sessions in %s/%s: %s%s",
                len(ids),
                target.namespace,
                target.pod,
                ", ".join(f"{count} {value}" for value, count in sorted(counts.items())),
                f" ({late} after their callers returned)" if late else "",
            )

    def _settle(self, job: _Job, outcome: CleanupOutcome | None, kind: str) -> None:
        """Give ``job`` its outcome (``None``: given up, reported as FAILED) and count it."""
        if job.state == "settled":
            return
        if job.state == "queued":
            self._queued -= 1
        elif job.state == "running":
            self._running -= 1
        job.state = "settled"
        job.outcome = CleanupOutcome.FAILED if outcome is None else outcome
        if kind == "done":
            self._done += 1
        elif kind == "failed":
            self._failed += 1
        else:
            self._abandoned += 1
        if self._overflowing and self._queued < self._max_queued // 2:
            self._overflowing = False
        job.waiter.unsettled -= 1
        job.waiter.notify()
        settled = self._settlements.pop(job.request.session_id, None)
        if settled is not None:
            settled.set()
