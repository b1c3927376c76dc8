"""Bring a single-node Kubernetes cluster (v1.20.2, or a current release) up or down inside a
loopback-only netns.

Usage (as root; see mk/realcluster.mk; ``KUBER_REALCLUSTER_K8S=1.37`` picks the current release,
built by build-modules.sh, default 1.20):

    python scripts/realcluster/cluster.py netns-up   # the namespace: lo, 192.0.2.2, route
    nsenter --net=/run/netns/NAME python scripts/realcluster/cluster.py up
    python scripts/realcluster/cluster.py down          # stop by PID, clean up, delete the netns
    python scripts/realcluster/cluster.py status

``up`` must run inside the namespace: every component it starts (etcd, containerd,
kube-apiserver, kube-controller-manager, kube-scheduler, kubelet) inherits it, so nothing of the
cluster can reach an address outside it. ``up`` refuses to run in the machine's own namespace.

Everything is written under the state directory (``$KUBER_REALCLUSTER_STATE``, default
``/tmp/kuber-rc``) except what the kubelet and containerd insist on writing elsewhere
(``/var/lib/kubelet/device-plugins``, ``/var/log/pods``, ``/var/log/containers``,
``/run/containerd/s``, the ``kubepods`` cgroups, three sysctls): ``up`` notes what existed before,
``down`` removes what it added and restores the sysctls.

The state directory ends up with ``cluster.json`` (paths of the kubeconfigs, tokens, PIDs,
namespaces) that the tests in tests/realcluster read.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from runtime import cri_runtime  # noqa: E402  (the CRI tier's busybox image and containerd config)

#: The Kubernetes minor release to run: "1.20" (built from Debian's source package by build.sh)
#: or a current one built from Go modules by build-modules.sh (scripts/realcluster/k8s-<minor>/).
K8S = os.environ.get("KUBER_REALCLUSTER_K8S") or "1.20"
MODERN = K8S != "1.20"


def _module_version(minor: str) -> str:
    """The k8s.io/kubernetes release the build module for ``minor`` requires."""
    go_mod = Path(__file__).resolve().parent / f"k8s-{minor}" / "go.mod"
    try:
        lines = go_mod.read_text().splitlines()
    except OSError:
        raise SystemExit(f"no build module for Kubernetes {minor}: {go_mod}") from None
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "k8s.io/kubernetes":
            return words[1]
    raise SystemExit(f"{go_mod} requires no k8s.io/kubernetes")


VERSION = _module_version(K8S) if MODERN else "v1.20.2"
CACHE = Path(
    os.environ.get("KUBER_REALCLUSTER_CACHE")
    or Path.home() / ".cache" / "kuber-exec" / "realcluster" / VERSION
)
BIN = CACHE / "bin"
#: etcd, containerd (with its runc shim) and ctr: Debian's for 1.20, built from their Go modules
#: beside the Kubernetes binaries for a current release (it wants etcd >= 3.5, containerd >= 2).
ETCD = str(BIN / "etcd") if MODERN else (shutil.which("etcd") or "/usr/bin/etcd")
CONTAINERD = str(BIN / "containerd") if MODERN else (shutil.which("containerd") or "containerd")
CTR = str(BIN / "ctr") if MODERN else (shutil.which("ctr") or "ctr")
STATE = Path(os.environ.get("KUBER_REALCLUSTER_STATE") or "/tmp/kuber-rc")
NETNS = os.environ.get("KUBER_REALCLUSTER_NETNS") or "kuber-rc"
NETNS_PATH = Path("/run/netns") / NETNS
NODE_IP = "192.0.2.2"  # a documentation address (RFC 5737), on lo inside the namespace only
NODE_NAME = "kuber-rc-node"
APISERVER = "https://127.0.0.1:6443"
STREAM_PORT = 10010
IMAGE = cri_runtime.IMAGE_NAME
#: A shell-less ("distroless") image: one static Go binary, distroless/main.go, and nothing else.
DISTROLESS_IMAGE = "docker.io/library/kuber-distroless:test"
DISTROLESS_SOURCE = Path(__file__).resolve().parent / "distroless"

# Namespaces and ServiceAccounts the tests use (created by ``up``).
NS_MAIN = "kx-target"
NS_OTHER = "kx-other"

# Paths the kubelet writes outside --root-dir (hard-coded in v1.20) and the shims' socket dir.
OUTSIDE_PATHS = [
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    Path("/run/containerd/s"),
    Path("/run/containerd"),
]
SYSCTLS = ["vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"]


def log(message: str) -> None:
    print(f"[realcluster {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done


def poll(
    condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def in_our_netns() -> bool:
    """True when this process runs in the tier's namespace (``/run/netns/NAME``)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino == os.stat(NETNS_PATH).st_ino
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# The network namespace
# --------------------------------------------------------------------------------------------


