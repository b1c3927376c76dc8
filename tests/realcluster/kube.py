"""Helpers of the real-cluster tier: the cluster's description, kubectl, the test workloads.

``cluster.json`` is written by scripts/realcluster/cluster.py ``up``; ``$KUBER_REALCLUSTER`` names
it. kubectl (the machine's /usr/bin/kubectl, newer than the server: it warns about the skew and
falls back to SPDY for exec) is the reference client and creates the workloads.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

MANAGED_BY: Final = "app.kubernetes.io/managed-by"
WORKSPACE_UID: Final = "kuber.dev/workspace-uid"
WS_MAIN: Final = "ws-main-0001"
WS_OTHER: Final = "ws-other-0002"
KUBECTL: Final = shutil.which("kubectl") or "/usr/bin/kubectl"
SLEEP: Final = ["/bin/sleep", "2147483647"]
ROLLING_GRACE_S: Final = 300


@dataclass(frozen=True)
class Cluster:
    info: dict[str, Any]

    @property
    def main_ns(self) -> str:
        return str(self.info["namespaces"]["main"])

    @property
    def other_ns(self) -> str:
        return str(self.info["namespaces"]["other"])

    @property
    def netns(self) -> str:
        return str(self.info["netns"])

    @property
    def image(self) -> str:
        return str(self.info["image"])

    @property
    def pids(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.info["pids"].items()}

    def kubeconfig(self, user: str) -> str:
        return str(self.info["kubeconfigs"][user])

    @property
    def exec_plugin_calls(self) -> Path:
        return Path(self.info["exec_plugin_calls"])


def cluster_unavailable_reason() -> str | None:
    """Why this process cannot use the cluster, or ``None``."""
    failed = os.environ.get("KUBER_REALCLUSTER_UP_FAILED")
    if failed:
        return failed
    path = os.environ.get("KUBER_REALCLUSTER")
    if not path:
        return "KUBER_REALCLUSTER is not set (run `make realcluster-test`)"
    if not Path(path).is_file():
        return f"{path} does not exist (is the cluster up?)"
    info = json.loads(Path(path).read_text())
    netns = Path("/run/netns") / info["netns"]
    try:
        ours = os.stat("/proc/self/ns/net").st_ino
        theirs = os.stat(netns).st_ino
    except OSError as error:
        return f"cannot compare network namespaces: {error}"
    if ours != theirs:
        return f"this process is not in the cluster's network namespace {netns}"
    return None


def shell_request(adapter: ModuleType, command: list[str]) -> Any:
    """An ``ExecRequest`` for ``command`` in the ``shell`` Deployment of workspace ``WS_MAIN``."""
    return adapter.ExecRequest(
        workspace=adapter.Workspace(project="kx-target", uid=WS_MAIN),
        deployment="shell",
        command=command,
        container=None,
    )


def load_cluster() -> Cluster:
    return Cluster(json.loads(Path(os.environ["KUBER_REALCLUSTER"]).read_text()))


def kubectl(
    cluster: Cluster,
    *args: str,
    user: str = "admin",
    input: bytes | None = None,
    check: bool = True,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    argv = [KUBECTL, "--kubeconfig", cluster.kubeconfig(user), *args]
    done = subprocess.run(argv, input=input, capture_output=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace')}"
        )
    return done


def server_version(cluster: Cluster) -> tuple[int, int, str]:
    """(major, minor, gitVersion) as the API server's ``/version`` says."""
    info = json.loads(kubectl(cluster, "get", "--raw", "/version").stdout)
    return int(info["major"]), int(str(info["minor"]).rstrip("+")), str(info["gitVersion"])


def credentials(cluster: Cluster, user: str) -> tuple[ssl.SSLContext, dict[str, str]]:
    """The TLS context and headers of ``user``: admin's client certificate, or a token."""
    state = Path(cluster.info["state"])
    context = ssl.create_default_context(cafile=str(state / "pki" / "ca.crt"))
    if user == "admin":
        context.load_cert_chain(str(state / "pki" / "admin.crt"), str(state / "pki" / "admin.key"))
        return context, {}
    token = (state / "tokens" / user).read_text().strip()
    return context, {"Authorization": f"Bearer {token}"}


