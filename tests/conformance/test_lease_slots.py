"""Per-workspace limits across replicas: heartbeats and session records in the sandbox's Leases.

Each replica is its own ``ExecService`` over its own ``KubernetesBackend`` (own HTTP client,
own ``ClusterSlots``); they share nothing but the sandbox's Lease store, as replicas behind a
load balancer share only the API server. A replica to kill is a process of its own
(``lease_replica.py``); a partitioned one reaches the sandbox through a proxy that cuts it off.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from conformance.proxy import FreezingProxy
from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Workspace
from kuber_exec_core.limits import SessionRecord, heartbeat_name, record_name
from kuber_exec_core.supervision import CleanupOutcome
from kuber_exec_sandbox import AccessRule, LeaseStore, Sandbox, demo_cluster, run_sandbox_in_thread
from support import eventually

pytestmark = pytest.mark.anyio

NAMESPACE = "platform"
WORKSPACE = Workspace(project="demo", uid="demo-uid")
REQUEST = ExecRequest(workspace=WORKSPACE, deployment="web", command=["cat"])
RECORD = record_name("demo", "demo-uid")
REPLICA = Path(__file__).with_name("lease_replica.py")


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running


@asynccontextmanager
async def replicas(
    adapter: Any,
    url: str,
    count: int,
    limit: int | None,
    *,
    first: int = 0,
    **slot_options: Any,
) -> AsyncIterator[list[Any]]:
    """``count`` services, each with its own backend and cluster slots, limit ``limit``."""
    async with AsyncExitStack() as stack:
        services = []
        for index in range(first, first + count):
            slots = adapter.ClusterSlots(NAMESPACE, replica=f"replica-{index}", **slot_options)
            backend = adapter.KubernetesBackend(adapter.ClusterConfig(url), cluster_slots=slots)
            await stack.enter_async_context(backend)
            limits = adapter.SessionLimits(max_sessions_per_workspace=limit)
            services.append(adapter.ExecService(backend, session_limits=limits))
        yield services


def record(store: LeaseStore, name: str = RECORD) -> SessionRecord | None:
    lease = store.lease(NAMESPACE, name)
    return None if lease is None else SessionRecord.from_lease("demo", "demo-uid", lease)


def entries(store: LeaseStore) -> int:
    found = record(store)
    return 0 if found is None else len(found.entries)


def recorded(store: LeaseStore) -> list[bool]:
    """Whether each session recorded in any of the workspace's records has its pod noted."""
    noted = []
    for name in store.holders(NAMESPACE):
        if name.startswith(RECORD):
            found = record(store, name)
            assert found is not None
            noted += [entry.target is not None for entry in found.entries.values()]
    return noted


def heartbeats(store: LeaseStore) -> list[str]:
    return sorted(name for name in store.holders(NAMESPACE) if name.startswith("replica-"))


def session_processes(supervision: str) -> list[int]:
    """The pids on this machine whose environment marks them as the session ``supervision``."""
    wanted = f"KUBER_EXEC_SESSION={supervision}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if wanted in environment and state != "Z":
            found.append(int(entry.name))
    return found