def netns_up() -> None:
    if NETNS_PATH.exists():
        log(f"netns {NETNS} exists")
    else:
        run(["ip", "netns", "add", NETNS])
    ns = ["nsenter", f"--net={NETNS_PATH}"]
    run([*ns, "ip", "link", "set", "lo", "up"])
    addrs = run([*ns, "ip", "-o", "addr", "show", "dev", "lo"]).stdout
    if f"{NODE_IP}/32" not in addrs:
        run([*ns, "ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo"])
    routes = run([*ns, "ip", "route", "show"]).stdout
    if "default" not in routes:
        # Traffic to any non-local address loops back on lo and dies: the kubelet needs a default
        # route to pick a node address, and nothing can leave.
        run([*ns, "ip", "route", "add", "default", "dev", "lo"])
    links = run([*ns, "ip", "-o", "link", "show"]).stdout.splitlines()
    if len(links) != 1 or ": lo:" not in links[0]:
        raise SystemExit(f"netns {NETNS} has links other than lo: {links}")
    log(f"netns {NETNS}: lo up, {NODE_IP}/32, default dev lo")


def netns_down() -> None:
    if NETNS_PATH.exists():
        subprocess.run(["ip", "netns", "delete", NETNS], check=False)
    # `ip netns add` makes /run/netns (a bind mount of itself) when it is missing: once no
    # namespace is left in it, undo that, so no empty mount is left behind.
    run_netns = NETNS_PATH.parent
    with contextlib.suppress(OSError):
        if run_netns.is_dir() and not any(run_netns.iterdir()):
            # (A bind mount of the same filesystem: os.path.ismount cannot tell; mountinfo can.)
            for _ in cri_runtime._mount_points_under(run_netns):
                subprocess.run(["umount", str(run_netns)], capture_output=True, check=False)
            run_netns.rmdir()


# --------------------------------------------------------------------------------------------
# Certificates (openssl), kubeconfigs, the exec credential plugin
# --------------------------------------------------------------------------------------------


def openssl(*args: str) -> None:
    run(["openssl", *args])


def make_pki(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca_key))
    openssl(
        "req", "-x509", "-new", "-key", str(ca_key), "-out", str(ca_crt), "-days", "30",
        "-subj", "/CN=kuber-exec-realcluster-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip
    # The ServiceAccount token signing key.
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))

    def leaf(name: str, subject: str, *, server: bool) -> None:
        key, csr, crt = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.crt"
        ext = pki / f"{name}.ext"
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
        openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", subject)
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature"]
        if server:
            lines.append("extendedKeyUsage=serverAuth")
            lines.append(
                "subjectAltName=IP:127.0.0.1,IP:" + NODE_IP + ",DNS:localhost,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc," + "DNS:" + NODE_NAME
            )
        else:
            lines.append("extendedKeyUsage=clientAuth")
        ext.write_text("\n".join(lines) + "\n")
        openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(crt), "-days", "30", "-extfile", str(ext),
        )  # fmt: skip
        csr.unlink()
        ext.unlink()

    leaf("apiserver", "/CN=kube-apiserver", server=True)
    leaf(
        "apiserver-kubelet-client",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
        server=False,
    )
    leaf("admin", "/O=system:masters/CN=kuber-admin", server=False)
    leaf("controller-manager", "/CN=system:kube-controller-manager", server=False)
    leaf("scheduler", "/CN=system:kube-scheduler", server=False)
    leaf("kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}", server=False)


