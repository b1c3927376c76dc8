"""The asyncio web-app example, served for real and queried over HTTP.

The sandbox runs on trio in another thread; the app runs on this test's asyncio loop.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from kuber_exec_asyncio import ClusterConfig, Workspace
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread

EXAMPLE = Path(__file__).parents[2] / "examples" / "asyncio_http_exec.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("asyncio_http_exec", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster()) as running:
        yield running


async def query(sandbox: Sandbox, target: str) -> httpx.Response:
    example = load_example()
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(
        example.serve(
            ClusterConfig(sandbox.url),
            Workspace(project="demo", uid="demo-uid"),
            "127.0.0.1",
            0,
            listening.set_result,
        )
    )
    try:
        port = await asyncio.wait_for(listening, 10)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            return await client.get(target)
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


def test_streams_a_commands_output_and_exit_status(sandbox: Sandbox) -> None:
    response = asyncio.run(
        query(sandbox, "/exec?deployment=web&command=sh&command=-c&command=echo+hi%3B+exit+3")
    )
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.text == "hi\n\n[exit status 3]\n"


def test_another_workspaces_deployment_is_forbidden(sandbox: Sandbox) -> None:
    response = asyncio.run(query(sandbox, "/exec?deployment=other&command=true"))
    assert response.status_code == 403
    assert response.text == (
        "EXEC_TARGET_FORBIDDEN: Deployment other is not owned by this workspace\n"
    )


def test_invalid_request_is_400(sandbox: Sandbox) -> None:
    response = asyncio.run(query(sandbox, "/exec?deployment=web"))
    assert response.status_code == 400
    assert response.text == "EXEC_INVALID: Command is required\n"