async def kill_a_replica(adapter: Any, sandbox: Sandbox, duration: int) -> tuple[str, str]:
    """Start ``lease_replica.py`` (one `cat` session, recorded), ``kill -9`` it once its pod is
    recorded; its session's key and supervision id."""
    replica = subprocess.Popen(  # noqa: ASYNC220 - started, then only read and killed
        [sys.executable, str(REPLICA), adapter.__name__, sandbox.url, NAMESPACE, str(duration)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd=str(Path(__file__).parents[2]),
    )
    try:
        assert replica.stdout is not None
        assert await anyio.to_thread.run_sync(replica.stdout.readline) == b"held\n"
        await eventually(lambda: all(recorded(sandbox.leases)) and entries(sandbox.leases) > 0)
    finally:
        replica.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(replica.wait)
        if replica.stdout is not None:
            replica.stdout.close()
    found = record(sandbox.leases)
    assert found is not None
    ((key, entry),) = found.entries.items()
    assert entry.replica == "doomed"
    assert entry.supervision is not None
    return key, entry.supervision


async def wait_for(store: LeaseStore, predicate: Any) -> None:
    """Until ``predicate(store)`` holds after some write (the store's own condition)."""
    assert await anyio.to_thread.run_sync(store.wait_until, predicate, 10.0)


async def test_the_limit_holds_across_three_replicas_under_a_burst(
    adapter: Any, sandbox: Sandbox
) -> None:
    attempts = 30
    opened = 0
    refused: list[ExecError] = []
    finished = anyio.Event()
    release = anyio.Event()
    done = 0
    peak = 0

    async def attempt(service: Any) -> None:
        nonlocal opened, done, peak
        try:
            async with service.open_interactive(REQUEST, tty=False):
                opened += 1
                peak = max(peak, entries(sandbox.leases))
                done += 1
                if done == attempts:
                    finished.set()
                await release.wait()
                return
        except ExecError as error:
            refused.append(error)
        done += 1
        if done == attempts:
            finished.set()

    async with (
        replicas(adapter, sandbox.url, 3, 2, duration=30) as services,
        anyio.create_task_group() as tasks,
    ):
        for index in range(attempts):
            tasks.start_soon(attempt, services[index % 3])
        with anyio.fail_after(30):
            await finished.wait()
        assert opened == 2
        assert entries(sandbox.leases) == 2
        assert peak <= 2
        assert len(refused) == attempts - 2
        assert {e.code for e in refused} == {ExecErrorCode.ABORTED}
        assert "across the service's replicas (the limit is 2)" in refused[0].message
        assert heartbeats(sandbox.leases) == sorted(
            name for name in sandbox.leases.holders(NAMESPACE) if name != RECORD
        )
        assert len(heartbeats(sandbox.leases)) == 3
        release.set()
    # Every session ended: the record is empty (kept while in use); every backend closed: the
    # heartbeats are gone.
    assert list(sandbox.leases.holders(NAMESPACE)) == [RECORD]
    assert entries(sandbox.leases) == 0
    async with (
        replicas(adapter, sandbox.url, 1, 2, duration=30) as (again,),
        again.open_interactive(REQUEST, tty=False),
    ):
        assert entries(sandbox.leases) == 1


async def test_a_session_costs_a_write_when_it_starts_and_ends(
    adapter: Any, sandbox: Sandbox
) -> None:
    store = sandbox.leases
    async with replicas(adapter, sandbox.url, 1, 2, duration=60) as (service,):
        true = ExecRequest(workspace=WORKSPACE, deployment="web", command=["true"])
        assert (await service.execute(true)).exit_code == 0  # writes the heartbeat too
        before = store.calls.copy()
        assert (await service.execute(true)).exit_code == 0
        calls = store.calls - before
        # Recorded, its pod noted (unless the end came first and carried it), ended: updates
        # of the record; nothing read: the writer knows the record's version.
        assert 2 <= calls["update"] <= 3
        assert calls["create"] == calls["delete"] == 0
        assert calls["get"] == calls["list"] == 0


async def test_open_sessions_cost_no_writes_only_heartbeats(adapter: Any, sandbox: Sandbox) -> None:
    store = sandbox.leases
    async with (
        replicas(adapter, sandbox.url, 1, None, duration=5, renew_interval=0.1) as (service,),
        AsyncExitStack() as stack,
    ):
        for _ in range(20):
            await stack.enter_async_context(service.open_interactive(REQUEST, tty=False))
        # Without a limit, a workspace's sessions are spread over several records.
        await eventually(lambda: len(recorded(store)) == 20 and all(recorded(store)))
        assert len({name for name in store.holders(NAMESPACE) if name.startswith(RECORD)}) > 1
        (heartbeat,) = heartbeats(store)
        before = store.writes.copy()
        await wait_for(store, lambda s: s.writes[heartbeat] >= before[heartbeat] + 5)
        writes = store.writes - before
        assert set(writes) == {heartbeat}


async def test_a_crowd_of_sessions_is_recorded_in_group_commits(
    adapter: Any, sandbox: Sandbox
) -> None:
    store = sandbox.leases
    crowd = 40
    # Under a limit a workspace has one record, where the crowd meets.
    async with replicas(adapter, sandbox.url, 1, 100, duration=60) as (service,):
        opened = anyio.Event()
        leave = anyio.Event()
        count = 0

        async def session() -> None:
            nonlocal count
            async with service.open_interactive(REQUEST, tty=False):
                count += 1
                if count == crowd:
                    opened.set()
                await leave.wait()

        async with anyio.create_task_group() as tasks:
            for _ in range(crowd):
                tasks.start_soon(session)
            with anyio.fail_after(30):
                await opened.wait()
            await eventually(lambda: all(e.target for e in record(store).entries.values()))  # type: ignore[union-attr]
            assert entries(store) == crowd
            at_open = store.writes[RECORD]
            leave.set()
        assert entries(store) == 0
        # One write per start would be 40, one per end 40 more (and 40 pods noted).
        assert at_open < 2 * crowd
        assert store.writes[RECORD] - at_open < crowd


@attrs.frozen
class _TinyBound:
    """Cleanup settings whose caller bound is far shorter than any cleanup."""

    grace: float = 0.5
    timeout: float = 0.001


async def test_a_cleanup_going_on_in_the_background_keeps_its_session_recorded(
    adapter: Any, sandbox: Sandbox
) -> None:
    events: list[Any] = []
    async with replicas(adapter, sandbox.url, 1, 2, duration=30) as (service,):
        service.audit = events.append
        service.cleanup_settings = _TinyBound()  # read when the crew is made, on first use
        async with service.open_interactive(REQUEST, tty=False):
            await eventually(lambda: all(recorded(sandbox.leases)) and entries(sandbox.leases) > 0)
            found = record(sandbox.leases)
            assert found is not None
            ((entry,),) = [list(found.entries.values())]
            assert entry.supervision is not None
        # The caller was told "pending": until the cleanup settles, the session still counts
        # (were this replica to die now, another would finish the cleanup from the record).
        assert [event.cleanup for event in events if event.phase == "ended"] == [
            CleanupOutcome.PENDING
        ]
        assert entries(sandbox.leases) == 1
        await eventually(lambda: entries(sandbox.leases) == 0, "the entry's removal")
        assert session_processes(entry.supervision) == []


async def test_a_killed_replicas_sessions_are_cleaned_up_before_they_stop_counting(
    adapter: Any, sandbox: Sandbox
) -> None:
    duration = 30
    doomed, supervision = await kill_a_replica(adapter, sandbox, duration)
    # Dead, not cleaned up: its `cat` runs on and its session counts.
    assert session_processes(supervision)

    offset = 0.0
    async with replicas(
        adapter, sandbox.url, 1, 1, duration=duration, clock=lambda: time.time() + offset
    ) as (survivor,):
        with pytest.raises(ExecError) as raised:
            await survivor.execute(REQUEST)
        assert raised.value.code is ExecErrorCode.ABORTED
        assert session_processes(supervision)
        # Past the dead replica's last heartbeat + the duration, by the survivor's clock.
        offset = duration + 1.0
        async with survivor.open_interactive(REQUEST, tty=False):
            assert session_processes(supervision) == []
            now = record(sandbox.leases)
            assert now is not None
            assert doomed not in now.entries
            assert [e.replica for e in now.entries.values()] == ["replica-0"]
    assert entries(sandbox.leases) == 0


async def test_the_sweep_cleans_up_after_a_dead_replica_with_no_session_waiting(
    adapter: Any, sandbox: Sandbox
) -> None:
    duration = 2
    _, supervision = await kill_a_replica(adapter, sandbox, duration)
    killed_at = time.monotonic()
    async with replicas(adapter, sandbox.url, 1, 1, duration=duration):
        # The survivor sweeps every `duration`: within two of them the dead one is found
        # (its heartbeat expired), its `cat` ended and its entry removed.
        await eventually(
            lambda: entries(sandbox.leases) == 0,
            "the sweep",
            timeout=4 * duration + 5,
        )
        assert session_processes(supervision) == []
        assert time.monotonic() - killed_at < 3 * duration + 5
        # And the dead replica's heartbeat, expired twice over and owning nothing, is deleted.
        await eventually(
            lambda: len(heartbeats(sandbox.leases)) == 1,
            "the heartbeat's deletion",
            timeout=4 * duration + 5,
        )


async def test_a_replica_started_after_the_last_look_is_not_taken_for_dead(
    adapter: Any, sandbox: Sandbox
) -> None:
    async with replicas(adapter, sandbox.url, 1, 1, duration=30) as (early,):
        assert (
            await early.execute(
                REQUEST.__class__(workspace=WORKSPACE, deployment="web", command=["true"])
            )
        ).exit_code == 0
        # The early replica's last look at the heartbeats predates the late one.
        await early.backend.cluster_slots.present.refresh_alive()
        async with (
            replicas(adapter, sandbox.url, 1, 1, first=1, duration=30) as (late,),
            late.open_interactive(REQUEST, tty=False),
        ):
            await eventually(lambda: all(recorded(sandbox.leases)))
            found = record(sandbox.leases)
            assert found is not None
            ((entry),) = found.entries.values()
            assert entry.supervision is not None
            with pytest.raises(ExecError) as raised:
                await early.execute(REQUEST)
            assert raised.value.code is ExecErrorCode.ABORTED
            # Refused, and the late replica's session untouched.
            assert session_processes(entry.supervision)


async def test_the_heartbeat_does_not_wait_behind_a_crowds_requests(
    adapter: Any, sandbox: Sandbox
) -> None:
    slots = adapter.ClusterSlots(NAMESPACE, replica="busy", duration=3, renew_interval=0.2)
    backend = adapter.KubernetesBackend(
        adapter.ClusterConfig(sandbox.url), cluster_slots=slots, max_concurrent_requests=1
    )
    async with backend:
        heartbeat = heartbeat_name("busy")
        await wait_for(sandbox.leases, lambda store: store.writes[heartbeat] >= 1)
        # Every place in the REST client's queue taken (as by a crowd of record writes and
        # reads): the heartbeat goes on, and the replica does not fence.
        async with backend.rest_client()._slots:
            before = sandbox.leases.writes[heartbeat]
            await wait_for(sandbox.leases, lambda store: store.writes[heartbeat] >= before + 3)
        assert not slots.present.fenced()


async def test_a_partitioned_replica_ends_its_sessions_before_the_others_count_them_out(
    adapter: Any, sandbox: Sandbox
) -> None:
    duration, interval = 3, 0.5
    ended_at: list[float] = []
    fenced: list[ExecError] = []
    async with (
        FreezingProxy(sandbox.url).running() as proxy,
        replicas(adapter, proxy.url, 1, 1, duration=duration, renew_interval=interval) as (cut,),
        replicas(
            adapter, sandbox.url, 1, 1, first=1, duration=duration, renew_interval=interval
        ) as (other,),
    ):
        opened = anyio.Event()

        async def hold_a_session() -> None:
            try:
                async with cut.open_interactive(REQUEST, tty=False):
                    opened.set()
                    await anyio.sleep_forever()
            except ExecError as error:
                fenced.append(error)
            ended_at.append(time.monotonic())

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hold_a_session)
            await opened.wait()
            await eventually(lambda: all(e.target for e in record(sandbox.leases).entries.values()))  # type: ignore[union-attr]
            found = record(sandbox.leases)
            assert found is not None
            ((entry,),) = [list(found.entries.values())]
            assert entry.supervision is not None
            proxy.partition()
            admitted_at = None
            refusals: list[ExecErrorCode] = []
            with anyio.fail_after(4 * duration):
                while admitted_at is None:
                    try:
                        async with other.open_interactive(REQUEST, tty=False):
                            admitted_at = time.monotonic()
                            # The partitioned replica's `cat` was ended first.
                            assert session_processes(entry.supervision) == []
                    except ExecError as error:
                        refusals.append(error.code)
                        await anyio.sleep(0.1)  # a client retrying: not synchronisation
        assert set(refusals) <= {ExecErrorCode.ABORTED}
        assert [error.code for error in fenced] == [ExecErrorCode.ABORTED]
        assert "could not renew its heartbeat" in fenced[0].message
        assert admitted_at is not None
        assert ended_at[0] < admitted_at
        proxy.heal()


