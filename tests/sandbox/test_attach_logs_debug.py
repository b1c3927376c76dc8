"""pods/attach, pods/log and pods/ephemeralcontainers on the sandbox (docs/protocol.md s. 12)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio

from kuber_exec_core import Subprotocol
from kuber_exec_core.channels import Channel, decode_message, encode_message
from kuber_exec_sandbox import (
    AccessRule,
    Cluster,
    PodSpec,
    Sandbox,
    run_sandbox_in_thread,
    serve_sandbox,
)

from .wsclient import RawWebSocket, connect

V5 = Subprotocol.V5
POD = "/api/v1/namespaces/demo/pods/{}"
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}


def cluster_with(**spec: Any) -> Cluster:
    cluster = Cluster()
    cluster.add_deployment("demo", "web", workspace_uid="u", pods=[PodSpec(name="web-1", **spec)])
    return cluster


@pytest.fixture
def served() -> Iterator[tuple[Sandbox, httpx.Client]]:
    cluster = cluster_with(command=("sh", "-c", "echo one; echo two; echo three; exec sleep 600"))
    with run_sandbox_in_thread(cluster) as sandbox, httpx.Client(base_url=sandbox.url) as http:
        yield sandbox, http


def follow_until(http: httpx.Client, path: str, needle: bytes, **params: Any) -> bytes:
    """Follow a log until ``needle`` appears (the process keeps running), then hang up."""
    seen = b""
    with http.stream("GET", path, params={"follow": "true", **params}, timeout=20) as answer:
        assert answer.status_code == 200, answer.read()
        for chunk in answer.iter_bytes():
            seen += chunk
            if needle in seen:
                return seen
    raise AssertionError(f"the log ended without {needle!r}: {seen!r}")


def test_log_follow_tail_timestamps(served: tuple[Sandbox, httpx.Client]) -> None:
    _sandbox, http = served
    path = POD.format("web-1") + "/log"
    follow_until(http, path, b"three\n")
    assert http.get(path).content == b"one\ntwo\nthree\n"
    assert http.get(path, params={"tailLines": "2"}).content == b"two\nthree\n"
    assert http.get(path, params={"tailLines": "0"}).content == b""
    assert http.get(path, params={"limitBytes": "5"}).content == b"one\nt"
    stamped = http.get(path, params={"timestamps": "true"}).content.splitlines()
    assert [line.split(b" ", 1)[1] for line in stamped] == [b"one", b"two", b"three"]
    assert all(line[:4].isdigit() and line.split(b" ")[0].endswith(b"Z") for line in stamped)
    assert http.get(path, params={"sinceSeconds": "3600"}).content == b"one\ntwo\nthree\n"


def test_log_errors(served: tuple[Sandbox, httpx.Client]) -> None:
    _sandbox, http = served
    assert http.get(POD.format("nope") + "/log").status_code == 404
    wrong = http.get(POD.format("web-1") + "/log", params={"container": "x"})
    assert (wrong.status_code, wrong.json()["message"]) == (
        400,
        "container x is not valid for pod web-1",
    )
    previous = http.get(POD.format("web-1") + "/log", params={"previous": "true"})
    assert previous.status_code == 400
    assert "previous terminated container" in previous.json()["message"]
    assert http.get(POD.format("web-1") + "/log", params={"tailLines": "x"}).status_code == 400


def test_log_follow_ends_with_the_process() -> None:
    cluster = cluster_with(command=("sh", "-c", "echo done"))
    with run_sandbox_in_thread(cluster) as sandbox, httpx.Client(base_url=sandbox.url) as http:
        answer = http.get(POD.format("web-1") + "/log", params={"follow": "1"}, timeout=20)
        assert answer.content == b"done\n"
        pod = http.get(POD.format("web-1")).json()
        state = pod["status"]["containerStatuses"][0]["state"]
        assert state == {"terminated": {"exitCode": 0, "reason": "Completed"}}


def test_rbac_on_log_and_ephemeralcontainers(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    sandbox.access.enforce([AccessRule(verbs=("get",), resource="pods")])
    try:
        denied = http.get(POD.format("web-1") + "/log")
        assert denied.status_code == 403
        assert 'cannot get resource "pods/log"' in denied.json()["message"]
        patch = http.patch(
            POD.format("web-1") + "/ephemeralcontainers",
            content=json.dumps({"spec": {"ephemeralContainers": []}}),
            headers=STRATEGIC,
        )
        assert patch.status_code == 403
        assert 'cannot patch resource "pods/ephemeralcontainers"' in patch.json()["message"]
    finally:
        sandbox.access.reset()


def debug_container(name: str = "debugger", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "command": ["sh", "-c", "echo debug-$TOKEN; id -u >/dev/null"],
        "env": [{"name": "TOKEN", "value": "x1"}],
        "targetContainerName": "app",
        **extra,
    }


def add(http: httpx.Client, container: dict[str, Any], **headers: str) -> httpx.Response:
    return http.patch(
        POD.format("web-1") + "/ephemeralcontainers",
        content=json.dumps({"spec": {"ephemeralContainers": [container]}}),
        headers=headers or STRATEGIC,
    )


def watch_ephemeral(http: httpx.Client, name: str, done: Any) -> dict[str, Any]:
    """Watch the pod until ``done(state)`` holds for ephemeral container ``name``'s state."""
    with http.stream(
        "GET", "/api/v1/namespaces/demo/pods", params={"watch": "1"}, timeout=20
    ) as events:
        for line in events.iter_lines():
            pod = json.loads(line)["object"]
            for status in pod["status"].get("ephemeralContainerStatuses", []):
                if status["name"] == name and done(status["state"]):
                    return dict(status["state"])
    raise AssertionError("the watch ended")


