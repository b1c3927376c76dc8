"""The pytest plugin (entry point ``kuber_exec`` in the ``pytest11`` group): fixtures for tests
of code that runs commands through kuber-exec.

pytest loads this module in every project where kuber-exec is installed, whatever extras were
chosen, so it imports nothing but pytest and the core at import time: the sandbox (trio, h11,
wsproto), the runtime bindings and httpx are imported inside the fixtures, which say what to
install when something is missing (``pip install 'kuber-exec[testing,trio]'``).

Fixtures (``docs/testing.md``):

- ``kuber_sandbox``: a started :class:`KuberSandbox` with an empty cluster, for this test;
- ``kuber_target``: a workspace Deployment with one ready pod in it (or ``--kuber-target``);
- ``kuber_config``: the ``ClusterConfig`` for the sandbox (or ``--kuber-kubeconfig``);
- ``kuber_backend``: the running loop's ``KubernetesBackend``, open (async: trio or asyncio);
- ``kuber_service``: an ``ExecService`` on it (async).

Markers: ``kuber_sandbox(**serve_sandbox options)``, ``kuber_backend(**KubernetesBackend
options)``, ``kuber_service(**ExecService options)``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from ._sandbox import KuberSandbox
from ._target import KuberTarget, parse_target

__all__ = [
    "CONTEXT_ENV",
    "KUBECONFIG_ENV",
    "TARGET_ENV",
    "RealCluster",
    "kuber_backend",
    "kuber_config",
    "kuber_real_cluster",
    "kuber_sandbox",
    "kuber_service",
    "kuber_target",
]

#: The environment variable that plays ``--kuber-kubeconfig``.
KUBECONFIG_ENV = "KUBER_EXEC_KUBECONFIG"
#: The environment variable that plays ``--kuber-context``.
CONTEXT_ENV = "KUBER_EXEC_CONTEXT"
#: The environment variable that plays ``--kuber-target``.
TARGET_ENV = "KUBER_EXEC_TARGET"

_SANDBOX_ONLY = (
    "needs the kuber-exec sandbox (its cluster model and faults); "
    "--kuber-kubeconfig points the fixtures at a real cluster"
)
_MISSING_SANDBOX = (
    "the kuber-exec sandbox is not installed ({error}): install kuber-exec[testing] "
    "with a runtime, e.g. pip install 'kuber-exec[testing,trio]'"
)


@attrs.frozen
class RealCluster:
    """Where ``--kuber-kubeconfig`` points the fixtures (``kuber_real_cluster``)."""

    kubeconfig: Path
    context: str | None
    target: KuberTarget | None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kuber-exec", "kuber-exec fixtures")
    group.addoption(
        "--kuber-kubeconfig",
        metavar="PATH",
        default=None,
        help=(
            "run the kuber-exec fixtures against the cluster of this kubeconfig instead of the "
            f"sandbox; tests that need the sandbox are skipped (env {KUBECONFIG_ENV})"
        ),
    )
    group.addoption(
        "--kuber-context",
        metavar="NAME",
        default=None,
        help=f"the kubeconfig context (default: its current one; env {CONTEXT_ENV})",
    )
    group.addoption(
        "--kuber-target",
        metavar="NAMESPACE/DEPLOYMENT/WORKSPACE_UID",
        default=None,
        help=f"what kuber_target names on the real cluster (env {TARGET_ENV})",
    )


_REAL_CLUSTER = pytest.StashKey["RealCluster | None"]()


def pytest_configure(config: pytest.Config) -> None:
    # Checked once, up front: a bad option stops the run before any test.
    config.stash[_REAL_CLUSTER] = _real_cluster(config)
    config.addinivalue_line(
        "markers", "kuber_sandbox(**options): serve_sandbox options for the kuber_sandbox fixture"
    )
    config.addinivalue_line(
        "markers", "kuber_backend(**options): KubernetesBackend options for kuber_backend"
    )
    config.addinivalue_line(
        "markers", "kuber_service(**options): ExecService options for kuber_service"
    )


def _setting(config: pytest.Config, option: str, env: str) -> str | None:
    value = config.getoption(option)
    if value is None:
        value = os.environ.get(env) or None
    return None if value is None else str(value)


def _missing(module: str) -> str | None:
    """Why ``module`` cannot be imported (an extra is not installed), or ``None``."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        return str(error)
    return None


