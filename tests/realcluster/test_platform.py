"""Replicas and users against the real apiserver: Lease slots across three service processes,
a killed replica's slots, impersonation in the apiserver's audit log, the access-review
pre-flight, an exec plugin's 401 refreshed, and what the Lease mode costs per session."""

from __future__ import annotations

import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from conformance.proxy import FreezingProxy

from .kube import KUBECTL, WS_MAIN, Cluster, kubectl, poll

pytestmark = pytest.mark.anyio

EXECUTOR = "system:serviceaccount:kx-target:executor"
SLOTS_NS = "kx-slots"
REPLICA = Path(__file__).with_name("slot_replica.py")
ROOT = Path(__file__).parents[2]


def _rbac() -> list[dict[str, Any]]:
    def binding(
        kind: str, name: str, ns: str | None, role_kind: str, role: str, subject: dict[str, str]
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if ns:
            metadata["namespace"] = ns
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [subject],
        }

    executor = {"kind": "ServiceAccount", "name": "executor", "namespace": "kx-target"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SLOTS_NS}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "kx-impersonator"},
            "rules": [
                {"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]}
            ],
        },
        binding(
            "ClusterRoleBinding",
            "kx-impersonator",
            None,
            "ClusterRole",
            "kx-impersonator",
            executor,
        ),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "slots", "namespace": SLOTS_NS},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["create", "get", "update", "delete", "list"],
                }
            ],
        },
        binding("RoleBinding", "slots-executor", SLOTS_NS, "Role", "slots", executor),
        binding(
            "RoleBinding",
            "exec-alice",
            "kx-target",
            "Role",
            "exec",
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
        ),
        binding(
            "RoleBinding",
            "read-bob",
            "kx-target",
            "Role",
            "read",
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"},
        ),
    ]


@pytest.fixture(scope="module")
def platform(cluster: Cluster, workloads: Any) -> Cluster:
    """The tier's cluster with the platform's RBAC: the executor may impersonate and hold
    Leases in kx-slots; alice may exec in kx-target, bob only read."""
    manifest = {"apiVersion": "v1", "kind": "List", "items": _rbac()}
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifest).encode())
    return cluster


def request(adapter: ModuleType, script: str, user: str | None = None) -> Any:
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=["sh", "-c", script],
        on_behalf_of=None if user is None else adapter.Impersonation(user),
    )


