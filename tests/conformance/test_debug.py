"""Attach, logs and ephemeral debug containers end to end, on both runtimes (docs/debug.md)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import anyio
import pytest

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    Resize,
    Stdin,
    Stdout,
    Workspace,
)
from kuber_exec_core.debug import (
    ContainerRequest,
    DebugContainer,
    DebugPolicy,
    DebugProfile,
    EphemeralStatus,
    LogOptions,
)
from kuber_exec_sandbox import AccessRule, Cluster, PodSpec, Sandbox, run_sandbox_in_thread
from support import DEMO, backend_for

pytestmark = pytest.mark.anyio

OTHER = Workspace(project="demo", uid="other-uid")


def debug_cluster() -> Cluster:
    cluster = Cluster()

    def add(name: str, workspace: str = "demo-uid", **spec: Any) -> None:
        cluster.add_deployment(
            "demo", name, workspace_uid=workspace, pods=[PodSpec(name=f"{name}-1", **spec)]
        )

    add("echo", command=("sh", "-c", "while read l; do echo got-$l; done"), stdin=True)
    add("term", command=("sh",), stdin=True, tty=True)
    add("plain", command=("sh", "-c", "echo hello; echo world; exec sleep 600"))
    # An image without a shell whose main process is not one (a distroless service).
    add("distroless", command=("sleep", "600"), shell=False)
    add("foreign", workspace="other-uid", command=("sleep", "600"))
    return cluster


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(debug_cluster()) as running:
        yield running


def target(deployment: str, workspace: Workspace = DEMO, **more: Any) -> ContainerRequest:
    return ContainerRequest(workspace=workspace, deployment=deployment, **more)


async def read_until(session: Any, needle: bytes, *, within: float = 20) -> bytes:
    seen = b""
    with anyio.fail_after(within):
        async for frame in session:
            if isinstance(frame, Stdout):
                seen += frame.data
                if needle in seen:
                    return seen
    raise AssertionError(f"the session ended before {needle!r}: {seen!r}")


@pytest.fixture
async def service(adapter: ModuleType, sandbox: Sandbox) -> Any:
    async with backend_for(adapter, sandbox) as backend:
        yield adapter.ExecService(backend)


async def test_attach_with_pipes_and_detach_leaves_it_running(
    adapter: ModuleType, service: Any, sandbox: Sandbox
) -> None:
    async with adapter.open_attach(service, target("echo"), stdin=True) as session:
        assert session.target.pod == "echo-1"
        await session.send(Stdin(b"one\n"))
        assert b"got-one\n" in await read_until(session, b"got-one\n")
    # Detached: the main process runs on, and answers the next attach.
    pod = sandbox.cluster.pod("demo", "echo-1")
    assert pod is not None
    assert pod.containers[0].running
    async with adapter.open_attach(service, target("echo")) as again:
        await again.send(Stdin(b"two\n"))
        assert b"got-two\n" in await read_until(again, b"got-two\n")


async def test_attach_follows_the_container_tty_and_resizes(
    adapter: ModuleType, service: Any
) -> None:
    async with adapter.open_attach(service, target("term")) as session:
        await session.send(Resize(123, 45))
        await session.send(Stdin(b"stty size\n"))
        assert b"45 123" in await read_until(session, b"45 123")


async def test_attach_refuses_stdin_or_tty_the_container_lacks(
    adapter: ModuleType, service: Any
) -> None:
    with pytest.raises(ExecError) as no_stdin:
        async with adapter.open_attach(service, target("plain")):
            pass
    assert no_stdin.value.code is ExecErrorCode.INVALID
    assert "container app of pod demo/plain-1 was not created with stdin" in no_stdin.value.message
    with pytest.raises(ExecError) as no_tty:
        async with adapter.open_attach(service, target("echo"), tty=True):
            pass
    assert "was not created with a TTY" in no_tty.value.message


async def test_attach_and_logs_check_ownership(adapter: ModuleType, service: Any) -> None:
    with pytest.raises(ExecError) as attach:
        async with adapter.open_attach(service, target("foreign"), stdin=False):
            pass
    assert attach.value.code is ExecErrorCode.TARGET_FORBIDDEN
    with pytest.raises(ExecError) as logs:
        async with adapter.stream_logs(service, target("foreign")):
            pass
    assert logs.value.code is ExecErrorCode.TARGET_FORBIDDEN


async def test_logs_are_audited(adapter: ModuleType, service: Any) -> None:
    events: list[Any] = []
    service.audit = events.append
    async with adapter.stream_logs(service, target("plain"), LogOptions(tail_lines=1)) as log:
        assert await log.read_all() == b"world\n"
    assert [(e.kind, e.phase, e.outcome) for e in events] == [
        ("logs", "started", None),
        ("logs", "ended", "exit"),
    ]
    assert (events[1].pod, events[1].command, events[1].bytes_out) == ("plain-1", ("logs",), 6)


async def test_logs_follow_tail_and_timestamps(adapter: ModuleType, service: Any) -> None:
    seen = b""
    async with adapter.stream_logs(service, target("plain"), LogOptions(follow=True)) as log:
        with anyio.fail_after(20):
            async for chunk in log:
                seen += chunk
                if b"world\n" in seen:
                    break  # leaving the block stops following (the process runs on)
    assert seen == b"hello\nworld\n"
    async with adapter.stream_logs(service, target("plain"), LogOptions(tail_lines=1)) as log:
        assert await log.read_all() == b"world\n"
    async with adapter.stream_logs(
        service, target("plain"), LogOptions(timestamps=True, since_seconds=3600)
    ) as log:
        lines = (await log.read_all()).splitlines()
    assert [line.split(b" ", 1)[1] for line in lines] == [b"hello", b"world"]


async def test_log_errors_are_clear(adapter: ModuleType, service: Any) -> None:
    with pytest.raises(ExecError) as bad:
        LogOptions(tail_lines=-1)
    assert bad.value.code is ExecErrorCode.INVALID
    with pytest.raises(ExecError) as previous:
        async with adapter.stream_logs(service, target("plain"), LogOptions(previous=True)):
            pass
    assert previous.value.code is ExecErrorCode.FAILED
    assert 'previous terminated container "app" in pod "plain-1" not found' in (
        previous.value.message
    )
    with pytest.raises(ExecError) as wrong:
        async with adapter.stream_logs(service, target("plain", container="nope")):
            pass
    assert wrong.value.code is ExecErrorCode.TARGET_NOT_FOUND


async def test_a_shell_in_a_debug_container_of_a_shellless_pod(
    adapter: ModuleType, service: Any, sandbox: Sandbox
) -> None:
    # The pod's image has no shell: exec cannot help.
    events: list[Any] = []
    service.audit = events.append
    seen: list[EphemeralStatus] = []
    spec = DebugContainer(image="busybox", command=["sh"], env={"PROBE": "p1"})
    async with adapter.open_debug(
        service, target("distroless"), spec, on_status=seen.append
    ) as debugging:
        assert debugging.session is not None
        assert debugging.name.startswith("debugger-")
        await debugging.session.send(Stdin(b"echo in-debug-$PROBE-$((1+1)); exit 7\n"))
        assert b"in-debug-p1-2" in await read_until(debugging.session, b"in-debug-p1-2")
    assert seen[-1].state == "running"
    pod = sandbox.cluster.pod("demo", "distroless-1")
    assert pod is not None
    added = pod.ephemeral_container(debugging.name)
    assert added is not None
    assert (added.target, added.image, added.user) == ("app", "busybox", 0)
    assert added.spec["securityContext"] == {"capabilities": {"add": ["SYS_PTRACE"]}}
    assert [(e.kind, e.phase) for e in events] == [("debug", "started"), ("debug", "ended")]
    assert events[0].image == "busybox"
    assert events[0].debug_container == debugging.name
    assert events[0].pod == "distroless-1"
    assert events[0].to_dict()["image"] == "busybox"


async def test_debug_policy_refusals_name_the_rule(adapter: ModuleType, sandbox: Sandbox) -> None:
    cases = [
        (DebugPolicy(enabled=False), DebugContainer(image="busybox"), "DebugPolicy.enabled"),
        (
            DebugPolicy(allowed_images=["registry.local/*"]),
            DebugContainer(image="busybox"),
            "DebugPolicy.allowed_images",
        ),
        (
            DebugPolicy(),
            DebugContainer(image="busybox", profile="sysadmin"),
            "DebugPolicy.allowed_profiles",
        ),
    ]
    pod = sandbox.cluster.pod("demo", "distroless-1")
    assert pod is not None
    before = len(pod.ephemeral)
    async with backend_for(adapter, sandbox) as backend:
        for policy, spec, rule in cases:
            events: list[Any] = []
            service = adapter.ExecService(backend, debug_policy=policy, audit=events.append)
            with pytest.raises(ExecError) as refused:
                async with adapter.open_debug(service, target("distroless"), spec):
                    pass
            assert refused.value.code is ExecErrorCode.TARGET_FORBIDDEN
            assert rule in refused.value.message
            assert events[-1].error_code is ExecErrorCode.TARGET_FORBIDDEN
    # Refused before anything was sent: no container was added.
    assert len(pod.ephemeral) == before


async def test_debug_reports_why_a_container_cannot_start(
    adapter: ModuleType, service: Any
) -> None:
    seen: list[EphemeralStatus] = []
    missing = DebugContainer(image="example.invalid/tools:1", image_pull_policy="Never")
    with pytest.raises(ExecError) as never:
        async with adapter.open_debug(
            service, target("distroless"), missing, on_status=seen.append
        ):
            pass
    assert never.value.code is ExecErrorCode.FAILED
    assert "ErrImageNeverPull" in never.value.message
    assert "cannot be removed" in never.value.message
    assert seen[-1].reason == "ErrImageNeverPull"
    # kubectl's restricted profile asks for a non-root user; busybox runs as root.
    restricted = DebugContainer(image="busybox", profile=DebugProfile.RESTRICTED)
    with pytest.raises(ExecError) as root:
        async with adapter.open_debug(service, target("distroless"), restricted):
            pass
    assert "CreateContainerConfigError" in root.value.message


async def test_debug_errors_name_collision_admission_feature_off_rbac(
    adapter: ModuleType, service: Any, sandbox: Sandbox
) -> None:
    with pytest.raises(ExecError) as collision:
        async with adapter.open_debug(
            service, target("distroless"), DebugContainer(image="busybox", name="app")
        ):
            pass
    assert collision.value.code is ExecErrorCode.INVALID
    assert "already has a container named app" in collision.value.message
    sandbox.cluster.pod_security["demo"] = "baseline"
    try:
        with pytest.raises(ExecError) as admission:
            async with adapter.open_debug(
                service, target("distroless"), DebugContainer(image="busybox", profile="netadmin")
            ):
                pass
    finally:
        sandbox.cluster.pod_security.clear()
    assert admission.value.code is ExecErrorCode.TARGET_FORBIDDEN
    assert 'violates PodSecurity "baseline:latest": non-default capabilities' in (
        admission.value.message
    )
    sandbox.cluster.ephemeral_containers = False
    try:
        with pytest.raises(ExecError) as off:
            async with adapter.open_debug(
                service, target("distroless"), DebugContainer(image="busybox")
            ):
                pass
    finally:
        sandbox.cluster.ephemeral_containers = True
    assert off.value.code is ExecErrorCode.FAILED
    assert "this cluster (Kubernetes 1.32) does not serve ephemeral containers" in (
        off.value.message
    )
    sandbox.access.enforce(
        [
            AccessRule(verbs=("get", "list", "watch"), resource="*"),
            AccessRule(verbs=("get",), resource="pods", subresource="ephemeralcontainers"),
        ]
    )
    try:
        with pytest.raises(ExecError) as rbac:
            async with adapter.open_debug(
                service, target("distroless"), DebugContainer(image="busybox")
            ):
                pass
    finally:
        sandbox.access.reset()
    assert rbac.value.code is ExecErrorCode.TARGET_FORBIDDEN
    assert "needs the 'patch' verb on 'pods/ephemeralcontainers'" in rbac.value.message


async def test_debug_arguments_are_checked() -> None:
    for bad in (
        {"image": ""},
        {"image": "busybox", "profile": "root"},
        {"image": "busybox", "name": "Not_A_Label"},
        {"image": "busybox", "env": {"1x": "v"}},
        {"image": "busybox", "command": "sh"},
    ):
        with pytest.raises(ExecError) as raised:
            DebugContainer(**bad)
        assert raised.value.code is ExecErrorCode.INVALID


async def test_a_refusal_fault_reaches_the_caller_with_its_message(
    adapter: ModuleType, service: Any, sandbox: Sandbox
) -> None:
    sandbox.cluster.faults.refuse_ephemeral(pod="distroless-1")
    try:
        with pytest.raises(ExecError) as refused:
            async with adapter.open_debug(
                service, target("distroless"), DebugContainer(image="busybox")
            ):
                pass
    finally:
        sandbox.cluster.faults.clear()
    assert refused.value.code is ExecErrorCode.TARGET_FORBIDDEN
    assert refused.value.message.startswith(
        "the cluster's admission refused the debug container in pod demo/distroless-1: "
        'admission webhook "sandbox.kuber-exec.dev" denied the request'
    )
    assert sandbox.cluster.faults.refused_ephemeral >= 1
