"""Faults on demand (``kuber_sandbox.faults``) against the library, under trio and asyncio.

Each test arms one fault through the plugin's fixtures and checks what ``docs/testing.md`` says
the library then does; the counters on ``faults`` show the fault armed was the one that met the
request. Waits are on conditions (a frame arriving, the sandbox reaping its commands), each
bounded by ``anyio.fail_after``; nothing sleeps to synchronise.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from kuber_exec_core import (
    Error,
    ExecError,
    ExecErrorCode,
    ExecResult,
    Exit,
    Stdin,
    Stdout,
)
from kuber_exec_core.watch import WatchStore
from kuber_exec_pytest import KuberSandbox
from kuber_exec_sandbox import PodSpec
from support import collect_frames, output_of

pytestmark = pytest.mark.anyio

WAIT = 10.0  # seconds any condition may take before the test fails
LOST = "exit status unknown: the connection closed before the exec status arrived"
Outcome = ExecResult | tuple[ExecErrorCode, str]


async def outcome(call: Any) -> Outcome:
    try:
        result: ExecResult = await call
    except ExecError as error:
        return (error.code, error.message)
    return result


async def refusal(call: Any) -> ExecError:
    """The ``ExecError`` ``call`` raises."""
    with pytest.raises(ExecError) as raised:
        await call
    return raised.value


def ran(result: ExecResult) -> tuple[int, bytes, bytes]:
    return (result.exit_code, result.stdout, result.stderr)


# -- refused upgrades ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "detail"),
    [
        (401, "Unauthorized"),
        (403, 'pods "{pod}" is forbidden: User "kuber-exec-sandbox" cannot create resource '
              '"pods/exec" in API group "" in the namespace "kuber-test"'),
        (404, 'pods "{pod}" not found'),
        (500, "the kuber-exec sandbox refused the exec upgrade (Internal Server Error)"),
        (503, "the kuber-exec sandbox refused the exec upgrade (Service Unavailable)"),
    ],
)  # fmt: skip
async def test_a_refused_upgrade_is_exec_failed_quoting_the_status(
    kuber_sandbox: KuberSandbox, kuber_service: Any, status: int, detail: str
) -> None:
    target = kuber_sandbox.add_workspace()
    pod = kuber_sandbox.pods(target)[0].name
    kuber_sandbox.faults.refuse_exec(status)
    refused = await refusal(kuber_service.execute(target.request("true")))
    # Asserted by structure (the code, the HTTP status) and the Status message quoted, not by
    # the library's own wording around it. A 403 Forbidden is the server's authorization
    # refusing the requester: EXEC_TARGET_FORBIDDEN, as the pre-flight reports it.
    code = ExecErrorCode.TARGET_FORBIDDEN if status == 403 else ExecErrorCode.FAILED
    assert (refused.code, refused.http_status) == (code, status)
    assert refused.message.endswith(f": {detail.format(pod=pod)}")
    assert kuber_sandbox.faults.refused_execs == 1
    assert kuber_sandbox.live_processes == 0  # nothing started
    # Armed for one request: the next exec runs.
    assert ran(await kuber_service.execute(target.request("echo", "ok"))) == (0, b"ok\n", b"")


async def test_a_refusal_names_its_pod_and_counts_its_times(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace(pods=[PodSpec(name="a"), PodSpec(name="b")])
    kuber_sandbox.faults.refuse_exec(403, "no exec for you", pod="a", times=2)
    for _ in range(2):
        refused = await refusal(kuber_service.execute(target.request("true")))
        assert (refused.code, refused.http_status) == (ExecErrorCode.TARGET_FORBIDDEN, 403)
        assert refused.message.endswith(": no exec for you")
    result = await kuber_service.execute(target.request("sh", "-c", "echo $HOSTNAME"))
    assert result.stdout == b"a\n"
    assert kuber_sandbox.faults.refused_execs == 2


async def test_a_refused_upgrade_fails_open_interactive_on_entry(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace()
    kuber_sandbox.faults.refuse_exec(401)
    with pytest.raises(ExecError) as raised:
        async with kuber_service.open_interactive(target.request("sh")):
            pytest.fail("the session opened")
    assert (raised.value.code, raised.value.http_status) == (ExecErrorCode.FAILED, 401)
    assert raised.value.message.endswith(": Unauthorized")


def test_refusals_need_an_error_status_and_positive_times(kuber_sandbox: KuberSandbox) -> None:
    faults = kuber_sandbox.faults
    for status in (200, 399, 600, True):
        with pytest.raises(ExecError, match="HTTP error status"):
            faults.refuse_exec(status)
    for times in (0, -1, True):
        with pytest.raises(ExecError, match="times must be a positive integer"):
            faults.refuse_exec(403, times=times)
    with pytest.raises(ExecError, match="nbytes must be a non-negative integer"):
        faults.drop_exec_after(-1)
    with pytest.raises(ExecError, match="nbytes must be a non-negative integer"):
        faults.cut_exec_output_after(-1)
    with pytest.raises(ExecError, match="times must be a positive integer"):
        faults.cut_exec_output_after(10, times=0)


# -- dropped connections -------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes", [0, 1, 100, 40_000])
async def test_a_dropped_connection_is_exec_failed_after_exactly_n_bytes(
    kuber_sandbox: KuberSandbox, kuber_service: Any, nbytes: int
) -> None:
    target = kuber_sandbox.add_workspace()
    command = target.request("head", "-c", "100000", "/dev/zero")
    kuber_sandbox.faults.drop_exec_after(nbytes)
    async with kuber_service.open_interactive(command, tty=False, stdin=False) as session:
        frames = await collect_frames(session, within=WAIT)
    assert output_of(frames, Stdout) == b"\0" * nbytes
    assert frames[-1] == Error(code=ExecErrorCode.FAILED, message=LOST)
    assert kuber_sandbox.faults.dropped_execs == 1
    with anyio.fail_after(WAIT):
        await kuber_sandbox.wait_processes_reaped()  # the command was killed

    kuber_sandbox.faults.drop_exec_after(nbytes)
    assert await outcome(kuber_service.execute(command)) == (ExecErrorCode.FAILED, LOST)
    assert kuber_sandbox.faults.dropped_execs == 2
    # Armed once each time: the next run is whole.
    assert (await kuber_service.execute(command)).stdout == b"\0" * 100_000


async def test_a_command_that_writes_less_than_n_bytes_ends_normally(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace()
    kuber_sandbox.faults.drop_exec_after(10, times=None)
    assert ran(await kuber_service.execute(target.request("echo", "short"))) == (0, b"short\n", b"")
    assert kuber_sandbox.faults.dropped_execs == 0
    kuber_sandbox.faults.clear()
    assert (await kuber_service.execute(target.request("head", "-c", "99", "/dev/zero"))).stdout


@pytest.mark.parametrize("nbytes", [0, 1, 40_000])
async def test_cut_output_ends_as_usual_with_only_the_first_n_bytes(
    kuber_sandbox: KuberSandbox, kuber_service: Any, nbytes: int
) -> None:
    target = kuber_sandbox.add_workspace()
    command = target.request("sh", "-c", "head -c 100000 /dev/zero; echo done >&2")
    kuber_sandbox.faults.cut_exec_output_after(nbytes)
    result = await kuber_service.execute(command)
    # The command ran to its end (its status came); what it wrote past n bytes never did.
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"\0" * nbytes, b"")
    assert kuber_sandbox.faults.cut_execs == 1
    assert (await kuber_service.execute(command)).stderr == b"done\n"


# -- 410 Gone on watches -------------------------------------------------------------------------


def lists(cache: Any, namespace: str) -> int:
    watch = cache.store.namespace(namespace)
    return 0 if watch is None else sum(r.lists_completed for r in watch.reflectors)


async def test_a_watch_answered_410_relists_and_the_cache_stays_right(
    kuber_sandbox: KuberSandbox, kuber_backend: Any, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace(pods=[PodSpec(name="first")])
    namespace = target.workspace.project
    async with kuber_backend.watch([namespace], backoff_initial=0.01) as cache:
        with anyio.fail_after(WAIT):
            await cache.wait_synced()
        listed = lists(cache, namespace)
        # Three watches (Deployments, ReplicaSets, Pods) reconnect; each is answered 410.
        kuber_sandbox.faults.answer_watches_gone(3)
        kuber_sandbox.cluster.drop_watches()
        with anyio.fail_after(WAIT):
            await cache.wait_until(lambda store: lists(cache, namespace) >= listed + 3)
        assert kuber_sandbox.faults.refused_watches == 3

        # The watches resumed from the relists: a change made now reaches the cache.
        kuber_sandbox.cluster.delete_pod(namespace, "first")

        def gone(store: WatchStore) -> bool:
            watch = store.namespace(namespace)
            return watch is not None and "first" not in watch.pods.items

        with anyio.fail_after(WAIT):
            await cache.wait_until(gone)
        refused = await outcome(kuber_service.execute(target.request("true")))
        assert refused == (
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment app has no running owned pod/container",
        )


# -- slow readers --------------------------------------------------------------------------------


@pytest.mark.kuber_backend(ping_interval=0.05, pong_timeout=0.5)
async def test_a_server_that_stops_reading_stdin_is_declared_dead_by_the_keepalive(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace()
    kuber_sandbox.faults.hold_stdin()
    # More than the socket buffers hold: the sends back up and the pings wait behind them.
    stalled = await outcome(kuber_service.execute(target.request("cat"), stdin=b"x" * (16 << 20)))
    assert stalled == (ExecErrorCode.FAILED, f"{LOST} (no pong from the server within 0.5 s)")
    kuber_sandbox.faults.release()
    with anyio.fail_after(WAIT):
        await kuber_sandbox.wait_processes_reaped()


async def test_held_output_holds_the_call_until_release(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace()
    kuber_sandbox.faults.hold_output()
    # Nothing comes back while output is held: the caller's own deadline ends the call.
    with anyio.move_on_after(0.3) as deadline:
        await kuber_service.execute(target.request("echo", "held"))
    assert deadline.cancelled_caught
    with anyio.fail_after(WAIT):
        await kuber_sandbox.wait_processes_reaped()  # leaving closed it; the command is reaped

    async with kuber_service.open_interactive(target.request("cat"), tty=False) as session:
        await session.send(Stdin(b"after release\n"))
        kuber_sandbox.faults.release()
        with anyio.fail_after(WAIT):
            first = await session.__anext__()
        assert first == Stdout(b"after release\n")
        await session.send(Stdin(eof=True))
        rest = await collect_frames(session, within=WAIT)
    assert [frame for frame in rest if not isinstance(frame, Stdout)] == [Exit(exit_code=0)]


# -- pods that end -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["end_pod", "kill_processes"])
async def test_a_pod_whose_processes_die_reports_exit_137(
    kuber_sandbox: KuberSandbox, kuber_service: Any, how: str
) -> None:
    target = kuber_sandbox.add_workspace(pods=[PodSpec(name="only")])
    script = target.request("sh", "-c", "echo ready; exec sleep 300")
    async with kuber_service.open_interactive(script, tty=False, stdin=False) as session:
        with anyio.fail_after(WAIT):
            assert await session.__anext__() == Stdout(b"ready\n")
        killed = getattr(kuber_sandbox, how)(target)
        frames = await collect_frames(session, within=WAIT)
    assert killed == 1
    assert frames == [
        Exit(
            exit_code=137,
            reason="NonZeroExitCode",
            message="command terminated with non-zero exit code: exit status 137",
        )
    ]
    after = await outcome(kuber_service.execute(target.request("echo", "again")))
    if how == "end_pod":
        assert kuber_sandbox.pods(target) == []
        assert after == (
            ExecErrorCode.TARGET_NOT_READY,
            "Deployment app has no running owned pod/container",
        )
    else:
        assert isinstance(after, ExecResult)
        assert ran(after) == (0, b"again\n", b"")


async def test_a_session_in_a_pod_that_goes_away_ends_137_and_the_next_exec_retargets(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace(pods=[PodSpec(name="a"), PodSpec(name="b")])
    script = target.request("sh", "-c", "echo $HOSTNAME; exec sleep 300")
    async with kuber_service.open_interactive(script, tty=False, stdin=False) as session:
        with anyio.fail_after(WAIT):
            assert await session.__anext__() == Stdout(b"a\n")  # ready pods rank by name
        assert kuber_sandbox.end_pod(target, "a") == 1
        frames = await collect_frames(session, within=WAIT)
    assert [frame.exit_code for frame in frames if isinstance(frame, Exit)] == [137]
    again = await kuber_service.execute(target.request("sh", "-c", "echo $HOSTNAME"))
    assert again.stdout == b"b\n"
    with pytest.raises(KeyError):
        kuber_sandbox.end_pod(target, "a")


def test_ending_a_pod_needs_a_pod_to_name(kuber_sandbox: KuberSandbox) -> None:
    target = kuber_sandbox.add_workspace(pods=2)
    with pytest.raises(ExecError, match="app has 2 pods: name the one to end"):
        kuber_sandbox.end_pod(target)
    assert kuber_sandbox.kill_processes(target, kuber_sandbox.pods(target)[0].name) == 0
