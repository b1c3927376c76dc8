"""scripts/realcluster/peers.py, the Python peers' measurements, without a cluster.

Its command line and the "not supported" answer run on the test venv's interpreter (no peer
installed there: a stand-in lightkube without exec is put on the path). Each peer's own exec
runs on the sandbox (loopback) when the peers' venv exists (``sh
scripts/realcluster/peers-venv.sh`` makes it, from the package registry: ``.ci/run`` does, ``make
test`` does not); without it they skip saying so locally, and fail under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuber_exec_sandbox import demo_cluster, run_sandbox_in_thread, write_kubeconfig
from support.sandbox import ready_web_pod

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO / "scripts" / "realcluster" / "peers.py"
PEERS_VENV = Path(
    os.environ.get("KUBER_PEERS_VENV", Path.home() / ".cache" / "kuber-exec" / "peers-venv")
)
PEERS_PYTHON = PEERS_VENV / "bin" / "python"

ALL_PEERS = (
    "official",
    "official-aio",
    "kubernetes-asyncio",
    "kr8s",
    "kubex",
    "kubex-httpx",
    "kubex-run",
    "lightkube",
    "lightkube-async",
)
TARGET = ["--namespace", "demo", "--pod", "web-0", "--kubeconfig", "/nonexistent/kubeconfig"]


def peers(
    *args: str, python: str = sys.executable, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(PEERS), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: --peer, --kind"),
        (["--peer", "nope", "--kind", "latency", *TARGET], "argument --peer: invalid choice"),
        (["--peer", "kr8s", "--kind", "speed", *TARGET], "argument --kind: invalid choice"),
        (["--peer", "kr8s", "--kind", "throughput", *TARGET], "needs --bytes N"),
        (["--peer", "kr8s", "--kind", "throughput", "--bytes", "0", *TARGET], "needs --bytes N"),
        (["--peer", "kr8s", "--kind", "latency", "--iterations", "0", *TARGET], "--iterations"),
        (["--peer", "kr8s", "--kind", "latency", "--bytes", "x", *TARGET], "invalid int value"),
        (["--peer", "kr8s", "--kind", "latency", "--namespace", "demo"], "--pod, --kubeconfig"),
    ],
)
def test_bad_arguments_are_refused_before_any_peer_is_imported(
    args: list[str], message: str
) -> None:
    done = peers(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert done.stdout == ""


@pytest.fixture
def lightkube_without_exec(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``lightkube`` is a stand-in of a release before exec (0.15)."""
    package = tmp_path / "lightkube"
    package.mkdir()
    (package / "__init__.py").write_text("class Client: ...\n\n\nclass AsyncClient: ...\n")
    info = tmp_path / "lightkube-0.15.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lightkube\nVersion: 0.15.0\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


@pytest.mark.parametrize("peer", ["lightkube", "lightkube-async"])
@pytest.mark.parametrize("kind", ["throughput", "latency"])
def test_a_lightkube_without_exec_is_a_row_not_supported(
    lightkube_without_exec: dict[str, str], peer: str, kind: str
) -> None:
    done = peers(
        "--peer", peer, "--kind", kind, "--bytes", "1000", *TARGET, env=lightkube_without_exec
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["supported"] is False
    assert answer["value"] is None
    assert answer["peer"] == peer
    assert answer["kind"] == kind
    assert answer["versions"]["lightkube"] == "0.15.0"
    assert answer["notes"] == ["lightkube 0.15.0 has no exec (pods/exec came in lightkube 1.0)"]


def test_a_missing_peer_is_a_failure_not_a_row() -> None:
    """Not installed is not "not supported": the measurement fails, naming what is missing."""
    done = peers("--peer", "kubex", "--kind", "latency", *TARGET)  # the test venv has no Kubex
    assert done.returncode == 1
    assert "No module named 'kubex'" in done.stderr
    assert done.stdout == ""


@pytest.fixture(scope="module")
def sandbox_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The demo sandbox (loopback) and the arguments that name its ready web pod."""
    if not PEERS_PYTHON.exists():
        reason = (
            f"the peers' venv {PEERS_VENV} is absent: sh scripts/realcluster/peers-venv.sh makes "
            "it (needs the package registry)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    kubeconfig = tmp_path_factory.mktemp("peers") / "kubeconfig"
    cluster = demo_cluster()
    with run_sandbox_in_thread(cluster) as sandbox:
        write_kubeconfig(kubeconfig, sandbox.url)
        pod = ready_web_pod(cluster)
        yield ["--namespace", "demo", "--pod", pod, "--container", "app",
               "--kubeconfig", str(kubeconfig)]  # fmt: skip


@pytest.mark.parametrize("peer", ALL_PEERS)
def test_each_peer_receives_every_byte(sandbox_target: list[str], peer: str) -> None:
    """An odd size (30 whole 32 KiB messages and a short one): the count is asserted inside."""
    done = peers(
        "--peer", peer, "--kind", "throughput", "--bytes", "1000003", *sandbox_target,
        python=str(PEERS_PYTHON),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["supported"] is True
    assert answer["bytes"] == 1000003
    assert answer["unit"] == "bytes/s"
    assert answer["value"] > 0
    assert all(answer["versions"].values()), answer["versions"]


@pytest.mark.parametrize("peer", ALL_PEERS)
def test_each_peer_times_true(sandbox_target: list[str], peer: str) -> None:
    done = peers(
        "--peer", peer, "--kind", "latency", "--iterations", "3", *sandbox_target,
        python=str(PEERS_PYTHON),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["iterations"] == 3
    assert answer["unit"] == "s"
    assert 0 < answer["value"] < 10


@pytest.mark.parametrize("peer", ALL_PEERS)
def test_a_failed_exec_is_a_failure_not_a_figure(sandbox_target: list[str], peer: str) -> None:
    """A container the pod does not have: the server refuses the exec; the peer's error ends
    the measurement (exit 1, nothing on stdout), whatever form the peer gives it."""
    target = [*sandbox_target[:-4], "--container", "nope", *sandbox_target[-2:]]
    done = peers(
        "--peer", peer, "--kind", "latency", "--iterations", "1", *target,
        python=str(PEERS_PYTHON),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert done.stdout == ""
    assert "Traceback" in done.stderr