class RestClient:
    """Plain HTTPS GETs with one user's credentials (no library code in between)."""

    def __init__(self, cluster: Cluster, user: str = "admin") -> None:
        self.base = str(cluster.info["apiserver"])
        self.context, headers = credentials(cluster, user)
        self.headers = {"Accept": "application/json", **headers}

    def get_raw(self, target: str) -> tuple[int, bytes]:
        """GET ``target`` (path and query): the status and the whole body."""
        request = urllib.request.Request(self.base + target, headers=self.headers)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as error:
            with error:
                return int(error.code), error.read()

    def get(self, path: str, **query: str) -> tuple[int, Any]:
        """GET ``path`` with ``query``: the status and the body as JSON."""
        status, body = self.get_raw(path + ("?" + urllib.parse.urlencode(query) if query else ""))
        return status, json.loads(body)


def compact_etcd() -> int:
    """Compact the cluster's etcd (``127.0.0.1:2379`` in the namespace) up to its current
    revision, through etcd's own JSON gateway, as the API server does every 5 minutes; returns
    the revision. Watches from before it can no longer be served from etcd."""

    def call(path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:2379/v3/{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    revision = int(call("kv/range", {"key": "AA=="})["header"]["revision"])
    call("kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def get_json(cluster: Cluster, *args: str, user: str = "admin") -> Any:
    return json.loads(kubectl(cluster, "get", *args, "-o", "json", user=user).stdout)


def poll(
    condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.25
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


def container(
    name: str, command: Sequence[str], image: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",
        "command": list(command),
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    return spec


def deployment(
    name: str,
    *,
    namespace: str,
    image: str,
    workspace: str | None,
    managed: bool = True,
    replicas: int = 1,
    pod_labels: dict[str, str] | None = None,
    match_labels: dict[str, str] | None = None,
    match_expressions: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    grace: int = 1,
    strategy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    labels = {"app": name}
    if managed:
        labels[MANAGED_BY] = "kuber"
    if workspace is not None:
        labels[WORKSPACE_UID] = workspace
    selector: dict[str, Any] = {"matchLabels": match_labels or {"app": name}}
    if match_expressions:
        selector["matchExpressions"] = match_expressions
    template_labels = {**(match_labels or {"app": name}), **(pod_labels or {})}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": selector,
        "template": {
            "metadata": {"labels": template_labels},
            "spec": {
                "hostNetwork": True,
                "dnsPolicy": "Default",
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": grace,
                "containers": containers or [container("main", SLEEP, image, {"WHO": name})],
            },
        },
    }
    if strategy:
        spec["strategy"] = strategy
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def workload_manifests(cluster: Cluster) -> list[dict[str, Any]]:
    """The Deployments of the tier.

    - ``shell`` (workspace ``WS_MAIN``): selector with matchLabels ``app=shell`` **and**
      matchExpressions ``tier In (exec, debug)``; one ready pod; the exec tests' target.
    - ``impostor`` (workspace ``WS_OTHER``): its pods carry ``app=shell, tier=exec`` too, so they
      match ``shell``'s selector; they are owned by another ReplicaSet and must never be chosen.
    - ``unlabelled``: no ownership labels (forbidden).
    - ``zero``: scaled to zero (not ready).
    - ``crashy``: containers ``crash`` (exits 1 at once, so it crash-loops) and ``main``.
    - ``rolling``: two replicas whose pods take ``ROLLING_GRACE_S`` to terminate (a ``preStop``
      sleep), so a rolling update leaves terminating pods around.
    - ``elsewhere`` in the other namespace: for the ``stranger`` token.
    """
    ns, image = cluster.main_ns, cluster.image
    crash = container("crash", ["sh", "-c", "echo crashing; exit 1"], image)
    rolling_main = container("main", SLEEP, image, {"WHO": "rolling", "GENERATION": "1"})
    rolling_main["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(ROLLING_GRACE_S)]}}}
    return [
        deployment(
            "shell",
            namespace=ns,
            image=image,
            workspace=WS_MAIN,
            match_labels={"app": "shell"},
            match_expressions=[{"key": "tier", "operator": "In", "values": ["exec", "debug"]}],
            pod_labels={"tier": "exec"},
        ),
        deployment(
            "impostor",
            namespace=ns,
            image=image,
            workspace=WS_OTHER,
            match_labels={"role": "impostor"},
            pod_labels={"app": "shell", "tier": "exec"},
            containers=[container("main", SLEEP, image, {"WHO": "impostor"})],
        ),
        deployment("unlabelled", namespace=ns, image=image, workspace=None, managed=False),
        deployment("zero", namespace=ns, image=image, workspace=WS_MAIN, replicas=0),
        deployment(
            "crashy",
            namespace=ns,
            image=image,
            workspace=WS_MAIN,
            containers=[crash, container("main", SLEEP, image, {"WHO": "crashy"})],
        ),
        deployment(
            "rolling",
            namespace=ns,
            image=image,
            workspace=WS_MAIN,
            replicas=2,
            grace=ROLLING_GRACE_S + 30,
            containers=[rolling_main],
            strategy={
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0},
            },
        ),
        deployment("elsewhere", namespace=cluster.other_ns, image=image, workspace=WS_OTHER),
    ]


def pods_of(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cluster, "pods", "-n", namespace, "-l", selector)[
        "items"
    ]
    return items


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def container_running(pod: dict[str, Any], name: str) -> bool:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status["name"] == name:
            return "running" in (status.get("state") or {})
    return False


def make_workloads(cluster: Cluster) -> dict[str, Any]:
    """Apply the Deployments (once per cluster) and wait until the controllers and the kubelet
    have made them what the tests expect."""
    marker = Path(cluster.info["state"]) / "workloads.applied"
    if not marker.exists():
        manifests = {"apiVersion": "v1", "kind": "List", "items": workload_manifests(cluster)}
        kubectl(cluster, "apply", "-f", "-", input=json.dumps(manifests).encode())
        marker.write_text("applied\n")
    ns = cluster.main_ns

    def ready(namespace: str, selector: str, count: int) -> Callable[[], bool]:
        def check() -> bool:
            pods = pods_of(cluster, namespace, selector)
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return len(live) >= count and sum(is_ready(p) for p in live) >= count

        return check

    poll(ready(ns, "app=shell,tier=exec,!role", 1), timeout=120, what="shell's pod")
    poll(ready(ns, "role=impostor", 1), timeout=60, what="impostor's pod")
    poll(ready(ns, "app=unlabelled", 1), timeout=60, what="unlabelled's pod")
    poll(ready(cluster.other_ns, "app=elsewhere", 1), timeout=60, what="elsewhere's pod")
    poll(ready(ns, "app=rolling", 2), timeout=60, what="rolling's pods")

    def crashy_running() -> bool:
        pods = pods_of(cluster, ns, "app=crashy")
        return any(
            container_running(p, "main")
            and any(
                s["name"] == "crash" and s.get("restartCount", 0) >= 1
                for s in p["status"].get("containerStatuses") or []
            )
            for p in pods
        )

    poll(crashy_running, timeout=90, what="crashy's main running and crash restarted")
    return {"namespace": ns}


# --------------------------------------------------------------------------------------------
# Processes on the node (the pods' processes are in this machine's PID namespace)
# --------------------------------------------------------------------------------------------


def processes_with(needle: str) -> list[int]:
    """PIDs whose command line contains ``needle``."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


# --------------------------------------------------------------------------------------------
# The library under test, and what the run saw
# --------------------------------------------------------------------------------------------

#: The server's release and the subprotocols negotiated, for the run's summary line.
SEEN: dict[str, Any] = {}


def negotiated(subprotocol: str) -> None:
    """Note a subprotocol the library negotiated (printed in the run's summary)."""
    SEEN.setdefault("subprotocols", set()).add(subprotocol)


class service_for:
    """``async with service_for(adapter, cluster, user) as service``: an ``ExecService`` over a
    ``KubernetesBackend`` loaded from the user's kubeconfig with the official loader."""

    def __init__(self, adapter: ModuleType, cluster: Cluster, user: str) -> None:
        self._backend = adapter.KubernetesBackend.from_kubeconfig(cluster.kubeconfig(user), None)
        self._adapter = adapter

    async def __aenter__(self) -> Any:
        await self._backend.__aenter__()
        return self._adapter.ExecService(self._backend)

    async def __aexit__(self, *exc: object) -> None:
        await self._backend.__aexit__(*exc)