def kubeconfig(path: Path, *, user: dict[str, Any], namespace: str = "default") -> Path:
    """A kubeconfig (JSON is valid YAML) with one cluster, one user, one context."""
    ca = (STATE / "pki" / "ca.crt").read_bytes()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "realcluster",
                "cluster": {
                    "server": APISERVER,
                    "certificate-authority-data": base64.b64encode(ca).decode(),
                },
            }
        ],
        "users": [{"name": "user", "user": user}],
        "contexts": [
            {
                "name": "realcluster",
                "context": {"cluster": "realcluster", "user": "user", "namespace": namespace},
            }
        ],
        "current-context": "realcluster",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


def cert_user(name: str) -> dict[str, str]:
    pki = STATE / "pki"
    return {
        "client-certificate-data": base64.b64encode((pki / f"{name}.crt").read_bytes()).decode(),
        "client-key-data": base64.b64encode((pki / f"{name}.key").read_bytes()).decode(),
    }


def write_exec_plugin(token_file: Path) -> Path:
    """A credential plugin (client.authentication.k8s.io/v1beta1) printing an ExecCredential with
    the token in ``token_file``; every call appends a line to ``exec-plugin.calls``."""
    plugin = STATE / "exec-plugin.sh"
    calls = STATE / "exec-plugin.calls"
    plugin.write_text(
        "#!/bin/sh\n"
        "# kuber-exec realcluster: an exec credential plugin printing a bearer token.\n"
        "set -eu\n"
        f"echo \"$$ ${{KUBERNETES_EXEC_INFO:-no-exec-info}}\" >> '{calls}'\n"
        f"token=$(cat '{token_file}')\n"
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1beta1",'
        '"kind":"ExecCredential","status":{"token":"%s"}}\\n\' "$token"\n'
    )
    plugin.chmod(0o755)
    return plugin


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def start(name: str, argv: Sequence[str], *, env: dict[str, str] | None = None) -> int:
    logs = STATE / "logs"
    logs.mkdir(exist_ok=True)
    with open(logs / f"{name}.log", "ab") as out:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives ``up``; ``down`` stops it by PID
            env={**os.environ, **(env or {})},
        )
    pids = load_pids()
    pids[name] = process.pid
    (STATE / "pids.json").write_text(json.dumps(pids, indent=2) + "\n")
    log(f"started {name} (pid {process.pid})")
    return process.pid


def load_pids() -> dict[str, int]:
    path = STATE / "pids.json"
    if not path.exists():
        return {}
    data: dict[str, int] = json.loads(path.read_text())
    return data


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def check_alive(name: str) -> None:
    pid = load_pids()[name]
    if not alive(pid):
        tail = (STATE / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"{name} (pid {pid}) exited:\n{tail}")


def tcp_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def admin_ssl() -> ssl.SSLContext:
    pki = STATE / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


def api(method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        APISERVER + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, context=admin_ssl(), timeout=10) as response:
        return json.loads(response.read() or b"null")


