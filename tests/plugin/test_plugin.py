"""The pytest plugin itself: its entry point, its fixtures on each runtime, its markers, its
options for a real cluster, and staying harmless where the testing extra is missing.

Runs of pytest inside this one use ``pytester`` (in process, a fresh config each); the checks
that need a clean interpreter (what importing the plugin imports, a missing extra) run Python in
a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from typing import Any

import anyio
import pytest

import kuber_exec_asyncio
import kuber_exec_trio
from kuber_exec_core import ExecLimits, Stdout, Subprotocol
from kuber_exec_pytest import KuberSandbox, KuberTarget
from kuber_exec_sandbox import PodSpec

#: What a real-cluster run of the fixtures executes (in a pytester project).
INNER_TESTS = """
import pytest

@pytest.mark.trio
async def test_trio(kuber_service, kuber_target):
    result = await kuber_service.execute(kuber_target.request("sh", "-c", "echo $HOSTNAME"))
    assert result.stdout == b"real-pod\\n"

@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio(kuber_service, kuber_target):
    result = await kuber_service.execute(kuber_target.request("echo", "asyncio"))
    assert result.stdout == b"asyncio\\n"

def test_shapes_the_sandbox(kuber_sandbox):
    kuber_sandbox.add_workspace()
"""

INNER_INI = """
[pytest]
filterwarnings = error
addopts = -p no:cacheprovider
"""


def test_the_plugin_is_a_pytest11_entry_point() -> None:
    (plugin,) = [ep for ep in entry_points(group="pytest11") if ep.name == "kuber_exec"]
    assert plugin.value == "kuber_exec_pytest.plugin"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_loading_the_plugin_imports_no_runtime_and_no_sandbox() -> None:
    ran = run_python(
        """
        import sys
        import kuber_exec_pytest.plugin
        heavy = {"trio", "anyio", "httpx", "websockets", "trio_websocket", "h11", "wsproto",
                 "kubernetes", "hypothesis", "kuber_exec_sandbox", "kuber_exec_anyio",
                 "kuber_exec_trio", "kuber_exec_asyncio"}
        print(sorted({name.split(".")[0] for name in sys.modules} & heavy))
        """
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "[]"), ran.stderr


def test_without_the_testing_extra_the_plugin_is_harmless_and_says_what_to_install(
    tmp_path: Any,
) -> None:
    # An install without the sandbox's dependencies: importing them fails. (The trio, anyio and
    # hypothesis plugins are off: they would not be installed either.)
    (tmp_path / "test_user.py").write_text(
        "def test_unrelated():\n    assert True\n\n"
        "def test_wants_the_sandbox(kuber_sandbox):\n    pass\n"
    )
    ran = run_python(
        f"""
        import sys
        BLOCKED = {{"trio", "h11", "wsproto", "kuber_exec_sandbox", "anyio", "httpx"}}

        class Missing:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"No module named {{name!r}}")
                return None

        sys.meta_path.insert(0, Missing())
        import pytest
        sys.exit(pytest.main([{str(tmp_path)!r}, "-q", "-p", "no:cacheprovider",
                              "-p", "no:trio", "-p", "no:anyio",
                              "-p", "no:hypothesispytest"]))
        """
    )
    assert "1 passed, 1 error" in ran.stdout, ran.stdout + ran.stderr
    assert "During handling" not in ran.stdout  # one clear message, no chained traceback
    assert "install kuber-exec[testing] with a runtime" in ran.stdout
    assert "pip install 'kuber-exec[testing,trio]'" in ran.stdout


# -- the fixtures on each runtime ----------------------------------------------------------------


@pytest.mark.trio
async def test_under_pytest_trio_the_backend_is_the_trio_bindings(
    kuber_backend: Any, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    assert type(kuber_backend) is kuber_exec_trio.KubernetesBackend
    assert kuber_service.backend is kuber_backend
    result = await kuber_service.execute(kuber_target.request("echo", "trio"))
    assert result.stdout == b"trio\n"


@pytest.mark.anyio
async def test_under_anyio_the_backend_follows_anyio_backend(
    anyio_backend: str, kuber_backend: Any, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    binding = kuber_exec_trio if anyio_backend == "trio" else kuber_exec_asyncio
    assert type(kuber_backend) is binding.KubernetesBackend
    result = await kuber_service.execute(kuber_target.request("echo", anyio_backend))
    assert result.stdout == f"{anyio_backend}\n".encode()


def test_the_default_target_is_one_ready_pod(
    kuber_sandbox: KuberSandbox, kuber_target: KuberTarget
) -> None:
    assert (kuber_target.workspace.project, kuber_target.workspace.uid) == (
        "kuber-test",
        "kuber-test-uid",
    )
    assert kuber_target.deployment == "app"
    (pod,) = kuber_sandbox.pods(kuber_target)
    assert pod.ready
    request = kuber_target.request("ls", "-l", container="app")
    assert (request.command, request.container) == (("ls", "-l"), "app")


def test_each_test_gets_a_fresh_sandbox(kuber_sandbox: KuberSandbox) -> None:
    # Run under both orders by the parametrized tests above: nothing is left from them.
    assert kuber_sandbox.cluster.namespaces == {}
    assert kuber_sandbox.live_processes == 0


@pytest.mark.anyio
async def test_workspaces_take_pod_states_containers_and_env(
    kuber_sandbox: KuberSandbox, kuber_service: Any
) -> None:
    target = kuber_sandbox.add_workspace(
        "shop",
        project="team-a",
        uid="uid-a",
        pods=[PodSpec(name="z-ready"), PodSpec(name="a-starting", ready=False)],
        containers=("web", "sidecar"),
    )
    assert [pod.name for pod in kuber_sandbox.pods(target)] == ["a-starting", "z-ready"]
    result = await kuber_service.execute(
        target.request("sh", "-c", "echo $HOSTNAME", container="sidecar")
    )
    assert result.stdout == b"z-ready\n"  # the ready pod, though it sorts last
    with_env = kuber_sandbox.add_workspace("env", project="team-a", uid="uid-a", env={"X": "1"})
    assert (await kuber_service.execute(with_env.request("sh", "-c", "echo $X"))).stdout == b"1\n"
    with pytest.raises(KeyError, match="no Deployment team-a/missing"):
        kuber_sandbox.pods(KuberTarget(target.workspace, "missing"))


@pytest.mark.anyio
async def test_wait_processes_reaped_follows_the_server(
    kuber_sandbox: KuberSandbox, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    command = kuber_target.request("sh", "-c", "echo up; exec cat")
    async with kuber_service.open_interactive(command, tty=False) as session:
        with anyio.fail_after(10):
            assert await session.__anext__() == Stdout(b"up\n")  # it runs
        assert kuber_sandbox.live_processes == 1
    with anyio.fail_after(10):
        await kuber_sandbox.wait_processes_reaped()
    assert kuber_sandbox.live_processes == 0


# -- markers -------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.kuber_sandbox(offer_v5=False)
@pytest.mark.kuber_service(limits=ExecLimits(interactive_queue_capacity=8))
async def test_markers_pass_options_to_the_sandbox_and_the_service(
    kuber_service: Any, kuber_target: KuberTarget
) -> None:
    assert kuber_service.limits.interactive_queue_capacity == 8
    async with kuber_service.open_interactive(kuber_target.request("true"), tty=False) as session:
        assert session.protocol is Subprotocol.V4  # a pre-1.30 cluster


@pytest.mark.anyio
@pytest.mark.kuber_sandbox(token="s3cret-token")
async def test_a_sandbox_with_a_token_is_reached_through_its_kubeconfig(
    kuber_config: Any, kuber_service: Any, kuber_target: KuberTarget
) -> None:
    assert kuber_config.has_credentials
    assert "s3cret" not in repr(kuber_config)
    assert (await kuber_service.execute(kuber_target.request("echo", "ok"))).stdout == b"ok\n"


def test_markers_take_keywords_only(pytester: pytest.Pytester) -> None:
    pytester.makeini(INNER_INI)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.kuber_sandbox("positional")
        def test_it(kuber_sandbox):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.kuber_sandbox takes keyword arguments only*"])


# -- a real cluster ------------------------------------------------------------------------------


@pytest.fixture
def real_cluster(kuber_sandbox: KuberSandbox) -> KuberSandbox:
    """A sandbox playing the real cluster: reached only through its kubeconfig, with a token."""
    kuber_sandbox.add_workspace(
        "web", project="prod", uid="prod-uid", pods=[PodSpec(name="real-pod")]
    )
    return kuber_sandbox


@pytest.mark.kuber_sandbox(token="real-token")
def test_kuber_kubeconfig_points_the_fixtures_at_a_real_cluster(
    pytester: pytest.Pytester, real_cluster: KuberSandbox
) -> None:
    pytester.makeini(INNER_INI)
    pytester.makepyfile(INNER_TESTS)
    result = pytester.runpytest(
        f"--kuber-kubeconfig={real_cluster.kubeconfig_path}",
        "--kuber-target=prod/web/prod-uid",
        "-rs",
    )
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        ["*needs the kuber-exec sandbox (its cluster model and faults); --kuber-kubeconfig*"]
    )
    # Nothing ran in a sandbox of its own: the inner tests' commands ran here.
    assert real_cluster.cluster.namespaces.keys() == {"prod"}


@pytest.mark.kuber_sandbox(token="real-token")
def test_the_environment_can_name_the_real_cluster(
    pytester: pytest.Pytester, real_cluster: KuberSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBER_EXEC_KUBECONFIG", str(real_cluster.kubeconfig_path))
    monkeypatch.setenv("KUBER_EXEC_TARGET", "prod/web/prod-uid")
    pytester.makeini(INNER_INI)
    pytester.makepyfile(INNER_TESTS)
    pytester.runpytest().assert_outcomes(passed=2, skipped=1)


@pytest.mark.kuber_sandbox(token="real-token")
def test_without_a_target_tests_that_need_one_skip(
    pytester: pytest.Pytester, real_cluster: KuberSandbox
) -> None:
    pytester.makeini(INNER_INI)
    pytester.makepyfile(INNER_TESTS)
    result = pytester.runpytest(f"--kuber-kubeconfig={real_cluster.kubeconfig_path}", "-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(
        ["*needs --kuber-target NAMESPACE/DEPLOYMENT/WORKSPACE_UID on a real cluster*"]
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--kuber-kubeconfig=/nonexistent/config"],
         "*--kuber-kubeconfig: no such file: /nonexistent/config*"),
        (["--kuber-kubeconfig={config}", "--kuber-target=prod/web"],
         "*--kuber-target must be NAMESPACE/DEPLOYMENT/WORKSPACE_UID, not 'prod/web'*"),
    ],
)  # fmt: skip
def test_bad_real_cluster_options_stop_the_run(
    pytester: pytest.Pytester, arguments: list[str], message: str
) -> None:
    config = pytester.makefile(".yaml", kubeconfig="apiVersion: v1\n")
    pytester.makeini(INNER_INI)
    pytester.makepyfile(INNER_TESTS)
    result = pytester.runpytest(*(argument.format(config=config) for argument in arguments))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
