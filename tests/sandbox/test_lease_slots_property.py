"""Never more than N live slots, whatever the interleaving: the Lease store as a pure model.

Model replicas run the slot protocol of ``kuber_exec_anyio._kubernetes._lease_slots`` (the core's
``slot_names``, ``lease_body``, ``is_expired``) against the sandbox's ``LeaseStore``, one store
call per step; hypothesis picks which replica steps next, when the clock moves and which replica
dies (stops without releasing). After every step: no slot has two live holders, and no more
than ``limit`` replicas hold a live slot (live: its holder's last write, create, takeover or
renewal, was less than the lease duration ago; a replica that has not renewed for that long
knows its slot may be gone).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core.limits import is_expired, lease_body, slot_names, transitions_of
from kuber_exec_sandbox import LeaseStore

NS = "platform"
DURATION = 10


@attrs.define
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@attrs.define
class Replica:
    name: str
    #: (slot, resourceVersion, time of the last successful write) while holding.
    held: tuple[str, str, float] | None = None
    taking: Generator[None, None, tuple[str, str, float] | None] | None = None
    dead: bool = False


def take(
    store: LeaseStore, holder: str, limit: int, clock: Clock
) -> Generator[None, None, tuple[str, str, float] | None]:
    """The take loop, one store call per step."""
    for name in slot_names("acme", limit):
        now = clock()
        status, body = store.create(NS, lease_body(name, holder, DURATION, now))
        yield
        if status == 201:
            return name, body["metadata"]["resourceVersion"], now
        assert status == 409
        status, lease = store.get(NS, name)
        yield
        if status == 404:
            continue
        now = clock()
        if not is_expired(lease, now):
            continue
        version = lease["metadata"]["resourceVersion"]
        update = lease_body(
            name,
            holder,
            DURATION,
            now,
            resource_version=version,
            transitions=transitions_of(lease) + 1,
        )
        status, body = store.update(NS, name, update)
        yield
        if status == 200:
            return name, body["metadata"]["resourceVersion"], now
    return None


def step(replica: Replica, store: LeaseStore, limit: int, clock: Clock, action: str) -> None:
    if replica.dead:
        return
    if replica.held is None:
        if replica.taking is None:
            replica.taking = take(store, replica.name, limit, clock)
        try:
            next(replica.taking)
        except StopIteration as finished:
            replica.taking = None
            replica.held = finished.value
        return
    name, version, _ = replica.held
    if action == "release":
        store.delete(NS, name, {"preconditions": {"resourceVersion": version}})
        replica.held = None
        return
    now = clock()
    status, body = store.update(
        NS, name, lease_body(name, replica.name, DURATION, now, resource_version=version)
    )
    # 409/404: taken over (we renewed too late); the slot is no longer ours.
    replica.held = (name, body["metadata"]["resourceVersion"], now) if status == 200 else None


def check(replicas: list[Replica], limit: int, clock: Clock) -> None:
    live = [
        r.held[0]
        for r in replicas
        if not r.dead and r.held is not None and clock() < r.held[2] + DURATION
    ]
    assert len(live) == len(set(live)), live
    assert len(live) <= limit


@settings(max_examples=1000, deadline=None)
@given(
    limit=st.integers(1, 3),
    count=st.integers(2, 5),
    moves=st.lists(
        st.tuples(
            st.sampled_from(["step", "step", "step", "release", "clock", "die"]),
            st.integers(0, 4),
            st.sampled_from([0.5, 3.0, DURATION - 0.5, DURATION, DURATION + 1.0]),
        ),
        max_size=120,
    ),
)
def test_never_more_than_limit_live_slots(
    limit: int, count: int, moves: list[tuple[str, int, float]]
) -> None:
    store = LeaseStore()
    clock = Clock()
    replicas = [Replica(f"replica-{i}") for i in range(count)]
    for action, index, seconds in moves:
        replica = replicas[index % count]
        if action == "clock":
            clock.now += seconds
        elif action == "die":
            replica.dead = True
        else:
            step(replica, store, limit, clock, action)
        check(replicas, limit, clock)
    assert len(store.holders(NS)) <= limit


def take_to_the_end(replica: Replica, store: LeaseStore, clock: Clock) -> None:
    step(replica, store, 1, clock, "step")
    while replica.taking is not None:
        step(replica, store, 1, clock, "step")


def test_a_dead_replicas_slot_is_taken_only_after_the_duration() -> None:
    store = LeaseStore()
    clock = Clock()
    doomed, survivor = Replica("doomed"), Replica("survivor")
    take_to_the_end(doomed, store, clock)
    assert doomed.held is not None
    doomed.dead = True
    clock.now += DURATION - 0.001
    take_to_the_end(survivor, store, clock)
    assert survivor.held is None  # create 409, GET: still live, no slot left
    clock.now += 0.001
    take_to_the_end(survivor, store, clock)
    lease: Any = store.lease(NS, "acme-0")
    assert survivor.held is not None
    assert lease["spec"]["holderIdentity"] == "survivor"
    assert lease["spec"]["leaseTransitions"] == 1
