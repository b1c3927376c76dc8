"""Faults on demand: what a test arms on ``cluster.faults`` to see how a client copes.

Each fault is armed from any thread (the test's, while the server runs in its own) and taken by
the server as requests arrive, so a test arms it *before* the call it wants to break:

- :meth:`Faults.refuse_exec`: the next exec upgrades are refused with an HTTP status and a
  ``metav1.Status`` body, before any byte of WebSocket;
- :meth:`Faults.drop_exec_after`: the next exec sessions send ``nbytes`` bytes of output, then
  the connection ends without a Close frame or a status, as a broken network or a dying node ends
  it (the command is killed);
- :meth:`Faults.cut_exec_output_after`: the next exec sessions send ``nbytes`` bytes of output
  and drop the rest, then end as usual, with the command's own status and a Close: the stream a
  loaded 1.37 node was seen to end megabytes short of what ``tar c`` wrote, with ``Success``
  (docs/protocol.md);
- :meth:`Faults.answer_watches_gone`: the next watch requests are answered ``410 Gone``, whatever
  their ``resourceVersion`` (:meth:`~kuber_exec_sandbox.Cluster.compact` ends the open ones with
  an ``ERROR`` 410 event);
- :meth:`Faults.hold_stdin` and :meth:`Faults.hold_output`: every exec session stops reading the
  client (no stdin, no pongs: the client's sends back up over TCP) or stops sending (output and
  status wait; the command blocks on its full pipe) until :meth:`Faults.release`;
- :meth:`Faults.kill_processes`: every command running in a pod is killed (``SIGKILL``: the
  client gets exit code 137); :meth:`~kuber_exec_sandbox.Cluster.end_pod` also deletes the pod.

The counters (``refused_execs``, ``dropped_execs``, ``refused_watches``) say how many requests a
fault has met, so a test can check that the fault it armed was the one that happened.
"""

from __future__ import annotations

import contextlib
import http
import os
import signal
import threading

import attrs
import trio

from kuber_exec_core import ExecError, ExecErrorCode

__all__ = ["STOPPED_CONTAINER", "Faults", "Gate"]

#: What containerd answers for an exec into a container that a rolling update has just stopped
#: (kubelet's ``Internal error occurred:`` prefix is added by the Status).
STOPPED_CONTAINER = (
    "error executing command in container: failed to exec in container: failed to start exec: "
    "OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown"
)

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_reason(status: int) -> str:
    """The ``reason`` a Kubernetes ``Status`` carries for an HTTP status (``Unknown`` if none)."""
    return _REASONS.get(status, "Unknown")


def _default_message(status: int, namespace: str, pod: str) -> str:
    if status == 401:
        return "Unauthorized"
    if status == 403:
        return (
            f'pods "{pod}" is forbidden: User "kuber-exec-sandbox" cannot create resource '
            f'"pods/exec" in API group "" in the namespace "{namespace}"'
        )
    if status == 404:
        return f'pods "{pod}" not found'
    return f"the kuber-exec sandbox refused the exec upgrade ({http.HTTPStatus(status).phrase})"


def _check_times(times: int | None) -> int | None:
    if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
        raise ExecError(
            ExecErrorCode.INVALID, "times must be a positive integer, or None for every request"
        )
    return times


@attrs.define
class _Armed:
    """A fault for the exec sessions of ``namespace``/``pod`` (``None``: any)."""

    namespace: str | None
    pod: str | None
    remaining: int | None
    status: int = 0
    message: str | None = None
    nbytes: int = 0

    def matches(self, namespace: str, pod: str) -> bool:
        return (self.namespace in (None, namespace)) and (self.pod in (None, pod))