async def test_clocks_that_disagree_by_less_than_the_renew_interval_keep_the_limit(
    adapter: Any, sandbox: Sandbox
) -> None:
    duration, interval, skew = 2, 0.5, 0.4
    async with (
        replicas(adapter, sandbox.url, 1, 1, duration=duration, renew_interval=interval) as (
            behind,
        ),
        replicas(
            adapter,
            sandbox.url,
            1,
            1,
            first=1,
            duration=duration,
            renew_interval=interval,
            clock=lambda: time.time() + skew,
        ) as (ahead,),
        behind.open_interactive(REQUEST, tty=False),
    ):
        heartbeat = heartbeat_name("replica-0")
        start = sandbox.leases.writes[heartbeat]
        refusals = 0
        # Across several of the first replica's heartbeats, the one whose clock runs ahead
        # never takes it for dead.
        while sandbox.leases.writes[heartbeat] < start + 2 * duration / interval:
            with pytest.raises(ExecError) as raised:
                await ahead.execute(REQUEST)
            assert raised.value.code is ExecErrorCode.ABORTED
            refusals += 1
        assert refusals > 1
        assert entries(sandbox.leases) == 1


async def test_two_workspaces_of_one_project_have_separate_limits(
    adapter: Any, sandbox: Sandbox
) -> None:
    one = Workspace(project="demo", uid="uid-one")
    two = Workspace(project="demo", uid="uid-two")
    assert record_name(one.project, one.uid) != record_name(two.project, two.uid)
    async with replicas(adapter, sandbox.url, 1, 1, duration=30) as (service,):
        slots = service._slots
        async with slots.hold(one), slots.hold(two):
            with pytest.raises(ExecError) as raised:
                async with slots.hold(one):
                    pass
            assert raised.value.code is ExecErrorCode.ABORTED
    # The in-process limit (no cluster slots) counts per workspace too.
    from kuber_exec_anyio._limits import WorkspaceSlots

    in_process = WorkspaceSlots(1)
    assert in_process.take(one)
    assert in_process.take(two)
    with pytest.raises(ExecError):
        in_process.take(one)


