"""The real-cluster tier: Kubernetes v1.20.2 or a current release (1.37; etcd, apiserver,
controller-manager, scheduler, kubelet on containerd) in a loopback-only network namespace.

``make realcluster-test`` (scripts/realcluster/run-tests.sh) builds or reuses the binaries, starts
the cluster inside the namespace and runs this folder's tests inside the same namespace with
``KUBER_REALCLUSTER`` naming the cluster's ``cluster.json``, once per release. The tests learn
the release from the server (``server_minor``); what differs between releases is asserted per
release, and a test that only a current release can answer says so when it is skipped on 1.20
(and is not skipped under CI on a current release). Every test here except those in
``test_sandbox_shape.py`` gets the ``realcluster`` marker. Without a cluster the tests skip with
the reason, or fail when ``CI`` is ``true``.

Workloads are made by the real controllers from Deployments applied with kubectl (admin client
certificate) in the session fixture ``workloads``; pods run busybox with ``hostNetwork: true``
and ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .kube import (
    SEEN,
    Cluster,
    cluster_unavailable_reason,
    load_cluster,
    make_workloads,
    server_version,
    service_for,
)

_HERE = Path(__file__).resolve().parent
_UNMARKED = {"test_sandbox_shape.py"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realcluster: needs the real Kubernetes cluster of make realcluster-test"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(_HERE) and path.name not in _UNMARKED:
            item.add_marker(pytest.mark.realcluster)
            # The first test also waits for the workloads to roll out (a loaded machine is slow).
            item.add_marker(pytest.mark.timeout(300))


def cluster_unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"real cluster unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"real cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """The running cluster (paths, kubeconfigs, PIDs), from ``$KUBER_REALCLUSTER``."""
    reason = cluster_unavailable_reason()
    if reason is not None:
        cluster_unavailable(reason)
    return load_cluster()


@pytest.fixture(scope="session")
def server_minor(cluster: Cluster) -> int:
    """The API server's minor version (20, 37, ...), from its ``/version``."""
    major, minor, git_version = server_version(cluster)
    assert major == 1, git_version
    SEEN["version"] = git_version
    return minor


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "version" in SEEN:
        protocols = ", ".join(sorted(SEEN.get("subprotocols", ()))) or "none recorded"
        terminalreporter.write_line(
            f"realcluster: Kubernetes {SEEN['version']}; negotiated: {protocols}"
        )


@pytest.fixture(scope="session")
def workloads(cluster: Cluster) -> dict[str, Any]:
    """The test Deployments, rolled out (see ``kube.make_workloads``)."""
    return make_workloads(cluster)


@pytest.fixture
async def admin_service(adapter: ModuleType, cluster: Cluster) -> AsyncIterator[Any]:
    """An ``ExecService`` authenticated with the admin client certificate."""
    async with service_for(adapter, cluster, "admin") as service:
        yield service
