"""Per-workspace limits across replicas: session slots held as Leases in the sandbox.

Each replica is its own ``ExecService`` over its own ``KubernetesBackend`` (own HTTP client,
own ``ClusterSlots``); they share nothing but the sandbox's Lease store, as replicas behind a
load balancer share only the API server.
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
import pytest

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Workspace
from kuber_exec_sandbox import AccessRule, LeaseStore, Sandbox, demo_cluster, run_sandbox_in_thread

pytestmark = pytest.mark.anyio

NAMESPACE = "platform"
REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=["cat"]
)
REPLICA = Path(__file__).with_name("lease_replica.py")


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running


@asynccontextmanager
async def replicas(
    adapter: Any, sandbox: Sandbox, count: int, limit: int, **slot_options: Any
) -> AsyncIterator[list[Any]]:
    """``count`` services, each with its own backend and Lease slots, limit ``limit``."""
    async with AsyncExitStack() as stack:
        services = []
        for index in range(count):
            slots = adapter.ClusterSlots(NAMESPACE, replica=f"replica-{index}", **slot_options)
            backend = adapter.KubernetesBackend(
                adapter.ClusterConfig(sandbox.url), cluster_slots=slots
            )
            await stack.enter_async_context(backend)
            limits = adapter.SessionLimits(max_sessions_per_workspace=limit)
            services.append(adapter.ExecService(backend, session_limits=limits))
        yield services


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
                peak = max(peak, len(sandbox.leases.holders(NAMESPACE)))
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
        replicas(adapter, sandbox, 3, 2, duration=30) as services,
        anyio.create_task_group() as tasks,
    ):
        for index in range(attempts):
            tasks.start_soon(attempt, services[index % 3])
        with anyio.fail_after(30):
            await finished.wait()
        held = sandbox.leases.holders(NAMESPACE)
        assert opened == 2
        assert sorted(held) == ["demo-0", "demo-1"]
        assert len({holder.split("/")[0] for holder in held.values() if holder}) <= 2
        assert peak <= 2
        assert len(refused) == attempts - 2
        assert {e.code for e in refused} == {ExecErrorCode.ABORTED}
        assert "across the service's replicas (the limit is 2)" in refused[0].message
        release.set()
    # Every session ended: every slot released (deleted), none left to expire.
    assert sandbox.leases.holders(NAMESPACE) == {}
    async with replicas(adapter, sandbox, 1, 2, duration=30) as (again,):
        session = again.open_interactive(REQUEST, tty=False)
        async with session:
            assert list(sandbox.leases.holders(NAMESPACE)) == ["demo-0"]


async def test_one_session_costs_a_create_and_a_delete(adapter: Any, sandbox: Sandbox) -> None:
    async with replicas(adapter, sandbox, 1, 2, duration=60) as (service,):
        slots = service.backend.cluster_slots
        result = await service.execute(
            ExecRequest(workspace=REQUEST.workspace, deployment="web", command=["true"])
        )
        assert result.exit_code == 0
        assert slots.api_calls == 2
        async with service.open_interactive(REQUEST, tty=False):
            # Slot 0 is held: the next takes create (409) + GET, then create of slot 1.
            before = slots.api_calls
            async with service.open_interactive(REQUEST, tty=False):
                assert slots.api_calls - before == 3


async def test_a_held_slot_is_renewed(adapter: Any, sandbox: Sandbox) -> None:
    async with replicas(adapter, sandbox, 1, 1, duration=5, renew_interval=0.05) as (service,):
        session = service.open_interactive(REQUEST, tty=False)
        async with session:
            first = sandbox.leases.lease(NAMESPACE, "demo-0")
            assert first is not None

            def renewed_twice(store: LeaseStore) -> bool:
                lease = store.lease(NAMESPACE, "demo-0")
                assert lease is not None
                version = int(lease["metadata"]["resourceVersion"])
                return version >= int(first["metadata"]["resourceVersion"]) + 2

            await wait_for(sandbox.leases, renewed_twice)
            lease = sandbox.leases.lease(NAMESPACE, "demo-0")
            assert lease is not None
            assert lease["spec"]["renewTime"] > first["spec"]["renewTime"]
            assert lease["spec"]["acquireTime"] == first["spec"]["acquireTime"]
    assert sandbox.leases.holders(NAMESPACE) == {}


async def test_a_killed_replicas_slot_frees_after_the_lease_duration(
    adapter: Any, sandbox: Sandbox
) -> None:
    duration = 30
    replica = subprocess.Popen(  # noqa: ASYNC220 - started, then only read and killed
        [sys.executable, str(REPLICA), adapter.__name__, sandbox.url, NAMESPACE, str(duration)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        cwd=str(Path(__file__).parents[2]),
    )
    try:
        assert replica.stdout is not None
        line = await anyio.to_thread.run_sync(replica.stdout.readline)
        assert line == b"held\n"
    finally:
        replica.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(replica.wait)
        if replica.stdout is not None:
            replica.stdout.close()
    # Dead, not released: its Lease stays until it expires.
    held = sandbox.leases.holders(NAMESPACE)
    assert list(held) == ["demo-0"]
    assert str(held["demo-0"]).startswith("doomed/")

    # The survivor's clock: now, then past the dead replica's last renewal + the duration.
    offset = 0.0
    async with replicas(
        adapter, sandbox, 1, 1, duration=duration, clock=lambda: time.time() + offset
    ) as (survivor,):
        with pytest.raises(ExecError) as raised:
            await survivor.execute(REQUEST)
        assert raised.value.code is ExecErrorCode.ABORTED
        lease = sandbox.leases.lease(NAMESPACE, "demo-0")
        assert lease is not None
        offset = duration + 1.0
        async with survivor.open_interactive(REQUEST, tty=False):
            taken = sandbox.leases.lease(NAMESPACE, "demo-0")
            assert taken is not None
            assert taken["spec"]["holderIdentity"].startswith("replica-0/")
            assert taken["spec"]["leaseTransitions"] == 1
    assert sandbox.leases.holders(NAMESPACE) == {}


async def test_missing_lease_rbac_fails_clearly(adapter: Any, sandbox: Sandbox) -> None:
    sandbox.access.enforce(
        [AccessRule(verbs=("get", "create"), resource="pods", subresource="exec")]
    )
    async with replicas(adapter, sandbox, 1, 2) as (service,):
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

    for options in ({"duration": 0}, {"duration": 10, "renew_interval": 10}, {"duration": True}):
        with pytest.raises(ExecError) as raised:
            ClusterSlots(NAMESPACE, **options)
        assert raised.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError):
        ClusterSlots("")


async def test_a_slot_taken_over_is_left_to_its_new_holder(adapter: Any, sandbox: Sandbox) -> None:
    import httpx

    async with replicas(adapter, sandbox, 1, 1, duration=30) as (service,):
        session = service.open_interactive(REQUEST, tty=False)
        async with session:
            lease = sandbox.leases.lease(NAMESPACE, "demo-0")
            assert lease is not None
            # Another replica decided this one was dead and took the slot over.
            lease["spec"]["holderIdentity"] = "other-replica/1"
            path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/demo-0"
            async with httpx.AsyncClient(base_url=sandbox.url) as http:
                assert (await http.put(path, json=lease)).status_code == 200
    # The release's precondition (the resourceVersion it last wrote) kept it from deleting it.
    assert sandbox.leases.holders(NAMESPACE) == {"demo-0": "other-replica/1"}


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