async def test_a_rolling_update_counts_both_versions(adapter: Any, sandbox: Sandbox) -> None:
    from kuber_exec_anyio._kubernetes._legacy_slots import LegacySlotLeases

    async with replicas(adapter, sandbox.url, 1, 2, duration=30, legacy_slots=True) as (new,):
        old_slots = adapter.ClusterSlots(NAMESPACE, replica="old", duration=30)
        old = LegacySlotLeases(2, old_slots, new.backend.rest_client)
        # A replica of the previous version holds slot demo-0; the new one takes demo-1 too.
        async with old.hold(WORKSPACE), new.open_interactive(REQUEST, tty=False):
            assert {"demo-0", "demo-1"} <= set(sandbox.leases.holders(NAMESPACE))
            with pytest.raises(ExecError) as raised:
                await new.execute(REQUEST)
            assert raised.value.code is ExecErrorCode.ABORTED
            with pytest.raises(ExecError) as raised:
                async with old.hold(WORKSPACE):
                    pass
            assert raised.value.code is ExecErrorCode.ABORTED
    assert sorted(sandbox.leases.holders(NAMESPACE)) == [RECORD]
    assert entries(sandbox.leases) == 0


async def test_missing_lease_rbac_fails_clearly(adapter: Any, sandbox: Sandbox) -> None:
    sandbox.access.enforce(
        [AccessRule(verbs=("get", "create"), resource="pods", subresource="exec")]
    )
    async with replicas(adapter, sandbox.url, 1, 2) as (service,):
        with pytest.raises(ExecError) as raised:
            await service.execute(REQUEST)
    assert raised.value.code is ExecErrorCode.FAILED
    assert raised.value.message == (
        "the session slot Lease create failed with HTTP 403 (the service needs create on "
        "leases.coordination.k8s.io in namespace 'platform')"
    )
    assert sandbox.access.exec_users == []