def api_ok(path: str) -> bool:
    """``GET path`` answers 200 (for /readyz: the body is ``ok``, not JSON)."""
    try:
        request = urllib.request.Request(APISERVER + path)
        with urllib.request.urlopen(request, context=admin_ssl(), timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


# --------------------------------------------------------------------------------------------
# up
# --------------------------------------------------------------------------------------------


def note_outside_state() -> None:
    before = {
        "existing_paths": [str(p) for p in OUTSIDE_PATHS if p.exists()],
        "sysctls": {name: Path("/proc/sys", name).read_text().strip() for name in SYSCTLS},
    }
    (STATE / "outside.json").write_text(json.dumps(before, indent=2) + "\n")


def kubelet_config(runtime_socket: Path) -> str:
    pki = STATE / "pki"
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
        "maxPods": 50,
        # A container's whole log in one file up to 512 MiB (the default rotates at 10 MiB):
        # bench_debug.py reads 100 MB of one container's log.
        "containerLogMaxSize": "512Mi",
    }
    if MODERN:
        config.update(
            {
                "containerRuntimeEndpoint": f"unix://{runtime_socket}",
                "runtimeRequestTimeout": "2m",
                # This machine's cgroups are v1 (`stat -fc %T /sys/fs/cgroup`: tmpfs); kubelets
                # since 1.35 refuse to start there unless told not to.
                "failCgroupV1": False,
            }
        )
    return json.dumps(config, indent=2) + "\n"