def audit_events(cluster: Cluster) -> list[dict[str, Any]]:
    path = Path(cluster.info["audit_log"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_an_impersonated_exec_is_audited_as_the_user(
    adapter: ModuleType, platform: Cluster
) -> None:
    marker = uuid.uuid4().hex
    events: list[Any] = []
    backend = adapter.KubernetesBackend.from_kubeconfig(platform.kubeconfig("executor"))
    async with backend:
        service = adapter.ExecService(backend, audit=events.append)
        result = await service.execute(request(adapter, f"echo {marker}", "alice"))
    assert result.stdout == f"{marker}\n".encode()
    assert {(e.phase, e.user) for e in events} == {("started", "alice"), ("ended", "alice")}

    def exec_audited() -> bool:
        return any(
            e.get("objectRef", {}).get("subresource") == "exec"
            and e.get("impersonatedUser", {}).get("username") == "alice"
            and e.get("user", {}).get("username") == EXECUTOR
            and marker in e.get("requestURI", "")
            for e in audit_events(platform)
        )

    poll(exec_audited, timeout=20, what="the apiserver's audit event naming alice")


async def test_impersonation_needs_the_permission(
    adapter: ModuleType, platform: Cluster, server_minor: int
) -> None:
    backend = adapter.KubernetesBackend.from_kubeconfig(platform.kubeconfig("reader"))
    async with backend:
        with pytest.raises(adapter.ExecError) as raised:
            await adapter.ExecService(backend).execute(request(adapter, "true", "alice"))
    assert raised.value.http_status == 403
    if server_minor >= 36:
        # Constrained impersonation (KEP-5284, beta and on since 1.36) asks its own verbs
        # first and names the first one denied: `impersonate-on:user-info:<verb>` on the read.
        assert 'cannot impersonate-on:user-info:get resource "deployments"' in (
            raised.value.message
        )
    else:
        assert 'cannot impersonate resource "users"' in raised.value.message


async def test_the_preflight_refuses_a_user_without_pods_exec(
    adapter: ModuleType, platform: Cluster
) -> None:
    preflight = adapter.ExecPreflight()
    backend = adapter.KubernetesBackend.from_kubeconfig(
        platform.kubeconfig("executor"), preflight=preflight
    )
    async with backend:
        service = adapter.ExecService(backend)
        with pytest.raises(adapter.ExecError) as raised:
            await service.execute(request(adapter, "true", "bob"))
        assert (await service.execute(request(adapter, "echo ok", "alice"))).stdout == b"ok\n"
    assert raised.value.code is adapter.ExecErrorCode.TARGET_FORBIDDEN
    # bob may only read: `get` (the upgrade's first check) is the verb refused.
    assert raised.value.message.startswith(
        "user 'bob' may not get pods/exec in namespace 'kx-target' (checked with a "
        "SelfSubjectAccessReview for verb 'get'"
    )
    # bob: get (denied, so create is not asked); alice: get and create.
    assert preflight.reviews == 3


PLUGIN = textwrap.dedent(
    """
    import json, pathlib, sys
    token_file, runs = map(pathlib.Path, sys.argv[1:3])
    with runs.open("a") as out:
        out.write("run\\n")
    print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                      "kind": "ExecCredential",
                      "status": {"token": token_file.read_text().strip()}}))
    """
)


async def test_an_exec_plugins_stale_token_is_refreshed_once(
    adapter: ModuleType, platform: Cluster, tmp_path: Path
) -> None:
    token_file, runs = tmp_path / "token", tmp_path / "runs"
    token_file.write_text("revoked-token")
    kubeconfig = _plugin_kubeconfig(platform, tmp_path, token_file, runs)
    backend = adapter.KubernetesBackend.from_kubeconfig(str(kubeconfig))
    # The plugin hands out a valid token from now on; the backend still holds the revoked one.
    executor_token = (Path(platform.info["state"]) / "tokens" / "executor").read_text()
    token_file.write_text(executor_token)
    async with backend:
        result = await adapter.ExecService(backend).execute(request(adapter, "echo fresh"))
    assert result.stdout == b"fresh\n"
    assert runs.read_text().count("run") == 2  # loaded once, refreshed once after the 401


def _plugin_kubeconfig(platform: Cluster, tmp_path: Path, token_file: Path, runs: Path) -> Path:
    """The executor's kubeconfig with PLUGIN as its credential: it hands out what
    ``token_file`` holds when it runs, and writes a line to ``runs`` each time."""
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    config = _read_json(platform.kubeconfig("executor"))
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(script), str(token_file), str(runs)],
        }
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    return kubeconfig


def _read_json(path: str) -> Any:
    return json.loads(Path(path).read_text())


def _replica(adapter: ModuleType, cluster: Cluster, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(REPLICA), adapter.__name__, cluster.kubeconfig("executor"), *args],
        stdout=subprocess.PIPE,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _leases(cluster: Cluster) -> list[dict[str, Any]]:
    done = kubectl(cluster, "get", "leases", "-n", SLOTS_NS, "-o", "json")
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
    return items


