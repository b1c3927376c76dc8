"""Credentials travel on every path and never show: REST reads, the exec upgrade, logs, reprs.

The sandbox here requires a bearer token; its kubeconfig holds it, loaded by the ``kubernetes``
package's own loaders.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Workspace
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread

pytestmark = pytest.mark.anyio

TOKEN = "kx-secret-token-0123456789abcdef"
REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"),
    deployment="web",
    command=["sh", "-c", "echo authorised"],
)


@pytest.fixture(scope="module")
def guarded() -> Iterator[Sandbox]:
    with run_sandbox_in_thread(demo_cluster(), token=TOKEN) as running:
        yield running


async def test_token_from_the_kubeconfig_is_sent_on_rest_and_websocket(
    adapter: Any, guarded: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    backend = adapter.KubernetesBackend.from_kubeconfig(str(guarded.kubeconfig_path))
    async with backend:
        # The exec upgrade is refused with 401 unless it carries the token too.
        result = await adapter.ExecService(backend).execute(REQUEST)
        shown = [repr(backend), repr(backend.config), str(backend.config)]
    assert result.stdout == b"authorised\n"
    assert "credentials=token" in shown[1]
    for text in [*shown, caplog.text]:
        assert TOKEN not in text


async def test_missing_token_is_the_api_servers_401_without_secrets(
    adapter: Any, guarded: Sandbox
) -> None:
    async with adapter.KubernetesBackend(adapter.ClusterConfig(guarded.url)) as backend:
        with pytest.raises(ExecError) as caught:
            await adapter.ExecService(backend).execute(REQUEST)
    assert caught.value.code is ExecErrorCode.FAILED
    assert "HTTP 401: Unauthorized" in caught.value.message
    assert (caught.value.http_status, caught.value.status_reason) == (401, "Unauthorized")
    assert TOKEN not in str(caught.value)


async def test_wrong_token_on_the_exec_upgrade_is_refused(adapter: Any, guarded: Sandbox) -> None:
    from kuber_exec_core import DEFAULT_SUBPROTOCOLS

    url = guarded.url.replace("http", "ws") + (
        "/api/v1/namespaces/demo/pods/x/exec?command=true&stdout=true"
    )
    with pytest.raises(ExecError) as caught:
        async with adapter.connect_exec(
            url, DEFAULT_SUBPROTOCOLS, headers=[("Authorization", "Bearer wrong")]
        ):
            pass
    assert caught.value.code is ExecErrorCode.FAILED
    assert "401" in caught.value.message
    assert (caught.value.http_status, caught.value.status_reason) == (401, "Unauthorized")
    assert "wrong" not in caught.value.message
    assert "wrong" not in repr(caught.value)