def up() -> None:
    if os.geteuid() != 0:
        raise SystemExit("up needs root")
    if not in_our_netns():
        raise SystemExit(
            f"refusing to start a cluster outside the network namespace {NETNS_PATH}: "
            "run `cluster.py netns-up`, then this under `nsenter --net=...`"
        )
    wanted = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"]
    if MODERN:
        wanted += ["etcd", "containerd", "containerd-shim-runc-v2", "ctr"]
    missing = [c for c in wanted if not (BIN / c).is_file()]
    if missing:
        builder = f"build-modules.sh {K8S}" if MODERN else "build.sh"
        raise SystemExit(f"missing binaries in {BIN}: {missing}; run scripts/realcluster/{builder}")
    t0 = time.monotonic()
    if STATE.exists():
        raise SystemExit(f"{STATE} exists: run `down` first")
    STATE.mkdir(parents=True)
    note_outside_state()
    pki = STATE / "pki"
    make_pki(pki)

    def p(name: str) -> str:
        return str(pki / name)

    for comp in ("controller-manager", "scheduler", "kubelet", "admin"):
        kubeconfig(STATE / f"{comp}.kubeconfig", user=cert_user(comp))

    # The apiserver's audit log: who exec'd where (and as whom: impersonatedUser), for the
    # platform tests; metadata only, and only for pods/exec and leases.
    audit_policy = STATE / "audit-policy.json"
    audit_policy.write_text(json.dumps(AUDIT_POLICY))

    # etcd
    start(
        "etcd",
        [
            ETCD,
            "--name=kx",
            f"--data-dir={STATE / 'etcd'}",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=kx=http://127.0.0.1:2380",
            "--initial-cluster-state=new",
            *([] if MODERN else ["--enable-v2=false"]),  # (the flag is gone in etcd 3.6)
            "--log-level=warn",
            "--logger=zap",
        ],
    )

    # containerd: the CRI tier's configuration (everything under one directory)
    layout = cri_runtime.Layout(base=STATE / "containerd", socket_dir=STATE)
    for directory in (layout.root, layout.state, layout.runc_root, layout.logs):
        directory.mkdir(parents=True, exist_ok=True)
    snapshotter = cri_runtime.default_snapshotter()
    layout.config.write_text(
        cri_runtime.containerd_config(
            layout, stream_port=STREAM_PORT, snapshotter=snapshotter, sandbox_image=IMAGE
        )
    )
    cni_conf = layout.base / "cni" / "conf"
    cni_conf.mkdir(parents=True)
    (layout.base / "cni" / "bin").mkdir(parents=True)
    # A placeholder network config: the node is NotReady without one; host-network pods never
    # execute a CNI plugin.
    (cni_conf / "10-placeholder.conflist").write_text(
        json.dumps(
            {"cniVersion": "0.4.0", "name": "placeholder", "plugins": [{"type": "loopback"}]}
        )
    )
    # containerd 2 finds its runc shim on PATH by name: ours first, not Debian's 1.6 one.
    start(
        "containerd",
        [CONTAINERD, "--config", str(layout.config)],
        env={"PATH": f"{BIN}:{os.environ.get('PATH', '')}"} if MODERN else None,
    )

    poll(lambda: (check_alive("etcd"), tcp_open(2379))[1], timeout=30, what="etcd")
    log("etcd listens")

    start(
        "kube-apiserver",
        [
            str(BIN / "kube-apiserver"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--secure-port=6443",
            *([] if MODERN else ["--insecure-port=0"]),  # (removed in 1.24: always off)
            "--etcd-servers=http://127.0.0.1:2379",
            f"--cert-dir={pki}",
            f"--tls-cert-file={p('apiserver.crt')}",
            f"--tls-private-key-file={p('apiserver.key')}",
            f"--client-ca-file={p('ca.crt')}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={p('sa.pub')}",
            f"--service-account-signing-key-file={p('sa.key')}",
            f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
            "--kubelet-preferred-address-types=InternalIP",
            "--endpoint-reconciler-type=none",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=true",
            "--profiling=false",
            "--event-ttl=10m",
            f"--audit-policy-file={audit_policy}",
            f"--audit-log-path={STATE / 'logs' / 'audit.log'}",
            "--audit-log-mode=blocking",
        ],
    )
    poll(
        lambda: (check_alive("containerd"), layout.socket.exists())[1],
        timeout=30,
        what="containerd's socket",
    )
    archive = STATE / "kuber-busybox.oci.tar"
    cri_runtime.build_oci_archive(archive)
    base_ctr = [CTR, "--address", str(layout.socket), "--namespace", cri_runtime.CRI_NAMESPACE]
    run([*base_ctr, "images", "import", "--snapshotter", snapshotter, str(archive)], timeout=120)
    log(f"imported {IMAGE}")
    archive = STATE / "kuber-distroless.oci.tar"
    cri_runtime.build_oci_archive(
        archive,
        image_name=DISTROLESS_IMAGE,
        cmd=["/app"],
        layer_tar=distroless_layer(build_distroless()),
    )
    run([*base_ctr, "images", "import", "--snapshotter", snapshotter, str(archive)], timeout=120)
    log(f"imported {DISTROLESS_IMAGE}")

    poll(
        lambda: (check_alive("kube-apiserver"), api_ok("/readyz"))[1],
        timeout=90,
        what="kube-apiserver /readyz",
        interval=0.25,
    )
    log(f"kube-apiserver ready ({time.monotonic() - t0:.1f} s)")

    # The controller-manager and the scheduler read RBAC-protected objects at start-up: start
    # them once the apiserver has bootstrapped its roles.
    start(
        "kube-controller-manager",
        [
            str(BIN / "kube-controller-manager"),
            f"--kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'controller-manager.kubeconfig'}",
            "--leader-elect=false",
            *([] if MODERN else ["--port=0"]),  # (the insecure port is gone since 1.24)
            "--bind-address=127.0.0.1",
            "--secure-port=10257",
            f"--cert-dir={pki / 'controller-manager'}",
            "--use-service-account-credentials",
            f"--service-account-private-key-file={p('sa.key')}",
            f"--root-ca-file={p('ca.crt')}",
            f"--cluster-signing-cert-file={p('ca.crt')}",
            f"--cluster-signing-key-file={p('ca.key')}",
            "--profiling=false",
            "--concurrent-deployment-syncs=5",
        ],
    )
    start(
        "kube-scheduler",
        [
            str(BIN / "kube-scheduler"),
            f"--kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={STATE / 'scheduler.kubeconfig'}",
            "--leader-elect=false",
            *([] if MODERN else ["--port=0"]),
            "--bind-address=127.0.0.1",
            "--secure-port=10259",
            f"--cert-dir={pki / 'scheduler'}",
            "--profiling=false",
        ],
    )

    (STATE / "kubelet").mkdir()
    (STATE / "kubelet-config.json").write_text(kubelet_config(layout.socket))
    start(
        "kubelet",
        [
            str(BIN / "kubelet"),
            f"--kubeconfig={STATE / 'kubelet.kubeconfig'}",
            f"--config={STATE / 'kubelet-config.json'}",
            # (1.27+: the runtime endpoint and timeout live in the configuration file)
            *(
                []
                if MODERN
                else [
                    "--container-runtime=remote",
                    f"--container-runtime-endpoint=unix://{layout.socket}",
                    "--runtime-request-timeout=2m",
                ]
            ),
            f"--root-dir={STATE / 'kubelet'}",
            f"--cert-dir={pki / 'kubelet-serving'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            # (the sandbox image is containerd's to choose since 1.27: its configuration names it)
            *([] if MODERN else [f"--pod-infra-container-image={IMAGE}"]),
            "--v=1",
        ],
        # The kubelet's built-in AWS credential provider asks the cloud metadata address at
        # start-up; the namespace already makes that unreachable, this makes it not try.
        env={"AWS_EC2_METADATA_DISABLED": "true"},
    )

    setup_users()

    def node_ready() -> bool:
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager", "containerd"):
            check_alive(name)
        try:
            node = api("GET", f"/api/v1/nodes/{NODE_NAME}")
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    poll(node_ready, timeout=120, what=f"node {NODE_NAME} Ready", interval=0.5)
    log(f"node {NODE_NAME} Ready ({time.monotonic() - t0:.1f} s after start)")
    write_cluster_json()
    log(f"cluster up in {time.monotonic() - t0:.1f} s; state in {STATE}")
    print(f"export KUBECONFIG={STATE / 'admin.kubeconfig'}")
    print(f"nsenter --net={NETNS_PATH} kubectl --kubeconfig {STATE / 'admin.kubeconfig'} get nodes")


#: What the apiserver audits (``audit.k8s.io/v1`` Policy, as JSON: YAML's subset).
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "resources": [{"group": "", "resources": ["pods/exec"]}]},
        {"level": "Metadata", "resources": [{"group": "coordination.k8s.io",
                                             "resources": ["leases"]}],
         "namespaces": ["kx-slots"]},
        {"level": "None"},
    ],
}  # fmt: skip


