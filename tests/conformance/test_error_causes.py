"""Connection errors quote their innermost cause, also from inside exception groups (trio's
"all attempts to connect failed" wraps the real error in one), on both runtimes (issue 11,
item 11); a refused exec upgrade carries the server's HTTP status and Status (issue 18)."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kuber_exec_anyio.transport import describe_error
from kuber_exec_core import DEFAULT_SUBPROTOCOLS, ExecError, ExecErrorCode, Subprotocol
from kuber_exec_sandbox import Sandbox

SRC = Path(__file__).resolve().parents[2] / "src"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.anyio
async def test_a_refused_connection_names_its_cause(adapter: Any) -> None:
    port = closed_port()
    with pytest.raises(ExecError) as websocket:
        async with adapter.connect_exec(f"ws://127.0.0.1:{port}/exec", [Subprotocol.V5]):
            pass
    async with adapter.KubernetesBackend(adapter.ClusterConfig(f"http://127.0.0.1:{port}")) as b:
        with pytest.raises(ExecError) as rest:
            await b.get_deployment("demo", "web")
    for message in (websocket.value.message, rest.value.message):
        assert f"[Errno {errno.ECONNREFUSED}]" in message, message
        assert "ConnectionRefusedError" in message, message
        assert "sub-exception" not in message, message


@pytest.mark.anyio
async def test_a_refused_upgrade_carries_the_servers_status(adapter: Any, sandbox: Sandbox) -> None:
    # Through the runtime's own WebSocket library, as an API server refuses it: a NotFound Status.
    url = sandbox.url.replace("http", "ws", 1) + (
        "/api/v1/namespaces/demo/pods/nope/exec?command=true&stdout=true"
    )
    with pytest.raises(ExecError) as caught:
        async with adapter.connect_exec(url, DEFAULT_SUBPROTOCOLS):
            pass
    error = caught.value
    assert (error.code, error.http_status, error.status_reason, error.status_code) == (
        ExecErrorCode.FAILED,
        404,
        "NotFound",
        404,
    )
    assert error.message == 'The exec upgrade failed with HTTP 404: pods "nope" not found'


def test_a_group_is_searched_down_to_its_leaf() -> None:
    # trio.open_tcp_stream: OSError("all attempts ... failed") from a group of the attempts.
    leaf = OSError(errno.EMFILE, "Too many open files")
    group = ExceptionGroup("all attempts to connect to h:1 failed", [leaf])
    try:
        raise OSError("all attempts to connect to h:1 failed") from group
    except OSError as error:
        text = describe_error(error)
    assert text == (
        "OSError: all attempts to connect to h:1 failed / [Errno 24] Too many open files"
    )


# Connects with every descriptor taken: socket() fails with EMFILE inside the runtime's connect.
EXHAUSTED = """
import json, resource, socket, sys
runtime, port = sys.argv[1], int(sys.argv[2])
if runtime == "trio":
    import trio, kuber_exec_trio as adapter
else:
    import asyncio, kuber_exec_asyncio as adapter
from kuber_exec_core import ExecError, Subprotocol

async def main():
    held = []
    try:
        while True:
            held.append(socket.socket())
    except OSError:
        pass
    messages = []
    try:
        async with adapter.connect_exec(f"ws://127.0.0.1:{port}/exec", [Subprotocol.V5]):
            pass
    except ExecError as error:
        messages.append(error.message)
    for held_socket in held:
        held_socket.close()
    print(json.dumps(messages))

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
trio.run(main) if runtime == "trio" else asyncio.run(main())
"""


@pytest.mark.parametrize("runtime", ["trio", "asyncio"])
def test_too_many_open_files_is_quoted(runtime: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", EXHAUSTED, runtime, str(closed_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC)},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    (message,) = json.loads(completed.stdout)
    assert "Too many open files" in message, message
