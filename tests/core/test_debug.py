"""kuber_exec_core.debug: paths, options, profiles, policy, statuses and PATCH errors (pure)."""

from __future__ import annotations

import json
import os
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode, ExecStreams, ResolvedTarget
from kuber_exec_core.debug import (
    DebugContainer,
    DebugPolicy,
    DebugProfile,
    EphemeralStatus,
    LogOptions,
    attach_path,
    container_spec,
    ephemeral_status,
    generated_name,
    json_patch,
    log_path,
    patch_error,
    pod_watch_path,
    strategic_patch,
)

TARGET = ResolvedTarget(
    namespace="ns", deployment="web", deployment_uid="d", pod="web-1", pod_uid="p", container="app"
)


def test_attach_path_is_exec_without_a_command() -> None:
    path = attach_path(TARGET, ExecStreams(stdin=True, stdout=True, stderr=True, tty=True))
    assert (
        path
        == "/api/v1/namespaces/ns/pods/web-1/attach?container=app&stdin=true&stdout=true&tty=true"
    )


@given(st.text(min_size=1, max_size=40), st.integers(0, 10**6))
def test_log_path_values_never_add_parameters(container: str, tail: int) -> None:
    path = log_path("ns", "web-1", container, LogOptions(tail_lines=tail, follow=True))
    parts = urlsplit(path)
    assert parts.path == "/api/v1/namespaces/ns/pods/web-1/log"
    assert parse_qsl(parts.query) == [
        ("container", container),
        ("follow", "true"),
        ("tailLines", str(tail)),
    ]


@given(st.text(min_size=1, max_size=40))
def test_the_watch_names_one_pod(pod: str) -> None:
    query = dict(parse_qsl(urlsplit(pod_watch_path("ns", "p", "12")).query))
    assert query["fieldSelector"] == "metadata.name=p"
    assert query["resourceVersion"] == "12"
    query = dict(parse_qsl(urlsplit(pod_watch_path("ns", pod, "1")).query))
    assert query["fieldSelector"] == f"metadata.name={pod}"


@pytest.mark.parametrize(
    "options",
    [
        {"tail_lines": -1},
        {"since_seconds": 0},
        {"limit_bytes": 0},
        {"follow": "yes"},
        {"tail_lines": True},
    ],
)
def test_bad_log_options_are_invalid(options: dict[str, object]) -> None:
    with pytest.raises(ExecError) as raised:
        LogOptions(**options)  # type: ignore[arg-type]
    assert raised.value.code is ExecErrorCode.INVALID


def test_profiles_match_kubectl() -> None:
    assert DebugProfile.GENERAL.security_context() == {"capabilities": {"add": ["SYS_PTRACE"]}}
    assert DebugProfile.BASELINE.security_context() is None
    assert DebugProfile.SYSADMIN.security_context() == {"privileged": True}
    assert DebugProfile.NETADMIN.security_context() == {
        "capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}
    }
    restricted = DebugProfile.RESTRICTED.security_context()
    assert restricted is not None
    assert restricted["runAsNonRoot"] is True
    assert restricted["capabilities"] == {"drop": ["ALL"]}


def test_the_container_and_its_patches() -> None:
    debug = DebugContainer(image="busybox", command=["sh"], env={"A": "1"}, profile="baseline")
    spec = container_spec(debug, name="debugger-abcde", target_container="app")
    assert spec == {
        "name": "debugger-abcde",
        "image": "busybox",
        "command": ["sh"],
        "env": [{"name": "A", "value": "1"}],
        "targetContainerName": "app",
        "stdin": True,
        "tty": True,
        "terminationMessagePolicy": "File",
    }
    assert json.loads(strategic_patch(spec)) == {"spec": {"ephemeralContainers": [spec]}}
    assert json.loads(json_patch(spec)) == [
        {"op": "add", "path": "/spec/ephemeralContainers/-", "value": spec}
    ]


def test_generated_names_are_kubectl_shaped() -> None:
    names = {generated_name(os.urandom(5)) for _ in range(50)}
    assert len(names) > 40  # random
    for name in names:
        assert name.startswith("debugger-")
        assert len(name) == 14
        DebugContainer(image="busybox", name=name)  # a valid name


def test_policy_rules_are_named() -> None:
    busybox = DebugContainer(image="busybox:1.36")
    DebugPolicy(allowed_images=["busybox:*"]).check(busybox)
    for policy, rule in (
        (DebugPolicy(enabled=False), "DebugPolicy.enabled"),
        (DebugPolicy(allowed_images=[]), "DebugPolicy.allowed_images: none"),
        (DebugPolicy(allowed_profiles=["baseline"]), "DebugPolicy.allowed_profiles: baseline"),
    ):
        with pytest.raises(ExecError) as raised:
            policy.check(busybox)
        assert raised.value.code is ExecErrorCode.TARGET_FORBIDDEN
        assert rule in raised.value.message
    with pytest.raises(ExecError):
        DebugPolicy(allowed_profiles=["root"])


def test_status_reads_each_state() -> None:
    def pod(state: dict[str, object]) -> dict[str, object]:
        return {"status": {"ephemeralContainerStatuses": [{"name": "d", "state": state}]}}

    assert ephemeral_status({}, "d") == EphemeralStatus("unknown")
    waiting = ephemeral_status(pod({"waiting": {"reason": "ErrImagePull", "message": "no"}}), "d")
    assert waiting == EphemeralStatus("waiting", "ErrImagePull", "no")
    assert waiting.describe() == "waiting: ErrImagePull: no"
    ended = ephemeral_status(pod({"terminated": {"exitCode": 3, "reason": "Error"}}), "d")
    assert ended.describe() == "terminated: Error (exit code 3)"
    assert ephemeral_status(pod({"running": {}}), "other") == EphemeralStatus("unknown")


def status(code: int, reason: str, message: str, details: object = None) -> bytes:
    body: dict[str, object] = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if details is not None:
        body["details"] = details
    return json.dumps(body).encode()


def test_patch_errors_say_what_happened() -> None:
    off = patch_error(
        404,
        status(404, "NotFound", "the server could not find the requested resource"),
        namespace="ns",
        pod="p",
        server_version="1.20",
    )
    assert off.code is ExecErrorCode.FAILED
    assert "this cluster (Kubernetes 1.20) does not serve ephemeral containers" in off.message
    gone = patch_error(
        404,
        status(404, "NotFound", 'pods "p" not found', {"name": "p", "kind": "pods"}),
        namespace="ns",
        pod="p",
        server_version=None,
    )
    assert gone.code is ExecErrorCode.TARGET_NOT_FOUND
    rbac = patch_error(
        403,
        status(403, "Forbidden", 'User "x" cannot patch resource "pods/ephemeralcontainers"'),
        namespace="ns",
        pod="p",
        server_version=None,
    )
    assert "needs the 'patch' verb" in rbac.message
    duplicate = patch_error(
        422,
        status(422, "Invalid", 'Duplicate value: "d"'),
        namespace="ns",
        pod="p",
        server_version=None,
    )
    assert duplicate.code is ExecErrorCode.INVALID
    broken = patch_error(500, b"<html>", namespace="ns", pod="p", server_version=None)
    assert "HTTP 500" in broken.message
