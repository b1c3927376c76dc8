"""The tier's network rule: the cluster and these tests live in a loopback-only namespace.

Nothing of this tier may reach an address outside the namespace the run created. These tests
check the namespace (only ``lo``, every route on ``lo``, a connect to a non-local address fails),
that every component runs in it, and that the kubelet's cloud credential providers are off.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
from pathlib import Path

import pytest

from .kube import Cluster, processes_with


def test_this_process_is_in_the_runs_own_network_namespace(cluster: Cluster) -> None:
    ours = os.stat("/proc/self/ns/net").st_ino
    assert ours == os.stat(Path("/run/netns") / cluster.netns).st_ino
    # ...which is not the namespace the run was started from (its parent's, outside).
    with contextlib.suppress(PermissionError):
        assert ours != os.stat(f"/proc/{os.getppid()}/ns/net").st_ino or os.getppid() == 1


def test_the_namespace_has_only_lo_and_every_route_is_lo(cluster: Cluster) -> None:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    names = [line.split(":")[1].strip() for line in links.stdout.splitlines()]
    assert names == ["lo"]
    for family in ("-4", "-6"):
        routes = subprocess.run(
            ["ip", family, "route", "show", "table", "all"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        for route in routes:
            assert " dev lo" in f" {route}", route


@pytest.mark.parametrize("address", ["203.0.113.7", "169.254.169.254", "10.0.0.1", "8.8.8.8"])
def test_a_connect_to_a_non_local_address_fails(cluster: Cluster, address: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        with pytest.raises(OSError) as caught:  # noqa: PT011  (the errno is checked below)
            sock.connect((address, 80))
    # The SYN loops back on lo and is dropped: a timeout (or an unreachable error), never a peer.
    assert isinstance(caught.value, TimeoutError) or caught.value.errno in {
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
        errno.ECONNREFUSED,
        errno.EINVAL,
    }


def test_every_component_runs_in_the_namespace(cluster: Cluster) -> None:
    ours = os.stat("/proc/self/ns/net").st_ino
    expected = {
        "etcd",
        "containerd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
    }
    assert set(cluster.pids) == expected
    for name, pid in cluster.pids.items():
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == ours, name


def test_the_kubelet_has_the_cloud_metadata_lookups_disabled(cluster: Cluster) -> None:
    environ = Path(f"/proc/{cluster.pids['kubelet']}/environ").read_bytes().split(b"\0")
    assert b"AWS_EC2_METADATA_DISABLED=true" in environ


def test_the_pods_share_the_namespace(cluster: Cluster, workloads: object) -> None:
    # hostNetwork pods get the node's network namespace: the loopback-only one.
    # Their processes are the ones in the kubelet's ``kubepods`` cgroups.
    ours = os.stat("/proc/self/ns/net").st_ino
    checked = 0
    for pid in processes_with("2147483647"):
        try:
            if "/kubepods" not in Path(f"/proc/{pid}/cgroup").read_text():
                continue
            assert os.stat(f"/proc/{pid}/ns/net").st_ino == ours
        except FileNotFoundError:
            continue
        checked += 1
    assert checked >= 5