def apply(obj: dict[str, Any]) -> Any:
    """Create ``obj`` (a namespaced or cluster object) with the admin client certificate."""
    kind = obj["kind"]
    ns = obj["metadata"].get("namespace")
    routes = {
        "Namespace": "/api/v1/namespaces",
        "ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    }
    return api("POST", routes[kind], obj)


def role(ns: str, name: str, rules: list[dict[str, Any]]) -> None:
    apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": name, "namespace": ns}, "rules": rules})  # fmt: skip


def bind(ns: str, name: str, sa_ns: str, sa: str) -> None:
    apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{name}-{sa}", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    })  # fmt: skip


READ_RULES = [
    {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
]
EXEC_RULES = [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}]
#: One verb each on pods/exec: what a WebSocket upgrade needs differs by release (1.35+ asks
#: for both ``get`` and ``create``).
EXEC_GET_RULES = [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]}]
EXEC_CREATE_RULES = [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]
#: (name, namespace, role) of every ServiceAccount ``up`` makes, each with a token kubeconfig.
ACCOUNTS = (
    ("executor", NS_MAIN, "exec"),
    ("reader", NS_MAIN, "read"),
    ("exec-get", NS_MAIN, "exec-get"),
    ("exec-create", NS_MAIN, "exec-create"),
    ("stranger", NS_OTHER, "exec"),
)


def sa_token(ns: str, sa: str) -> str:
    """A ServiceAccount's token: on 1.20 the Secret its token controller makes; on a current
    release (no such Secrets since 1.24) a TokenRequest valid for a day."""
    if MODERN:
        review = api(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},
            },
        )
        return str(review["status"]["token"])
    found: list[str] = []

    def has_token() -> bool:
        check_alive("kube-controller-manager")
        try:
            account = api("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}")
        except (urllib.error.URLError, OSError):
            return False
        for ref in account.get("secrets") or []:
            secret = api("GET", f"/api/v1/namespaces/{ns}/secrets/{ref['name']}")
            token = (secret.get("data") or {}).get("token")
            if token:
                found.append(base64.b64decode(token).decode())
                return True
        return False

    poll(has_token, timeout=60, what=f"a token for {ns}/{sa}", interval=0.3)
    return found[0]