def test_ephemeral_container_runs_and_ends(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    answer = add(http, debug_container(securityContext={"runAsUser": 1234}))
    assert answer.status_code == 200, answer.text
    assert answer.json()["spec"]["ephemeralContainers"][0]["name"] == "debugger"
    watch_ephemeral(http, "debugger", lambda state: "waiting" not in state)
    log = http.get(
        POD.format("web-1") + "/log", params={"container": "debugger", "follow": "1"}, timeout=20
    )
    assert log.content == b"debug-x1\n"
    status = http.get(POD.format("web-1")).json()["status"]["ephemeralContainerStatuses"][0]
    assert status["state"] == {"terminated": {"exitCode": 0, "reason": "Completed"}}
    pod = sandbox.cluster.pod("demo", "web-1")
    assert pod is not None
    assert pod.ephemeral[0].user == 1234
    assert pod.ephemeral[0].target == "app"


def test_ephemeral_json_patch_and_name_rules(served: tuple[Sandbox, httpx.Client]) -> None:
    _sandbox, http = served
    added = http.patch(
        POD.format("web-1") + "/ephemeralcontainers",
        content=json.dumps(
            [{"op": "add", "path": "/spec/ephemeralContainers/-", "value": debug_container("d1")}]
        ),
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert added.status_code == 200, added.text
    duplicate = add(http, {**debug_container("d1"), "image": "busybox:1.36"})
    assert duplicate.status_code == 422
    assert "may not be changed" in duplicate.json()["message"]
    clash = add(http, debug_container("app"))
    assert clash.status_code == 422
    assert 'spec.ephemeralContainers[1].name: Duplicate value: "app"' in clash.json()["message"]
    no_target = add(http, debug_container("d2", targetContainerName="ghost"))
    assert 'targetContainerName: Not found: "ghost"' in no_target.json()["message"]
    removed = http.patch(
        POD.format("web-1") + "/ephemeralcontainers",
        content=json.dumps({"spec": {"ephemeralContainers": []}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert removed.status_code == 422
    assert "may not be removed" in removed.json()["message"]
    unknown = http.patch(
        POD.format("web-1") + "/ephemeralcontainers",
        content=b"{}",
        headers={"Content-Type": "text/plain"},
    )
    assert unknown.status_code == 415


def test_missing_image_waits_with_its_reason(served: tuple[Sandbox, httpx.Client]) -> None:
    _sandbox, http = served
    add(http, debug_container("never", image="example.invalid/tool", imagePullPolicy="Never"))
    state = watch_ephemeral(
        http, "never", lambda state: state.get("waiting", {}).get("reason") != "ContainerCreating"
    )
    assert state["waiting"]["reason"] == "ErrImageNeverPull"
    assert "is not present with pull policy of Never" in state["waiting"]["message"]
    log = http.get(POD.format("web-1") + "/log", params={"container": "never"})
    assert log.status_code == 400
    assert "is waiting to start: ErrImageNeverPull" in log.json()["message"]


def test_pod_security_admission_and_feature_off(served: tuple[Sandbox, httpx.Client]) -> None:
    sandbox, http = served
    sandbox.cluster.pod_security["demo"] = "baseline"
    privileged = add(http, debug_container("p", securityContext={"privileged": True}))
    assert privileged.status_code == 403
    assert privileged.json()["message"].startswith(
        'pods "web-1" is forbidden: violates PodSecurity "baseline:latest": privileged'
    )
    sandbox.cluster.pod_security.clear()
    sandbox.cluster.admission = lambda pod, container: "no debugging here"
    refused = add(http, debug_container("a"))
    assert refused.status_code == 403
    assert refused.json()["message"].endswith("denied the request: no debugging here")
    sandbox.cluster.admission = None
    sandbox.cluster.ephemeral_containers = False
    off = add(http, debug_container("o"))
    # The real server's answer when the feature is off: a 404 without details.
    assert (off.status_code, off.json().get("details")) == (404, None)
    assert off.json()["message"] == "the server could not find the requested resource"


async def attach(sandbox: Sandbox, container: str, **flags: str) -> RawWebSocket:
    query = "&".join(f"{k}={v}" for k, v in {"container": container, **flags}.items())
    socket = await connect(sandbox, POD.format("web-1") + f"/attach?{query}", [V5.value])
    assert isinstance(socket, RawWebSocket), socket
    return socket


@pytest.mark.trio
async def test_attach_to_the_main_process_and_leave_it_running() -> None:
    cluster = cluster_with(command=("sh", "-c", "while read l; do echo got-$l; done"), stdin=True)
    async with serve_sandbox(cluster) as sandbox:
        socket = await attach(sandbox, "app", stdin="true", stdout="true", stderr="true")
        assert decode_message(V5, await socket.receive()) == (Channel.STDOUT, b"")  # type: ignore[arg-type]
        await socket.send(encode_message(V5, Channel.STDIN, b"a\n"))
        assert decode_message(V5, await socket.receive()) == (Channel.STDOUT, b"got-a\n")  # type: ignore[arg-type]
        await socket.close()
        _messages, closed = await socket.receive_all()
        assert closed.code == 1000
        await socket.vanish()
        # Detached: the process runs on, and a second attach reaches it.
        again = await attach(sandbox, "app", stdin="true", stdout="true")
        await again.receive()
        await again.send(encode_message(V5, Channel.STDIN, b"b\n"))
        assert decode_message(V5, await again.receive()) == (Channel.STDOUT, b"got-b\n")  # type: ignore[arg-type]
        await again.vanish()
        pod = cluster.pod("demo", "web-1")
        assert pod is not None
        assert pod.containers[0].running


@pytest.mark.trio
async def test_attach_refuses_stdin_the_container_was_not_created_with() -> None:
    cluster = cluster_with(command=("sleep", "600"))
    async with serve_sandbox(cluster) as sandbox:
        socket = await attach(sandbox, "app", stdin="true", stdout="true")
        messages, _closed = await socket.receive_all()
        status = decode_message(V5, messages[-1])
        assert status is not None
        assert status[0] == Channel.ERROR
        assert "app in pod web-1 was not created with stdin" in json.loads(status[1])["message"]
        await socket.vanish()


@pytest.mark.trio
async def test_attach_ends_with_success_when_the_process_ends() -> None:
    cluster = cluster_with(command=("sh", "-c", "read l; echo bye; exit 3"), stdin=True)
    async with serve_sandbox(cluster) as sandbox:
        socket = await attach(sandbox, "app", stdin="true", stdout="true")
        await socket.receive()
        await socket.send(encode_message(V5, Channel.STDIN, b"\n"))
        messages, closed = await socket.receive_all()
        items = [decode_message(V5, m) for m in messages]
        assert (Channel.STDOUT, b"bye\n") in items
        assert items[-1] is not None
        assert json.loads(items[-1][1])["status"] == "Success"
        assert closed.code == 1000
        await socket.vanish()
        with trio.fail_after(10):
            await sandbox.wait_processes_reaped()