async def test_three_replicas_never_hold_more_than_two_sessions(
    adapter: ModuleType, platform: Cluster
) -> None:
    marker = f"/tmp/kx-slots-{uuid.uuid4().hex}"
    counts = (17, 17, 16)
    replicas = [_replica(adapter, platform, "burst", str(n), marker) for n in counts]
    outputs = []
    for replica in replicas:
        out, _ = await anyio.to_thread.run_sync(functools.partial(replica.communicate, timeout=280))
        assert replica.returncode == 0, out
        outputs.append(json.loads(out))
    assert sum(o["ran"] for o in outputs) == 50
    backend = adapter.KubernetesBackend.from_kubeconfig(platform.kubeconfig("admin"))
    async with backend:
        log = await adapter.ExecService(backend).execute(request(adapter, f"cat {marker}"))
    running = peak = 0
    for line in log.stdout.decode().split():
        running += 1 if line == "+" else -1
        peak = max(peak, running)
    assert log.stdout.decode().split().count("+") == 50
    assert peak == 2  # never more than the limit, cluster-wide; and the limit was reached
    # Every session's end recorded, every heartbeat of these replicas deleted (a killed
    # replica's, from another test, may still wait for the sweep).
    left = _leases(platform)
    assert [lease for lease in left if lease["metadata"]["name"].startswith("replica-burst")] == []
    for lease in left:  # the workspace's record stays, empty, while the workspace is in use
        if lease["metadata"]["labels"].get("kuber-exec.io/role") == "sessions":
            assert lease["metadata"]["annotations"]["kuber-exec.io/sessions"] == "{}"


async def test_a_killed_replicas_slots_free_within_the_lease_duration(
    adapter: ModuleType, platform: Cluster
) -> None:
    duration = 10
    doomed = _replica(adapter, platform, "hold", "2", str(duration))

    def records() -> list[dict[str, Any]]:
        return [
            lease
            for lease in _leases(platform)
            if lease["metadata"]["labels"].get("kuber-exec.io/role") == "sessions"
        ]

    def noted() -> bool:
        # Both sessions recorded with their pod and supervision (noted while the execs opened).
        found = records()
        sessions = json.loads(found[0]["metadata"]["annotations"]["kuber-exec.io/sessions"])
        return len(sessions) == 2 and all(entry[2] for entry in sessions.values())

    try:
        assert doomed.stdout is not None
        assert await anyio.to_thread.run_sync(doomed.stdout.readline) == b"held\n"
        await anyio.to_thread.run_sync(
            functools.partial(poll, noted, timeout=20, what="the sessions' pods noted")
        )
    finally:
        doomed.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await anyio.to_thread.run_sync(doomed.wait)
        if doomed.stdout is not None:
            doomed.stdout.close()
    # Not released: the record still lists its two sessions (its heartbeat is left to expire).
    (record,) = records()
    sessions = json.loads(record["metadata"]["annotations"]["kuber-exec.io/sessions"])
    supervisions = [entry[2] for entry in sessions.values()]
    assert len(supervisions) == 2
    marks = " ".join(f"-e KUBER_EXEC_SESSION={mark}" for mark in supervisions)
    find = f"grep -l -s -z -x -F {marks} /proc/[0-9]*/environ | wc -l"
    slots = adapter.ClusterSlots(SLOTS_NS, duration=duration)
    backend = adapter.KubernetesBackend.from_kubeconfig(
        platform.kubeconfig("executor"), cluster_slots=slots
    )
    limits = adapter.SessionLimits(max_sessions_per_workspace=2)
    async with backend:
        service = adapter.ExecService(backend, session_limits=limits)
        with pytest.raises(adapter.ExecError) as raised:
            await service.execute(request(adapter, "true"))
        assert raised.value.code is adapter.ExecErrorCode.ABORTED
        assert time.monotonic() - killed_at < duration  # refused while the leases were live
        refusal: Any = None
        while True:
            try:
                await service.execute(request(adapter, "true"))
                break
            except adapter.ExecError as error:
                refusal = error
            assert refusal.code is adapter.ExecErrorCode.ABORTED
            assert time.monotonic() - killed_at < duration + 5
            await anyio.sleep(0.25)  # polling the real clock: the lease expires in time
        # The dead replica's `cat`s were ended before their places were given away.
        left = await service.execute(request(adapter, find), cleanup=False)
        assert left.stdout.decode().strip() == "0"
    freed_after = time.monotonic() - killed_at
    assert freed_after <= duration + 5
    print(f"\nslots of a kill -9'd replica free after {freed_after:.1f} s (lease {duration} s)")


