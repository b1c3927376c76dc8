"""The session record's arithmetic: names, the stored form, and how a batch of changes applies."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kuber_exec_core import ResolvedTarget
from kuber_exec_core.limits import (
    MAX_RECORD_BYTES,
    RECORD_SHARDS,
    SESSIONS_ANNOTATION,
    Add,
    Admission,
    Remove,
    SessionEntry,
    SessionRecord,
    SetTarget,
    format_micro_time,
    heartbeat_body,
    heartbeat_expiries,
    heartbeat_name,
    plan_changes,
    record_body,
    record_name,
    shard_of,
)

TARGET = ResolvedTarget(
    namespace="demo",
    deployment="web",
    deployment_uid="d-1",
    pod="web-1",
    pod_uid="p-1",
    container="main",
)
REPLICAS = st.sampled_from(["a", "b", "c"])
KEYS = st.text("0123456789abcdef", min_size=1, max_size=3)
ENTRIES = st.builds(
    SessionEntry,
    REPLICAS,
    st.one_of(st.none(), st.just(TARGET)),
    st.one_of(st.none(), st.text("0123456789abcdef", min_size=16, max_size=16)),
    st.booleans(),
)
CHANGES = st.one_of(
    st.builds(Add, KEYS, ENTRIES, st.one_of(st.none(), st.integers(0, 4))),
    st.builds(SetTarget, KEYS, ENTRIES),
    st.builds(Remove, KEYS),
)


def stored(entries: dict[str, SessionEntry]) -> SessionRecord:
    body = record_body(SessionRecord.absent("demo", "uid"), entries)
    body["metadata"]["resourceVersion"] = "7"
    return SessionRecord.from_lease("demo", "uid", body)


def test_each_workspace_has_its_own_record_and_names_are_lease_names() -> None:
    assert record_name("demo", "one") != record_name("demo", "two")
    assert record_name("demo", "one") == record_name("demo", "one")
    # However the parts are split, two workspaces never share a record.
    assert record_name("a\0b", "c") != record_name("a", "b\0c")
    for replica in ("web-5f9c-abcde-1234", "UPPER/case:weird", "", "x" * 300):
        name = heartbeat_name(replica)
        assert len(name) <= 63
        assert name == name.lower()
        assert all(c.isalnum() or c == "-" for c in name)
    assert heartbeat_name("a/b") != heartbeat_name("a:b")


@given(st.dictionaries(KEYS, ENTRIES, max_size=8))
def test_entries_survive_the_stored_form(entries: dict[str, SessionEntry]) -> None:
    record = stored(entries)
    assert dict(record.entries) == entries
    assert record.version == "7"


@given(st.dictionaries(KEYS, ENTRIES, max_size=6), st.lists(CHANGES, max_size=12))
def test_a_batch_never_admits_beyond_a_limit_and_answers_every_add(
    entries: dict[str, SessionEntry], changes: list[Add | SetTarget | Remove]
) -> None:
    # Session keys are random: an add's key is new, and never added twice.
    added = [change.key for change in changes if isinstance(change, Add)]
    assume(len(set(added)) == len(added) and not set(added) & set(entries))
    record = stored(entries)
    plan = plan_changes(record, changes, alive=lambda replica: replica != "c")
    after = dict(record.entries) if plan.entries is None else dict(plan.entries)
    adds = [change for change in changes if isinstance(change, Add)]
    assert set(plan.admissions) == {change.key for change in adds}
    # Replayed one by one, each admitted add found fewer entries than its limit.
    current = dict(record.entries)
    for change in changes:
        if isinstance(change, Remove):
            current.pop(change.key, None)
        elif isinstance(change, SetTarget):
            if change.key in current:
                current[change.key] = change.entry
        elif plan.admissions[change.key] is Admission.ADMITTED:
            assert change.limit is None or len(current) < change.limit
            current[change.key] = change.entry
        else:
            assert change.limit is not None
            assert len(current) >= change.limit
    assert after == current
    # Nothing changed: no write.
    if plan.entries is None:
        assert after == dict(record.entries)


@given(st.dictionaries(KEYS, ENTRIES, max_size=6), st.lists(CHANGES, max_size=12))
def test_applying_a_batch_twice_changes_nothing_more_but_adds(
    entries: dict[str, SessionEntry], changes: list[Add | SetTarget | Remove]
) -> None:
    # After a 409 the batch is applied again to what was read: removes and re-targets are
    # idempotent, so the only difference a replay can make is in adds.
    added = [change.key for change in changes if isinstance(change, Add)]
    assume(len(set(added)) == len(added) and not set(added) & set(entries))
    assume(not {c.key for c in changes if not isinstance(c, Add)} & set(added))
    once = plan_changes(stored(entries), changes, alive=lambda replica: True)
    first = dict(stored(entries).entries if once.entries is None else once.entries)
    removes = [change for change in changes if isinstance(change, Remove)]
    assert plan_changes(stored(first), removes, alive=lambda replica: True).entries is None
    # The last re-target of each key still recorded, again: already there.
    last: dict[str, SetTarget] = {}
    for change in changes:
        if isinstance(change, SetTarget):
            last[change.key] = change
        elif change.key in last:
            del last[change.key]  # a later add or remove of that key decides
    again = [change for key, change in last.items() if key in first]
    assert plan_changes(stored(first), again, alive=lambda replica: True).entries is None


def test_a_refusal_is_doubtful_only_when_a_holder_may_be_dead() -> None:
    entries = {"k1": SessionEntry("a"), "k2": SessionEntry("c")}
    add = Add("new", SessionEntry("a"), 2)
    assert plan_changes(stored(entries), [add], alive=lambda r: True).doubtful is False
    doubtful = plan_changes(stored(entries), [add], alive=lambda r: r != "c")
    assert doubtful.admissions == {"new": Admission.REFUSED}
    assert doubtful.doubtful is True
    assert dict(stored(entries).orphans(lambda r: r != "c")) == {"k2": SessionEntry("c")}


def test_a_full_record_refuses_or_runs_unrecorded() -> None:
    big = {f"{i:04x}": SessionEntry("replica-" + "x" * 60, TARGET, "0" * 16) for i in range(1500)}
    while (
        len(
            record_body(SessionRecord.absent("d", "u"), big)["metadata"]["annotations"][
                SESSIONS_ANNOTATION
            ]
        )
        > MAX_RECORD_BYTES - 60
    ):
        big.popitem()
    record = stored(big)
    wide = SessionEntry("replica-" + "x" * 60, TARGET, "1" * 16)
    plan = plan_changes(
        record, [Add("n1", wide, None), Add("n2", wide, 5000)], alive=lambda r: True
    )
    assert plan.admissions == {"n1": Admission.UNRECORDED, "n2": Admission.REFUSED}
    assert plan.entries is None


def test_unreadable_records_are_refused_and_foreign_entries_skipped() -> None:
    body = record_body(SessionRecord.absent("demo", "uid"), {"k": SessionEntry("a")})
    with pytest.raises(ValueError, match="resourceVersion"):
        SessionRecord.from_lease("demo", "uid", body)
    body["metadata"]["resourceVersion"] = "1"
    body["metadata"]["annotations"][SESSIONS_ANNOTATION] = "not json"
    with pytest.raises(ValueError, match="not JSON"):
        SessionRecord.from_lease("demo", "uid", body)
    body["metadata"]["annotations"][SESSIONS_ANNOTATION] = json.dumps(
        {"ours": ["a", None, None, 0], "theirs": {"holder": "x"}, "bad": ["a", [1], None, 0]}
    )
    assert set(SessionRecord.from_lease("demo", "uid", body).entries) == {"ours"}
    with pytest.raises(ValueError, match="not a Lease"):
        SessionRecord.from_lease("demo", "uid", [])


def test_heartbeats_say_until_when_each_replica_lives() -> None:
    now = 1_700_000_000.0
    alive = heartbeat_body("web-1", 15, now)
    older = heartbeat_body("web-1", 15, now - 100)
    other = heartbeat_body("web-2", 10, now - 3)
    broken = {"spec": {"holderIdentity": "web-3", "renewTime": "yesterday"}}
    assert heartbeat_expiries([alive, older, other, broken, "junk"]) == {
        "web-1": pytest.approx(now + 15),
        "web-2": pytest.approx(now + 7),
    }
    assert alive["spec"]["renewTime"] == format_micro_time(now)
    assert alive["metadata"]["labels"]["kuber-exec.io/role"] == "replica"


@given(st.text("0123456789abcdef", min_size=16, max_size=16))
def test_a_limited_workspace_has_one_record_an_unlimited_one_many(key: str) -> None:
    assert shard_of(key, 3) == 0
    assert 0 <= shard_of(key, None) < RECORD_SHARDS
    assert record_name("demo", "uid", 0) == record_name("demo", "uid")
    names = {record_name("demo", "uid", shard) for shard in range(RECORD_SHARDS)}
    assert len(names) == RECORD_SHARDS
