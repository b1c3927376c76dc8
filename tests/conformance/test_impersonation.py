"""Execs on behalf of a user: impersonation headers on every request, the API server's checks,
the SelfSubjectAccessReview pre-flight, and the audit events naming the user."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Impersonation, Workspace
from kuber_exec_sandbox import AccessRule, Sandbox, demo_cluster, run_sandbox_in_thread
from support import backend_for

pytestmark = pytest.mark.anyio

SERVICE = "system:serviceaccount:platform:exec-service"
REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"),
    deployment="web",
    command=["sh", "-c", "echo hi"],
)
ALICE = Impersonation("alice", groups=("developers",), extras={"team": "blue"})
RULES = [
    AccessRule(verbs=("impersonate",), resource="users", user=SERVICE),
    AccessRule(verbs=("impersonate",), resource="groups", user=SERVICE),
    AccessRule(verbs=("impersonate",), resource="userextras", subresource="team", user=SERVICE),
    AccessRule(
        verbs=("get", "create"),
        resource="pods",
        subresource="exec",
        namespace="demo",
        user="alice",
    ),
    # Enough for a pre-1.35 server, not for the WebSocket exec of 1.35.
    AccessRule(verbs=("get",), resource="pods", subresource="exec", user="bob"),
]


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        running.access.enforce(RULES, caller=SERVICE)
        yield running


def as_user(identity: Impersonation | None) -> ExecRequest:
    return attrs.evolve(REQUEST, on_behalf_of=identity)


async def test_an_exec_on_behalf_of_a_user_runs_as_that_user(
    adapter: Any, sandbox: Sandbox
) -> None:
    events: list[Any] = []
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, audit=events.append)
        result = await service.execute(as_user(ALICE))
    assert result.stdout == b"hi\n"
    assert sandbox.access.exec_users == ["alice"]
    assert [(e.phase, e.user, e.groups) for e in events] == [
        ("started", "alice", ("developers",)),
        ("ended", "alice", ("developers",)),
    ]
    assert events[-1].to_dict()["user"] == "alice"


async def test_the_api_servers_denial_of_the_exec_is_its_403(
    adapter: Any, sandbox: Sandbox
) -> None:
    async with backend_for(adapter, sandbox) as backend:
        with pytest.raises(ExecError) as raised:
            await adapter.ExecService(backend).execute(as_user(Impersonation("bob")))
    assert raised.value.http_status == 403
    assert sandbox.access.exec_users == []


async def test_impersonation_without_the_permission_is_refused(
    adapter: Any, sandbox: Sandbox
) -> None:
    sandbox.access.enforce(RULES[3:], caller=SERVICE)  # no impersonate rules left
    events: list[Any] = []
    async with backend_for(adapter, sandbox) as backend:
        with pytest.raises(ExecError) as raised:
            await adapter.ExecService(backend, audit=events.append).execute(as_user(ALICE))
    # Refused at the first REST read: the Deployment lookup.
    assert raised.value.http_status == 403
    assert sandbox.access.exec_users == []
    assert [(e.phase, e.user) for e in events] == [("ended", "alice")]


async def test_preflight_names_user_verb_resource_and_namespace(
    adapter: Any, sandbox: Sandbox
) -> None:
    preflight = adapter.ExecPreflight()
    async with backend_for(adapter, sandbox, preflight=preflight) as backend:
        service = adapter.ExecService(backend)
        with pytest.raises(ExecError) as raised:
            await service.execute(as_user(Impersonation("bob")))
        assert raised.value.code is ExecErrorCode.TARGET_FORBIDDEN
        # bob may `get` (a pre-1.35 server's verb), not `create`: the second review says no.
        assert raised.value.message == (
            "user 'bob' may not create pods/exec in namespace 'demo' (checked with a "
            "SelfSubjectAccessReview for verb 'create' on resource 'pods/exec'; a WebSocket "
            "exec is authorized as 'get', and since Kubernetes 1.35 as 'create' too)"
        )
        # The service's own identity may not exec either (no rule for it): `get` is refused
        # first, as the API server's filter refuses it before the exec handler asks `create`.
        with pytest.raises(ExecError) as own:
            await service.execute(REQUEST)
        assert own.value.message.startswith("the service's own identity may not get")
        assert sandbox.access.exec_users == []  # no upgrade was attempted
        # Allowed: one review per verb for a burst of execs by the same user (cached).
        for _ in range(3):
            assert (await service.execute(as_user(ALICE))).exit_code == 0
    # bob: get + create; the service: get; alice: get + create.
    assert preflight.reviews == 5
    assert sandbox.access.exec_users == ["alice"] * 3


async def test_preflight_with_get_checks_what_older_servers_enforce(
    adapter: Any, sandbox: Sandbox
) -> None:
    preflight = adapter.ExecPreflight(verbs=("get",))
    async with backend_for(adapter, sandbox, preflight=preflight) as backend:
        with pytest.raises(ExecError) as raised:
            # The review passes; the server (1.35-like: create) still refuses the upgrade.
            await adapter.ExecService(backend).execute(as_user(Impersonation("bob")))
    assert raised.value.http_status == 403
    assert preflight.reviews == 1


async def test_preflight_cache_is_bounded_and_expires(adapter: Any, sandbox: Sandbox) -> None:
    preflight = adapter.ExecPreflight(ttl=0.001, max_entries=2)
    sandbox.access.enforce(
        [*RULES, AccessRule(verbs=("get", "create"), resource="pods", subresource="exec")],
        caller=SERVICE,
    )
    async with backend_for(adapter, sandbox, preflight=preflight) as backend:
        service = adapter.ExecService(backend)
        for user in ("u1", "u2", "u3"):
            await service.execute(as_user(Impersonation(user)))
        assert len(preflight) == 2
        await service.execute(as_user(Impersonation("u3")))
    # Two reviews (get, create) per user; u3 again after its answers' TTL passed: asked again.
    assert preflight.reviews == 8


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Impersonation("alice\r\nImpersonate-Group: system:masters"),
        lambda: Impersonation("alice", groups=("ok", "bad\n")),
        lambda: Impersonation("alice", extras={"Bad Key": "x"}),
        lambda: Impersonation(""),
        lambda: Impersonation("alice", groups="developers"),
    ],
)
def test_header_unsafe_values_are_refused(bad: Any) -> None:
    with pytest.raises(ExecError) as raised:
        bad()
    assert raised.value.code is ExecErrorCode.INVALID
    assert "system:masters" not in raised.value.message


async def test_on_behalf_of_must_be_an_impersonation(adapter: Any, sandbox: Sandbox) -> None:
    async with backend_for(adapter, sandbox) as backend:
        with pytest.raises(ExecError) as raised:
            await adapter.ExecService(backend).execute(as_user("alice"))  # type: ignore[arg-type]
    assert raised.value.code is ExecErrorCode.INVALID
    assert raised.value.message == "on_behalf_of must be an Impersonation or None, not str"