async def test_what_the_lease_mode_costs_per_session(
    adapter: ModuleType, platform: Cluster
) -> None:
    rounds = 20
    figures: dict[str, Any] = {}
    for mode in ("in-process", "lease"):
        slots = adapter.ClusterSlots(SLOTS_NS) if mode == "lease" else None
        backend = adapter.KubernetesBackend.from_kubeconfig(
            platform.kubeconfig("executor"), cluster_slots=slots
        )
        limits = adapter.SessionLimits(max_sessions_per_workspace=2)
        async with backend:
            service = adapter.ExecService(backend, session_limits=limits)
            await service.execute(request(adapter, "true"))  # warm the connections
            calls_before = 0 if slots is None else slots.api_calls
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                await service.execute(request(adapter, "true"))
                times.append((time.perf_counter() - started) * 1000)
            calls = 0 if slots is None else slots.api_calls - calls_before
        figures[mode] = {
            "median_ms": round(statistics.median(times), 2),
            "mean_ms": round(statistics.fmean(times), 2),
            "lease_api_calls_per_session": calls / rounds,
        }
    # The record's create and delete, and the pod noted in between unless the end carried it.
    assert 2.0 <= figures["lease"]["lease_api_calls_per_session"] <= 3.0
    figures["adapter"] = adapter.__name__
    out = Path(platform.info["state"]) / f"platform-bench-{adapter.__name__}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(f"\nlease mode cost ({adapter.__name__}): {json.dumps(figures)}")


def _token_request(cluster: Cluster, bound_secret: str | None = None) -> str:
    """A TokenRequest for the executor ServiceAccount (10 minutes: the server's minimum),
    bound to the Secret ``bound_secret`` if given (deleting it revokes the token)."""
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if bound_secret is not None:
        spec["boundObjectRef"] = {"kind": "Secret", "apiVersion": "v1", "name": bound_secret}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    done = kubectl(
        cluster,
        "create",
        "--raw",
        f"/api/v1/namespaces/{cluster.main_ns}/serviceaccounts/executor/token",
        "-f",
        "-",
        input=json.dumps(body).encode(),
    )
    return str(json.loads(done.stdout)["status"]["token"])


def _token_works(cluster: Cluster, token: str) -> bool:
    config = _read_json(cluster.kubeconfig("executor"))
    config["users"][0]["user"] = {"token": token}
    path = Path(cluster.info["state"]) / f"probe-{uuid.uuid4().hex[:8]}.kubeconfig"
    path.write_text(json.dumps(config))
    try:
        argv = [KUBECTL, "--kubeconfig", str(path), "get", "pods", "-n", cluster.main_ns]
        return subprocess.run(argv, capture_output=True, check=False).returncode == 0
    finally:
        path.unlink()


async def test_a_token_revoked_mid_session_is_refreshed_for_the_next_exec(
    adapter: ModuleType, platform: Cluster, tmp_path: Path
) -> None:
    # A bound TokenRequest token, revoked by deleting its Secret while a session runs: the open
    # session goes on (it was authenticated at its upgrade), the next exec is refused with 401,
    # the plugin is asked again and hands out a fresh token.
    secret = f"kx-bound-{uuid.uuid4().hex[:8]}"
    kubectl(platform, "create", "secret", "generic", secret, "-n", platform.main_ns)
    token_file, runs = tmp_path / "token", tmp_path / "runs"
    token_file.write_text(_token_request(platform, bound_secret=secret))
    kubeconfig = _plugin_kubeconfig(platform, tmp_path, token_file, runs)
    revoked = token_file.read_text()
    async with adapter.KubernetesBackend.from_kubeconfig(str(kubeconfig)) as backend:
        service = adapter.ExecService(backend)
        async with service.open_interactive(
            request(adapter, "while read line; do echo got-$line; done"), tty=False
        ) as session:
            await session.send(adapter.Stdin(b"one\n"))
            assert await _read_line(adapter, session) == b"got-one\n"
            kubectl(platform, "delete", "secret", secret, "-n", platform.main_ns)
            poll(lambda: not _token_works(platform, revoked), timeout=60, what="the revocation")
            token_file.write_text(_token_request(platform))
            await session.send(adapter.Stdin(b"two\n"))
            assert await _read_line(adapter, session) == b"got-two\n"
            result = await service.execute(request(adapter, "echo fresh"))
    assert result.stdout == b"fresh\n"
    assert runs.read_text().count("run") == 2  # loaded once, refreshed once after the 401