def setup_users() -> None:
    """Namespaces, ServiceAccounts with RBAC, their tokens and kubeconfigs.

    - ``executor`` (kx-target): reads Deployments/ReplicaSets/Pods and may exec;
    - ``reader`` (kx-target): reads the same, no rule at all on ``pods/exec``;
    - ``exec-get`` and ``exec-create`` (kx-target): the reads and one verb on ``pods/exec``;
    - ``stranger`` (kx-other): may read and exec in kx-other only.
    """
    for ns in (NS_MAIN, NS_OTHER):
        apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for sa, ns, _ in ACCOUNTS:
        apply({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": sa, "namespace": ns}})  # fmt: skip
    role(NS_MAIN, "read", READ_RULES)
    role(NS_MAIN, "exec", READ_RULES + EXEC_RULES)
    role(NS_MAIN, "exec-get", READ_RULES + EXEC_GET_RULES)
    role(NS_MAIN, "exec-create", READ_RULES + EXEC_CREATE_RULES)
    role(NS_OTHER, "exec", READ_RULES + EXEC_RULES)
    for sa, ns, role_name in ACCOUNTS:
        bind(ns, role_name, ns, sa)
    tokens = STATE / "tokens"
    tokens.mkdir()
    for sa, ns, _ in ACCOUNTS:
        token_file = tokens / sa
        token_file.write_text(sa_token(ns, sa))
        token_file.chmod(0o600)
        kubeconfig(STATE / f"{sa}.kubeconfig", user={"token": token_file.read_text()}, namespace=ns)
    plugin = write_exec_plugin(tokens / "executor")
    kubeconfig(
        STATE / "exec-plugin.kubeconfig",
        user={
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": str(plugin),
                "args": [],
                "env": None,
                "provideClusterInfo": False,
            }
        },
        namespace=NS_MAIN,
    )
    log("users: admin (client certificate), executor/reader/stranger (tokens), exec plugin")


def build_distroless() -> Path:
    """The static binary of ``distroless/`` (Go, no cgo), built once per version of its source
    and kept in the cache; it needs only the standard library (no network)."""
    source = b"".join(p.read_bytes() for p in sorted(DISTROLESS_SOURCE.iterdir()) if p.is_file())
    digest = hashlib.sha256(source).hexdigest()[:16]
    binary = CACHE.parent / "distroless" / digest / "app"
    if binary.exists():
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    cache = Path(os.environ.get("KUBER_GO_CACHE") or Path.home() / ".cache" / "kuber-exec" / "go")
    env = {
        **os.environ,
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=mod",
        "GOCACHE": str(cache / "build"),
        "GOPATH": str(cache / "path"),
    }
    binary.parent.mkdir(parents=True, exist_ok=True)
    run(
        [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), "."],
        cwd=DISTROLESS_SOURCE,
        env=env,
        timeout=600,
    )
    log(f"built the shell-less image's binary {binary}")
    return binary


