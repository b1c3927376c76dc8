"""kubectl (1.30+, v5.channel.k8s.io over WebSocket) against the sandbox.

kubectl runs as a subprocess with the sandbox's kubeconfig and its own discovery cache directory.
Success cases also assert an empty stderr: no warning, no SPDY fallback noise. The one line
removed first is client-go's own race (1.30-1.32: its reader starts before its streams exist, and
it logs "Unknown stream id 1, discarding message" for the server's initial empty message); stdout
still proves that no data was lost.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import trio

from kuber_exec_sandbox import AccessRule, Cluster, PodSpec, Sandbox, serve_sandbox
from kuber_exec_sandbox._discovery import SERVED
from support.sandbox import ready_web_pod

pytestmark = pytest.mark.kubectl


_CLIENT_GO_STREAM_RACE = re.compile(rb"^.*Unknown stream id 1, discarding message\n", re.MULTILINE)


async def run_kubectl(
    kubectl: str, sandbox: Sandbox, cache: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        result = await trio.run_process(
            [
                kubectl,
                "--kubeconfig",
                str(sandbox.kubeconfig_path),
                "--cache-dir",
                str(cache),
                *args,
            ],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    result.stderr = _CLIENT_GO_STREAM_RACE.sub(b"", result.stderr)
    return result


@pytest.mark.trio
async def test_exec_pod_echo(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl, sandbox, tmp_path, "exec", pod, "--", "echo", "hello", "world"
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"hello world\n", b"")


@pytest.mark.trio
@pytest.mark.parametrize("code", [0, 1, 3, 42])
async def test_exec_exit_codes(kubectl: str, sandbox: Sandbox, tmp_path: Path, code: int) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl,
        sandbox,
        tmp_path,
        "exec",
        pod,
        "--",
        "sh",
        "-c",
        f"echo out; echo err >&2; exit {code}",
    )
    assert result.returncode == code
    assert result.stdout == b"out\n"
    expected_err = b"err\n" + (
        f"command terminated with exit code {code}\n".encode() if code else b""
    )
    assert result.stderr == expected_err


@pytest.mark.trio
async def test_exec_stdin_reaches_eof(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl,
        sandbox,
        tmp_path,
        "exec",
        "-i",
        pod,
        "--",
        "sh",
        "-c",
        "cat; echo END",
        stdin=b"data\n",
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"data\nEND\n", b"")


@pytest.mark.trio
async def test_exec_deployment_picks_the_ready_pod(
    kubectl: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    result = await run_kubectl(
        kubectl, sandbox, tmp_path, "exec", "deploy/web", "--", "sh", "-c", "echo $HOSTNAME"
    )
    assert result.stderr == b""
    assert result.stdout.decode().strip() == ready_web_pod(sandbox.cluster)


@pytest.mark.trio
async def test_exec_missing_container(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(kubectl, sandbox, tmp_path, "exec", pod, "-c", "nope", "--", "true")
    assert result.returncode == 1
    assert result.stderr == (
        f"Error from server (BadRequest): container nope is not valid for pod {pod}\n".encode()
    )


@pytest.mark.trio
async def test_exec_missing_pod(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    result = await run_kubectl(kubectl, sandbox, tmp_path, "exec", "no-such-pod", "--", "true")
    assert result.returncode == 1
    assert result.stderr == b'Error from server (NotFound): pods "no-such-pod" not found\n'


@pytest.mark.trio
async def test_exec_missing_executable(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(kubectl, sandbox, tmp_path, "exec", pod, "--", "no-such-program")
    assert result.returncode == 1
    assert b"Internal error occurred" in result.stderr
    assert b'"no-such-program": executable file not found' in result.stderr


@pytest.mark.trio
async def test_get_pods_lists_the_demo(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    result = await run_kubectl(kubectl, sandbox, tmp_path, "get", "pods", "-l", "app=web")
    assert result.returncode == 0
    assert result.stderr == b""
    lines = result.stdout.decode().splitlines()
    assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
    web = sandbox.cluster.deployment("demo", "web")
    assert web is not None
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(
        p.name for p in sandbox.cluster.pods_of(web)
    )


# -- every verb the docs show: discovery, auth, leases, logs, attach, cp, debug ----------------


@pytest.mark.trio
async def test_api_resources_lists_the_discovery_table(
    kubectl: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    result = await run_kubectl(kubectl, sandbox, tmp_path, "api-resources", "-o", "name")
    assert (result.returncode, result.stderr) == (0, b"")
    expected = {f"{r.name}.{r.group}" if r.group else r.name for r in SERVED}
    assert set(result.stdout.decode().split()) == expected


@pytest.mark.trio
async def test_get_leases_and_one_lease(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    empty = await run_kubectl(kubectl, sandbox, tmp_path, "get", "leases")
    assert (empty.returncode, empty.stdout) == (0, b"")
    assert empty.stderr == b"No resources found in demo namespace.\n"
    status, _ = sandbox.leases.create(
        "demo",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "acme-0"},
            "spec": {"holderIdentity": "replica-a"},
        },
    )
    assert status == 201
    listed = await run_kubectl(kubectl, sandbox, tmp_path, "get", "leases")
    assert (listed.returncode, listed.stderr) == (0, b"")
    assert [line.split()[0] for line in listed.stdout.decode().splitlines()] == ["NAME", "acme-0"]
    holder = await run_kubectl(
        kubectl,
        sandbox,
        tmp_path,
        "get",
        "lease",
        "acme-0",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    )
    assert (holder.returncode, holder.stdout, holder.stderr) == (0, b"replica-a", b"")


@pytest.mark.trio
@pytest.mark.parametrize(
    "question",
    [
        ["create", "pods", "--subresource", "exec"],
        ["create", "pods", "--subresource", "portforward"],
        ["get", "pods", "--subresource", "log"],
        ["get", "leases", "-n", "platform"],
        ["get", "/healthz"],
    ],
)
async def test_auth_can_i_says_yes_while_the_policy_is_off(
    kubectl: str, sandbox: Sandbox, tmp_path: Path, question: list[str]
) -> None:
    # kubectl POSTs the review as protobuf: the sandbox reads it (._protobuf).
    result = await run_kubectl(kubectl, sandbox, tmp_path, "auth", "can-i", *question)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"yes\n", b"")


@pytest.mark.trio
async def test_auth_can_i_follows_the_enforced_policy(
    kubectl: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.access.enforce(
        [
            AccessRule(verbs=("get", "create"), resource="pods", subresource="exec", user="ann"),
            AccessRule(verbs=("get",), resource="leases", namespace="platform", user="ann"),
        ],
        caller="ann",
    )
    answers = {}
    for question in (
        ["create", "pods", "--subresource=exec"],
        ["create", "pods", "--subresource=portforward"],
        # TYPE/NAME: pods named "exec", which the rule does not grant.
        ["create", "pods/exec"],
        ["get", "leases", "-n", "platform"],
        ["get", "leases", "-n", "demo"],
        ["get", "/healthz"],
    ):
        result = await run_kubectl(kubectl, sandbox, tmp_path, "auth", "can-i", *question)
        answers[" ".join(question)] = (result.returncode, result.stdout.decode().strip())
    assert answers == {
        "create pods --subresource=exec": (0, "yes"),
        "create pods --subresource=portforward": (1, "no"),
        "create pods/exec": (1, "no"),
        "get leases -n platform": (0, "yes"),
        "get leases -n demo": (1, "no"),
        "get /healthz": (1, "no"),
    }


@pytest.mark.trio
async def test_auth_can_i_list(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    everything = await run_kubectl(kubectl, sandbox, tmp_path, "auth", "can-i", "--list")
    assert (everything.returncode, everything.stderr) == (0, b"")
    assert everything.stdout.decode().split("\n")[1].split() == ["*.*", "[]", "[]", "[*]"]
    sandbox.access.enforce(
        [AccessRule(verbs=("get", "create"), resource="pods", subresource="exec", user="ann")],
        caller="ann",
    )
    narrow = await run_kubectl(kubectl, sandbox, tmp_path, "auth", "can-i", "--list")
    assert (narrow.returncode, narrow.stderr) == (0, b"")
    rows = [line.split() for line in narrow.stdout.decode().splitlines()[1:]]
    assert rows == [["pods/exec", "[]", "[]", "[get", "create]"]]


def logging_cluster() -> Cluster:
    cluster = Cluster()
    # The main process writes its log, then answers one line of stdin and ends (attach ends).
    lines = "echo one; echo two; echo three; read l; echo got-$l"
    cluster.add_deployment(
        "demo",
        "web",
        workspace_uid="u",
        pods=[PodSpec(name="web-1", command=("sh", "-c", lines), stdin=True)],
    )
    return cluster


@pytest.mark.trio
async def test_logs_follow_and_tail(kubectl: str, tmp_path: Path) -> None:
    async with serve_sandbox(logging_cluster()) as sandbox:
        # Following waits for the lines; --limit-bytes ends the stream while the process runs on.
        follow = await run_kubectl(
            kubectl, sandbox, tmp_path, "logs", "-f", "web-1", "--limit-bytes=14"
        )
        assert (follow.returncode, follow.stdout, follow.stderr) == (0, b"one\ntwo\nthree\n", b"")
        tail = await run_kubectl(kubectl, sandbox, tmp_path, "logs", "deploy/web", "--tail=2")
        assert (tail.returncode, tail.stdout, tail.stderr) == (0, b"two\nthree\n", b"")


@pytest.mark.trio
async def test_attach_sends_stdin_to_the_main_process(kubectl: str, tmp_path: Path) -> None:
    async with serve_sandbox(logging_cluster()) as sandbox:
        result = await run_kubectl(
            kubectl, sandbox, tmp_path, "attach", "-i", "web-1", stdin=b"hello\n"
        )
        assert result.returncode == 0
        assert b"got-hello\n" in result.stdout
        # The process's answer is in the container's log too.
        log = await run_kubectl(kubectl, sandbox, tmp_path, "logs", "web-1")
        assert log.stdout.endswith(b"got-hello\n")


@pytest.mark.trio
async def test_cp_into_and_out_of_a_pod(kubectl: str, sandbox: Sandbox, tmp_path: Path) -> None:
    pod = ready_web_pod(sandbox.cluster)
    source = tmp_path / "in.txt"
    source.write_bytes(b"through kubectl cp\n")
    # A relative path lands in the sandbox's scratch directory (its processes' cwd).
    into = await run_kubectl(kubectl, sandbox, tmp_path, "cp", str(source), f"{pod}:copied.txt")
    assert (into.returncode, into.stdout, into.stderr) == (0, b"", b"")
    back = tmp_path / "back.txt"
    out = await run_kubectl(kubectl, sandbox, tmp_path, "cp", f"{pod}:copied.txt", str(back))
    assert (out.returncode, out.stderr) == (0, b"")
    assert back.read_bytes() == b"through kubectl cp\n"


@pytest.mark.trio
async def test_debug_runs_an_ephemeral_container(
    kubectl: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    pod = ready_web_pod(sandbox.cluster)
    result = await run_kubectl(
        kubectl,
        sandbox,
        tmp_path,
        "debug",
        pod,
        "--image=busybox",
        "--profile=general",
        "--container=dbg",
        "-i",
        "--",
        "sh",
        "-c",
        "read l; echo debugged-$l",
        stdin=b"x\n",
    )
    assert result.returncode == 0, result.stderr
    assert b"debugged-x\n" in result.stdout
    served = sandbox.cluster.pod("demo", pod)
    assert served is not None
    assert served.ephemeral_container("dbg") is not None


@pytest.mark.trio
async def test_get_all_lists_pods_deployments_and_replicasets(
    kubectl: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    # "all" is the category discovery gives the workloads.
    result = await run_kubectl(kubectl, sandbox, tmp_path, "get", "all", "-o", "name")
    assert (result.returncode, result.stderr) == (0, b"")
    names = set(result.stdout.decode().split())
    assert {n.split("/")[0] for n in names} == {"pod", "deployment.apps", "replicaset.apps"}
    assert {"deployment.apps/web", "deployment.apps/other"} <= names
