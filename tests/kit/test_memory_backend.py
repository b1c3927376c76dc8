"""The testing kit: MemoryBackend under both adapters, driven by the core's strategies.

This is also the worked example of docs/testing.md: a property test of exec handling, with no
cluster and no sockets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import kuber_exec_asyncio.testing
import kuber_exec_trio.testing
from kuber_exec_core import Error, ExecError, ExecResult, Exit, Stdin, Subprotocol
from kuber_exec_core.kube import ApiGet, ApiResponse
from kuber_exec_core.testing import (
    DeploymentScenario,
    ServerScript,
    deployment_scenarios,
    server_scripts,
)

ADAPTERS: dict[str, tuple[Any, Any, Callable[[Callable[[], Coroutine[Any, Any, Any]]], Any]]] = {
    "trio": (kuber_exec_trio, kuber_exec_trio.testing, trio.run),
    "asyncio": (kuber_exec_asyncio, kuber_exec_asyncio.testing, lambda f: asyncio.run(f())),
}

v5_or_v4_scripts = st.sampled_from([Subprotocol.V5, Subprotocol.V4]).flatmap(server_scripts)


async def execute(adapter: Any, backend: Any, scenario: DeploymentScenario) -> Any:
    try:
        return await adapter.ExecService(backend).execute(scenario.request)
    except ExecError as error:
        return error


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@given(scenario=deployment_scenarios(), script=v5_or_v4_scripts)
def test_execute_outcome_is_the_scenarios_and_the_scripts(
    name: str, scenario: DeploymentScenario, script: ServerScript
) -> None:
    adapter, testing, run = ADAPTERS[name]
    backend = testing.MemoryBackend(
        scenario.respond,
        script.messages,
        subprotocols=[script.subprotocol],
        clean_close=script.clean_close,
    )
    outcome = run(lambda: execute(adapter, backend, scenario))
    if scenario.expected_error is not None:
        assert isinstance(outcome, ExecError)
        assert (outcome.code, outcome.message) == scenario.expected_error
        assert backend.calls == []
        return
    assert [call.target for call in backend.calls] == [scenario.expected_target]
    if isinstance(script.terminal, Exit):
        assert isinstance(outcome, ExecResult)
        assert (outcome.stdout, outcome.stderr) == (script.stdout, script.stderr)
        assert outcome.exit_code == script.terminal.exit_code
    else:
        assert isinstance(script.terminal, Error)
        assert isinstance(outcome, ExecError)
        assert (outcome.code, outcome.message) == (script.terminal.code, script.terminal.message)


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_sent_messages_are_recorded_and_v4_refuses_eof(name: str) -> None:
    adapter, testing, run = ADAPTERS[name]
    scenario_respond = _single_pod_cluster()
    backend = testing.MemoryBackend(
        scenario_respond, [b"\x01", b"\x01hi", b'\x03{"metadata":{},"status":"Success"}']
    )
    request = adapter.ExecRequest(
        workspace=adapter.Workspace(project="demo", uid="demo-uid"),
        deployment="web",
        command=["cat"],
    )

    async def main() -> list[Any]:
        service = adapter.ExecService(backend)
        async with service.open_interactive(request, tty=False) as session:
            await session.send(Stdin(b"abc", eof=True))
            return [frame async for frame in session]

    frames = run(main)
    assert frames[-1] == Exit(0)
    assert backend.calls[0].sent == [b"\x00abc", b"\xff\x00"]
    v4 = testing.MemoryBackend(scenario_respond, [], subprotocols=[Subprotocol.V4])

    async def eof_on_v4() -> ExecError:
        service = adapter.ExecService(v4)
        async with service.open_interactive(request, tty=False) as session:
            with pytest.raises(ExecError) as caught:
                await session.send(Stdin(b"", eof=True))
            return caught.value

    assert "v5.channel.k8s.io" in run(eof_on_v4).message


def _single_pod_cluster() -> Callable[[Any], Any]:
    deployment = {
        "metadata": {
            "name": "web",
            "uid": "d-uid",
            "labels": {
                "app.kubernetes.io/managed-by": "kuber",
                "kuber.dev/workspace-uid": "demo-uid",
            },
        },
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [{"name": "app"}]}},
        },
    }
    owner = {"apiVersion": "apps/v1", "controller": True}
    replica_set = {
        "metadata": {
            "name": "web-rs",
            "uid": "rs-uid",
            "ownerReferences": [{**owner, "kind": "Deployment", "name": "web", "uid": "d-uid"}],
        }
    }
    pod = {
        "metadata": {
            "name": "web-1",
            "uid": "p-uid",
            "labels": {"app": "web"},
            "ownerReferences": [{**owner, "kind": "ReplicaSet", "name": "web-rs", "uid": "rs-uid"}],
        },
        "spec": {"containers": [{"name": "app"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "app", "ready": True, "state": {"running": {}}}],
        },
    }

    def respond(request: ApiGet) -> ApiResponse:
        bodies = {
            "/apis/apps/v1/namespaces/demo/deployments/web": deployment,
            "/apis/apps/v1/namespaces/demo/replicasets/web-rs": replica_set,
            "/api/v1/namespaces/demo/pods": {"items": [pod], "metadata": {}},
        }
        body = bodies.get(request.path)
        if body is None:
            return ApiResponse(status=404, body=b"{}")
        return ApiResponse(status=200, body=json.dumps(body).encode())

    return respond