async def _read_line(adapter: ModuleType, session: Any) -> bytes:
    seen = bytearray()
    with anyio.fail_after(30):
        async for frame in session:
            assert isinstance(frame, adapter.Stdout), frame
            seen += frame.data
            if seen.endswith(b"\n"):
                return bytes(seen)
    raise AssertionError(f"the session ended after {bytes(seen)!r}")


async def test_a_partitioned_replica_ends_its_sessions_before_another_takes_its_place(
    adapter: ModuleType, platform: Cluster
) -> None:
    # The cut-off replica reaches the API server through a loopback proxy (TLS passes through
    # it untouched) that the test partitions: every call of it fails, its exec streams too.
    duration, interval = 4, 1.0
    config = _read_json(platform.kubeconfig("executor"))
    fenced: list[Any] = []
    ended_at: list[float] = []
    async with FreezingProxy(config["clusters"][0]["cluster"]["server"]).running() as proxy:
        config["clusters"][0]["cluster"]["server"] = proxy.url.replace("http://", "https://")
        path = Path(platform.info["state"]) / f"partitioned-{uuid.uuid4().hex[:8]}.kubeconfig"
        path.write_text(json.dumps(config))
        limits = adapter.SessionLimits(max_sessions_per_workspace=1)
        options = {"duration": duration, "renew_interval": interval}
        cut_backend = adapter.KubernetesBackend.from_kubeconfig(
            str(path),
            cluster_slots=adapter.ClusterSlots(SLOTS_NS, replica="partitioned", **options),
        )
        other_backend = adapter.KubernetesBackend.from_kubeconfig(
            platform.kubeconfig("executor"),
            cluster_slots=adapter.ClusterSlots(SLOTS_NS, replica="connected", **options),
        )
        async with cut_backend, other_backend, anyio.create_task_group() as tasks:
            cut = adapter.ExecService(cut_backend, session_limits=limits)
            other = adapter.ExecService(other_backend, session_limits=limits)
            opened = anyio.Event()

            async def hold() -> None:
                try:
                    async with cut.open_interactive(request(adapter, "exec cat"), tty=False):
                        opened.set()
                        await anyio.sleep_forever()
                except adapter.ExecError as error:
                    fenced.append(error)
                ended_at.append(time.monotonic())

            tasks.start_soon(hold)
            await opened.wait()
            proxy.partition()
            partitioned_at = time.monotonic()
            admitted_at = None
            codes = set()
            with anyio.fail_after(6 * duration):
                while admitted_at is None:
                    try:
                        await other.execute(request(adapter, "true"))
                        admitted_at = time.monotonic()
                    except adapter.ExecError as error:
                        codes.add(error.code)
                        await anyio.sleep(0.25)  # a client retrying, not synchronisation
            proxy.heal()
    path.unlink()
    assert codes <= {adapter.ExecErrorCode.ABORTED}
    assert [error.code for error in fenced] == [adapter.ExecErrorCode.ABORTED]
    assert admitted_at is not None
    assert ended_at[0] < admitted_at
    # Fenced after duration - interval without a renewal; the place given within about
    # the duration (plus the cleanup of its `cat`).
    assert ended_at[0] - partitioned_at < duration
    assert admitted_at - partitioned_at < 3 * duration
    print(
        f"\npartitioned replica fenced after {ended_at[0] - partitioned_at:.1f} s, its place "
        f"taken after {admitted_at - partitioned_at:.1f} s (duration {duration} s)"
    )