def _marker_options(request: pytest.FixtureRequest, name: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    # Closest last: a test's marker overrides its class's and module's.
    for marker in reversed(list(request.node.iter_markers(name))):
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{name} takes keyword arguments only")
        options.update(marker.kwargs)
    return options


def _real_cluster(config: pytest.Config) -> RealCluster | None:
    path = _setting(config, "--kuber-kubeconfig", KUBECONFIG_ENV)
    if path is None:
        return None
    kubeconfig = Path(path).expanduser()
    if not kubeconfig.is_file():
        raise pytest.UsageError(f"--kuber-kubeconfig: no such file: {kubeconfig}")
    target = _setting(config, "--kuber-target", TARGET_ENV)
    try:
        parsed = None if target is None else parse_target(target)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    return RealCluster(
        kubeconfig=kubeconfig,
        context=_setting(config, "--kuber-context", CONTEXT_ENV),
        target=parsed,
    )


@pytest.fixture(scope="session")
def kuber_real_cluster(pytestconfig: pytest.Config) -> RealCluster | None:
    """The real cluster ``--kuber-kubeconfig`` names, or ``None`` (the sandbox is used)."""
    return pytestconfig.stash[_REAL_CLUSTER]


@pytest.fixture
def kuber_sandbox(
    request: pytest.FixtureRequest, kuber_real_cluster: RealCluster | None
) -> Iterator[KuberSandbox]:
    """A started sandbox API server with an empty cluster, for this test only.

    Shape it with ``kuber_sandbox.add_workspace(...)`` or ``kuber_sandbox.cluster``; arm faults
    with ``kuber_sandbox.faults``. Options for ``serve_sandbox`` come from the
    ``@pytest.mark.kuber_sandbox(offer_v5=False, token=..., subprotocols=[...])`` marker.
    Skipped when ``--kuber-kubeconfig`` points the fixtures at a real cluster.
    """
    if kuber_real_cluster is not None:
        pytest.skip(_SANDBOX_ONLY)
    missing = _missing("kuber_exec_sandbox")
    if missing is not None:
        pytest.fail(_MISSING_SANDBOX.format(error=missing), pytrace=False)
    sandbox = KuberSandbox.start(**_marker_options(request, "kuber_sandbox"))
    try:
        yield sandbox
    finally:
        sandbox.stop()


@pytest.fixture
def kuber_target(
    request: pytest.FixtureRequest, kuber_real_cluster: RealCluster | None
) -> KuberTarget:
    """A workspace's Deployment to exec into: on the sandbox, ``kuber_sandbox.add_workspace()``
    (Deployment ``app`` in namespace ``kuber-test``, one ready pod, container ``app``); on a real
    cluster, ``--kuber-target`` (the test is skipped without it)."""
    if kuber_real_cluster is None:
        sandbox: KuberSandbox = request.getfixturevalue("kuber_sandbox")
        return sandbox.add_workspace()
    if kuber_real_cluster.target is None:
        pytest.skip("needs --kuber-target NAMESPACE/DEPLOYMENT/WORKSPACE_UID on a real cluster")
    return kuber_real_cluster.target


@pytest.fixture
def kuber_config(request: pytest.FixtureRequest, kuber_real_cluster: RealCluster | None) -> Any:
    """The ``ClusterConfig`` of the sandbox (``kuber_sandbox``) or of the real cluster."""
    missing = _missing("kuber_exec_anyio")
    if missing is not None:
        pytest.fail(
            f"kuber_config needs a runtime binding ({missing}): install "
            "kuber-exec[testing,trio] or kuber-exec[testing,asyncio]",
            pytrace=False,
        )
    from kuber_exec_anyio import ClusterConfig

    if kuber_real_cluster is not None:
        return ClusterConfig.from_kubeconfig(
            str(kuber_real_cluster.kubeconfig), kuber_real_cluster.context
        )
    sandbox: KuberSandbox = request.getfixturevalue("kuber_sandbox")
    if _marker_options(request, "kuber_sandbox").get("token"):
        return ClusterConfig.from_kubeconfig(str(sandbox.kubeconfig_path), None)
    return ClusterConfig(sandbox.url)


@pytest.fixture
async def kuber_backend(request: pytest.FixtureRequest, kuber_config: Any) -> AsyncIterator[Any]:
    """The running loop's ``KubernetesBackend`` (``kuber_exec_trio`` under trio,
    ``kuber_exec_asyncio`` under asyncio) for ``kuber_config``, open for the test.

    Options come from ``@pytest.mark.kuber_backend(ping_interval=..., pong_timeout=...)``.
    """
    from ._runtime import binding_for_running_loop

    binding = binding_for_running_loop()
    options = _marker_options(request, "kuber_backend")
    async with binding.KubernetesBackend(kuber_config, **options) as backend:
        yield backend


@pytest.fixture
async def kuber_service(request: pytest.FixtureRequest, kuber_backend: Any) -> Any:
    """An ``ExecService`` on ``kuber_backend``; options (``limits``, ``session_limits``,
    ``subprotocols``, ``audit``) from ``@pytest.mark.kuber_service(...)``."""
    from kuber_exec_anyio import ExecService

    return ExecService(kuber_backend, **_marker_options(request, "kuber_service"))