def distroless_layer(binary: Path) -> bytes:
    """An uncompressed tar: ``/app`` and the empty directories a container runtime mounts on;
    no shell, no ``ls``, no ``tar``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory, mode in (
            ("dev", 0o755),
            ("etc", 0o755),
            ("proc", 0o555),
            ("sys", 0o555),
            ("tmp", 0o1777),
        ):
            entry = tarfile.TarInfo(directory)
            entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(entry)
        data = binary.read_bytes()
        entry = tarfile.TarInfo("app")
        entry.size, entry.mode, entry.mtime = len(data), 0o755, 0
        tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()


def write_cluster_json() -> None:
    info = {
        "version": VERSION,
        "k8s": K8S,
        "state": str(STATE),
        "netns": NETNS,
        "apiserver": APISERVER,
        "node": NODE_NAME,
        "node_ip": NODE_IP,
        "image": IMAGE,
        "distroless_image": DISTROLESS_IMAGE,
        "namespaces": {"main": NS_MAIN, "other": NS_OTHER},
        "kubeconfigs": {
            name: str(STATE / f"{name}.kubeconfig")
            for name in ("admin", *(sa for sa, _, _ in ACCOUNTS), "exec-plugin")
        },
        "exec_plugin_calls": str(STATE / "exec-plugin.calls"),
        "audit_log": str(STATE / "logs" / "audit.log"),
        "pids": load_pids(),
        "containerd_socket": str(STATE / "containerd.sock"),
    }
    (STATE / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")


# --------------------------------------------------------------------------------------------
# down
# --------------------------------------------------------------------------------------------


def stop_pid(name: str, pid: int, grace: float) -> None:
    if not alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        log(f"{name} (pid {pid}) ignored SIGTERM: SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def down() -> None:
    if not STATE.exists():
        log(f"no state in {STATE}")
        netns_down()
        return
    pids = load_pids()
    socket_path = str(STATE / "containerd.sock")
    # The shims (and the pods' processes under them) were started by our containerd and
    # re-parented to PID 1: find them by our unique containerd socket path in their argv.
    shims = cri_runtime._processes_with_arg(socket_path)
    for name in ("kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver"):
        if name in pids:
            stop_pid(name, pids[name], grace=10)
    runc = shutil.which("runc")
    runc_root = STATE / "containerd" / "runc" / cri_runtime.CRI_NAMESPACE
    if runc and runc_root.is_dir():
        listed = subprocess.run(
            [runc, "--root", str(runc_root), "list", "-q"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        for container in listed.stdout.split():
            subprocess.run(
                [runc, "--root", str(runc_root), "delete", "--force", container],
                capture_output=True, check=False,
            )  # fmt: skip
    for name in ("containerd", "etcd"):
        if name in pids:
            stop_pid(name, pids[name], grace=10)
    for pid, argv in {**shims, **cri_runtime._processes_with_arg(socket_path)}.items():
        if alive(pid):
            log(f"killing leftover {argv[0]} (pid {pid})")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if "-id" in argv[:-1]:
                with contextlib.suppress(OSError):
                    cri_runtime._shim_socket(
                        Path(socket_path), argv[argv.index("-id") + 1]
                    ).unlink()
    failed = cri_runtime.unmount_all_under(STATE)
    failed += cri_runtime.unmount_all_under(Path("/var/lib/kubelet"))
    if failed:
        log(f"could not unmount: {failed}")
    cri_runtime.remove_cgroups("kubepods")
    outside_file = STATE / "outside.json"
    if outside_file.exists():
        outside = json.loads(outside_file.read_text())
        for name, value in outside["sysctls"].items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", name).write_text(value + "\n")
        existed = set(outside["existing_paths"])
        for path in OUTSIDE_PATHS:  # deepest first
            if str(path) not in existed and path.exists():
                shutil.rmtree(path, ignore_errors=True)
    for pid in list(shims) + list(pids.values()):
        for _ in range(50):
            if not alive(pid):
                break
            time.sleep(0.1)
    shutil.rmtree(STATE, ignore_errors=True)
    if STATE.exists():
        log(f"{STATE} could not be removed completely")
    netns_down()
    log("down")


def status() -> None:
    pids = load_pids()
    for name, pid in pids.items():
        print(f"{name:26} pid {pid:8} {'running' if alive(pid) else 'gone'}")
    if not pids:
        print(f"no cluster state in {STATE}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["netns-up", "up", "down", "status"])
    args = parser.parse_args()
    {"netns-up": netns_up, "up": up, "down": down, "status": status}[args.action]()


if __name__ == "__main__":
    main()