class Gate:
    """Open until :meth:`hold`, then closed until :meth:`release`; thread-safe.

    :meth:`wait` runs on the server's trio loop; ``hold`` and ``release`` from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False
        self._waiters: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []

    @property
    def held(self) -> bool:
        """Whether the gate is closed now."""
        return self._held

    def hold(self) -> None:
        """Close the gate: :meth:`wait` blocks from now on."""
        with self._lock:
            self._held = True

    def release(self) -> None:
        """Open the gate and wake every waiter."""
        with self._lock:
            self._held = False
            waiters, self._waiters = self._waiters, []
        for token, event in waiters:
            # RunFinishedError: that server has stopped; nobody waits there any more.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(event.set)

    async def wait(self) -> None:
        """Return at once while the gate is open; else when it opens (call on a trio loop)."""
        while True:
            with self._lock:
                if not self._held:
                    return
                waiter = (trio.lowlevel.current_trio_token(), trio.Event())
                self._waiters.append(waiter)
            try:
                await waiter[1].wait()
            finally:
                with self._lock, contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)


class Faults:
    """The faults armed on one cluster (``cluster.faults``); see the module docstring.

    Every method is thread-safe. ``namespace``/``pod`` narrow an exec fault to one pod's
    sessions (default: any); ``times`` is how many requests it applies to (``None``: every one,
    until :meth:`clear`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refusals: list[_Armed] = []
        self._drops: list[_Armed] = []
        self._cuts: list[_Armed] = []
        self._forward_drops: list[_Armed] = []
        self._start_failures: list[_Armed] = []
        self._ephemeral_refusals: list[_Armed] = []
        self._gone_watches: int | None = 0
        self._processes: dict[tuple[str, str], set[int]] = {}
        self._started: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []
        #: Closed by :meth:`hold_stdin`: sessions stop reading what the client sends.
        self.stdin = Gate()
        #: Closed by :meth:`hold_output`: sessions stop sending output and status.
        self.output = Gate()
        #: Exec upgrades refused by :meth:`refuse_exec` so far.
        self.refused_execs = 0
        #: Exec sessions dropped by :meth:`drop_exec_after` so far.
        self.dropped_execs = 0
        #: Exec sessions whose output was cut by :meth:`cut_exec_output_after` so far.
        self.cut_execs = 0
        #: Port-forward WebSockets dropped by :meth:`drop_port_forward_after` so far.
        self.dropped_forwards = 0
        #: Exec sessions whose start failed by :meth:`fail_exec_start` so far.
        self.failed_starts = 0
        #: Watch requests answered ``410 Gone`` by :meth:`answer_watches_gone` so far.
        self.refused_watches = 0
        #: Ephemeral container PATCHes refused by :meth:`refuse_ephemeral` so far.
        self.refused_ephemeral = 0

    def __repr__(self) -> str:
        return (
            f"<Faults refusals={len(self._refusals)} drops={len(self._drops)} "
            f"stdin_held={self.stdin.held} output_held={self.output.held}>"
        )

    # -- arming (any thread) -------------------------------------------------------------------

    def refuse_exec(
        self,
        status: int = 403,
        message: str | None = None,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Refuse the next exec upgrades with HTTP ``status`` and a ``Status`` body whose
        message is ``message`` (default: what an API server says for that status, e.g. the RBAC
        ``forbidden`` text for 403).

        Raises:
            ExecError: ``EXEC_INVALID`` when ``status`` is not an HTTP error status (400-599),
                or ``times`` is not positive.
        """
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ExecError(
                ExecErrorCode.INVALID, "status must be an HTTP error status, 400 to 599"
            )
        armed = _Armed(namespace, pod, _check_times(times), status=status, message=message)
        with self._lock:
            self._refusals.append(armed)

    def drop_exec_after(
        self,
        nbytes: int,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        times: int | None = 1,
    ) -> None:
        """End the next exec sessions abruptly once ``nbytes`` bytes of output (stdout and
        stderr data, counted together) have been sent; ``0`` right after the session's first
        (empty) message. No Close frame and no status: the TCP connection just ends, and the
        command is killed. A command that writes less than ``nbytes`` ends normally.

        Raises:
            ExecError: ``EXEC_INVALID`` when ``nbytes`` is negative, or ``times`` is not
                positive.
        """
        self._arm_after(self._drops, nbytes, namespace, pod, times)

    def cut_exec_output_after(
        self,
        nbytes: int,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Let the next exec sessions send only their first ``nbytes`` bytes of output (stdout
        and stderr data, counted together) and drop the rest, while the command runs on to its
        end; the session then ends as usual, with the command's status and a Close. A command
        that writes at most ``nbytes`` is not cut (nor counted in ``cut_execs``).

        Raises:
            ExecError: ``EXEC_INVALID`` when ``nbytes`` is negative, or ``times`` is not
                positive.
        """
        self._arm_after(self._cuts, nbytes, namespace, pod, times)

    def drop_port_forward_after(
        self,
        nbytes: int,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        times: int | None = 1,
    ) -> None:
        """End the next port-forward WebSockets abruptly once ``nbytes`` bytes have been sent
        to the client on them (``0``: right after the upgrade): no Close frame, the TCP
        connection just ends, as a broken network or a dying API server does. (Killing the pod,
        ``cluster.delete_pod``, ends its forwards too; ``refuse_exec`` refuses port-forward
        upgrades as well as exec ones.)

        Raises:
            ExecError: ``EXEC_INVALID`` when ``nbytes`` is negative, or ``times`` is not
                positive.
        """
        self._arm_after(self._forward_drops, nbytes, namespace, pod, times)

    def take_forward_drop(self, namespace: str, pod: str) -> int | None:
        """For the server: after how many bytes this port-forward WebSocket is dropped."""
        fault = self._take(self._forward_drops, namespace, pod)
        if fault is not None:
            with self._lock:
                self.dropped_forwards += 1
        return None if fault is None else fault.nbytes

    def fail_exec_start(
        self,
        message: str = STOPPED_CONTAINER,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Let the next exec upgrades succeed, then fail to start their command: nothing runs,
        and the session's Status is the runtime's ``InternalError`` (500) with ``message``
        (default :data:`STOPPED_CONTAINER`, what containerd says for a container stopped by a
        rolling update while the pod still looks ready).

        Raises:
            ExecError: ``EXEC_INVALID`` when ``times`` is not positive.
        """
        armed = _Armed(namespace, pod, _check_times(times), message=message)
        with self._lock:
            self._start_failures.append(armed)

    def refuse_ephemeral(
        self,
        status: int = 403,
        message: str | None = None,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Refuse the next PATCHes of ``pods/{pod}/ephemeralcontainers`` with HTTP ``status``
        and a ``Status`` whose message is ``message`` (default, for 403: an admission webhook's
        refusal), before anything is added: a debug container refused by the cluster.

        Raises:
            ExecError: ``EXEC_INVALID`` when ``status`` is not an HTTP error status (400-599),
                or ``times`` is not positive.
        """
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ExecError(
                ExecErrorCode.INVALID, "status must be an HTTP error status, 400 to 599"
            )
        armed = _Armed(namespace, pod, _check_times(times), status=status, message=message)
        with self._lock:
            self._ephemeral_refusals.append(armed)

    def answer_watches_gone(self, times: int | None = 1) -> None:
        """Answer the next ``times`` watch requests (``?watch=1``) ``410 Gone`` (reason
        ``Expired``), whatever their ``resourceVersion``: what a client meets when its resume
        point was compacted away. LISTs are served as before.

        Raises:
            ExecError: ``EXEC_INVALID`` when ``times`` is not positive.
        """
        times = _check_times(times)
        with self._lock:
            if times is None or self._gone_watches is None:
                self._gone_watches = None
            else:
                self._gone_watches += times

    def hold_stdin(self) -> None:
        """Every exec session stops reading the client until :meth:`release`: stdin, resizes,
        closes and pings wait on the socket (the client's sends back up; no pong comes)."""
        self.stdin.hold()

    def hold_output(self) -> None:
        """Every exec session stops sending until :meth:`release`: output and the final status
        wait (the command blocks once its pipe is full); pings are still answered."""
        self.output.hold()

    def release(self) -> None:
        """Undo :meth:`hold_stdin` and :meth:`hold_output`: held sessions go on."""
        self.stdin.release()
        self.output.release()

    def kill_processes(self, namespace: str, pod: str) -> int:
        """Kill (``SIGKILL``, the whole process group) every command running in the pod now;
        each session then reports exit code 137 (128 + 9) as a container runtime does. Returns
        how many were killed."""
        with self._lock:
            pids = sorted(self._processes.get((namespace, pod), ()))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        return len(pids)

    def running(self, namespace: str | None = None, pod: str | None = None) -> int:
        """How many commands run now (in the pod, or anywhere): spawned and not yet reaped."""
        with self._lock:
            return self._running(namespace, pod)

    def _running(self, namespace: str | None, pod: str | None) -> int:
        return sum(
            len(pids)
            for (ns, name), pids in self._processes.items()
            if namespace in (None, ns) and pod in (None, name)
        )

    async def wait_running(
        self, count: int = 1, *, namespace: str | None = None, pod: str | None = None
    ) -> None:
        """Return once at least ``count`` commands run (in the pod, or anywhere): a test's way
        to know a command has started before it breaks something (call on a trio loop)."""
        while True:
            waiter = (trio.lowlevel.current_trio_token(), trio.Event())
            with self._lock:
                if self._running(namespace, pod) >= count:
                    return
                self._started.append(waiter)
            try:
                await waiter[1].wait()
            finally:
                with self._lock, contextlib.suppress(ValueError):
                    self._started.remove(waiter)

    def clear(self) -> None:
        """Disarm every fault and :meth:`release` the held sessions (counters are kept)."""
        with self._lock:
            self._refusals.clear()
            self._drops.clear()
            self._cuts.clear()
            self._forward_drops.clear()
            self._start_failures.clear()
            self._ephemeral_refusals.clear()
            self._gone_watches = 0
        self.release()

    def _arm_after(
        self,
        armed: list[_Armed],
        nbytes: int,
        namespace: str | None,
        pod: str | None,
        times: int | None,
    ) -> None:
        # The byte-count faults' one check and arming (drops and cuts alike).
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ExecError(ExecErrorCode.INVALID, "nbytes must be a non-negative integer")
        fault = _Armed(namespace, pod, _check_times(times), nbytes=nbytes)
        with self._lock:
            armed.append(fault)

    # -- taking (the server) -------------------------------------------------------------------

    def _take(self, armed: list[_Armed], namespace: str, pod: str) -> _Armed | None:
        with self._lock:
            for fault in armed:
                if fault.matches(namespace, pod):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining == 0:
                            armed.remove(fault)
                    return fault
        return None

    def take_refusal(self, namespace: str, pod: str) -> tuple[int, str, str] | None:
        """For the server: ``(status, reason, message)`` when this upgrade is to be refused."""
        fault = self._take(self._refusals, namespace, pod)
        if fault is None:
            return None
        with self._lock:
            self.refused_execs += 1
        message = fault.message
        if message is None:
            message = _default_message(fault.status, namespace, pod)
        return fault.status, status_reason(fault.status), message

    def take_ephemeral_refusal(self, namespace: str, pod: str) -> tuple[int, str, str] | None:
        """For the server: ``(status, reason, message)`` when this ephemeral container PATCH
        is to be refused."""
        fault = self._take(self._ephemeral_refusals, namespace, pod)
        if fault is None:
            return None
        with self._lock:
            self.refused_ephemeral += 1
        message = fault.message
        if message is None:
            message = (
                'admission webhook "sandbox.kuber-exec.dev" denied the request: debug '
                "containers are refused (a fault)"
                if fault.status == 403
                else _default_message(fault.status, namespace, pod)
            )
        return fault.status, status_reason(fault.status), message

    def take_start_failure(self, namespace: str, pod: str) -> str | None:
        """For the server: the runtime's message when this session's command is not to start."""
        fault = self._take(self._start_failures, namespace, pod)
        if fault is None:
            return None
        with self._lock:
            self.failed_starts += 1
        return fault.message

    def take_drop(self, namespace: str, pod: str) -> int | None:
        """For the server: after how many output bytes this session is dropped, if it is."""
        fault = self._take(self._drops, namespace, pod)
        return None if fault is None else fault.nbytes

    def take_cut(self, namespace: str, pod: str) -> int | None:
        """For the server: after how many output bytes this session's output is cut, if it is."""
        fault = self._take(self._cuts, namespace, pod)
        return None if fault is None else fault.nbytes

    def output_cut(self) -> None:
        """For the server: a session's output was cut by :meth:`cut_exec_output_after`."""
        with self._lock:
            self.cut_execs += 1

    def session_dropped(self) -> None:
        """For the server: a session was dropped by :meth:`drop_exec_after`."""
        with self._lock:
            self.dropped_execs += 1

    def take_gone_watch(self) -> bool:
        """For the server: whether this watch request is to be answered ``410 Gone``."""
        with self._lock:
            if self._gone_watches is not None and self._gone_watches == 0:
                return False
            if self._gone_watches is not None:
                self._gone_watches -= 1
            self.refused_watches += 1
            return True

    def process_started(self, namespace: str, pod: str, pid: int) -> None:
        """For the server: a command started in the pod (its process group is ``pid``)."""
        with self._lock:
            self._processes.setdefault((namespace, pod), set()).add(pid)
            waiters, self._started = self._started, []
        for token, event in waiters:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(event.set)

    def process_ended(self, namespace: str, pod: str, pid: int) -> None:
        """For the server: that command has been reaped."""
        with self._lock:
            pids = self._processes.get((namespace, pod))
            if pids is not None:
                pids.discard(pid)
                if not pids:
                    del self._processes[(namespace, pod)]