async def test_without_cluster_slots_the_limit_stays_in_process(
    adapter: Any, sandbox: Sandbox
) -> None:
    limits = adapter.SessionLimits(max_sessions_per_workspace=1)
    async with (
        adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as first,
        adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as second,
    ):
        one = adapter.ExecService(first, session_limits=limits)
        two = adapter.ExecService(second, session_limits=limits)
        async with (
            one.open_interactive(REQUEST, tty=False),
            two.open_interactive(REQUEST, tty=False),
        ):
            assert sandbox.leases.holders(NAMESPACE) == {}


def test_cluster_slots_refuse_bad_values() -> None:
    from kuber_exec_anyio import ClusterSlots

    for options in (
        {"duration": 0},
        {"duration": 10, "renew_interval": 10},
        {"duration": True},
        {"replica": ""},
        {"legacy_slots": "yes"},
    ):
        with pytest.raises(ExecError) as raised:
            ClusterSlots(NAMESPACE, **options)
        assert raised.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError):
        ClusterSlots("")


def test_a_limit_beyond_what_a_record_holds_is_refused() -> None:
    import kuber_exec_trio

    slots = kuber_exec_trio.ClusterSlots(NAMESPACE)
    backend = kuber_exec_trio.KubernetesBackend(
        kuber_exec_trio.ClusterConfig("http://127.0.0.1:1"), cluster_slots=slots
    )
    with pytest.raises(ExecError) as raised:
        kuber_exec_trio.ExecService(
            backend, session_limits=kuber_exec_trio.SessionLimits(max_sessions_per_workspace=501)
        )
    assert raised.value.code is ExecErrorCode.INVALID


def test_platform_options_are_type_checked() -> None:
    import kuber_exec_trio

    config = kuber_exec_trio.ClusterConfig("http://127.0.0.1:1")
    with pytest.raises(TypeError):
        kuber_exec_trio.KubernetesBackend(config, preflight="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        kuber_exec_trio.KubernetesBackend(config, cluster_slots="ns")  # type: ignore[arg-type]
    for options in (
        {"ttl": 0},
        {"max_entries": 0},
        {"verbs": ("patch",)},
        {"verbs": "get"},
        {"verbs": ()},
        {"verbs": ("get", "get")},
        {"ttl": True},
    ):
        with pytest.raises(ExecError) as raised:
            kuber_exec_trio.ExecPreflight(**options)
        assert raised.value.code is ExecErrorCode.INVALID
