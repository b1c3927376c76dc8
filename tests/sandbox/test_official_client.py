"""The official ``kubernetes`` Python client against the sandbox, on both v5 and v4.

The client offers ``v5.channel.k8s.io, v4.channel.k8s.io`` by default; v4 is negotiated either
by a pre-1.30 sandbox (``offer_v5=False``) or by overriding the offer through the generated
API's ``_headers={"sec-websocket-protocol": ...}``. These tests are synchronous (the client
blocks), so the sandbox runs in a background thread.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.stream import stream

from kuber_exec_sandbox import Sandbox, run_sandbox_in_thread
from support.sandbox import ready_web_pod

# (sandbox offers v5, client offer override, expected subprotocol)
MODES = [
    pytest.param((True, None, "v5.channel.k8s.io"), id="v5"),
    pytest.param((False, None, "v4.channel.k8s.io"), id="v4-old-cluster"),
    pytest.param((True, "v4.channel.k8s.io", "v4.channel.k8s.io"), id="v4-by-header"),
]
ALL_BYTES = bytes(range(256))


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> Iterator[tuple[Sandbox, dict[str, Any], str]]:
    offer_v5, offer, expected = request.param
    with run_sandbox_in_thread(offer_v5=offer_v5) as sandbox:
        extra: dict[str, Any] = {}
        if offer is not None:
            extra["_headers"] = {"sec-websocket-protocol": offer}
        yield sandbox, extra, expected


@contextmanager
def api_for(sandbox: Sandbox) -> Iterator[Any]:
    new_client: Any = config.new_client_from_config  # untyped package
    with new_client(str(sandbox.kubeconfig_path)) as api_client:
        yield client.CoreV1Api(api_client)


@contextmanager
def run(
    sandbox: Sandbox, extra: dict[str, Any], command: list[str], **flags: bool
) -> Iterator[Any]:
    """A finished (or, with stdin, a started) exec; closed on exit."""
    with api_for(sandbox) as api:
        response = stream(
            api.connect_get_namespaced_pod_exec,
            ready_web_pod(sandbox.cluster),
            "demo",
            command=command,
            stdin=flags.get("stdin", False),
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
            **extra,
        )
        try:
            if not flags.get("stdin", False):
                response.run_forever(timeout=30)
            yield response
        finally:
            response.close()
            # The client's close() skips closing the socket when the server already closed the
            # WebSocket (which servers do right after the status); shutdown() always closes it.
            response.sock.shutdown()


def test_stdout_stderr_and_exit_code(mode: tuple[Sandbox, dict[str, Any], str]) -> None:
    sandbox, extra, expected = mode
    with run(sandbox, extra, ["sh", "-c", "printf out; printf err >&2; exit 5"]) as response:
        assert response.subprotocol == expected
        assert response.read_stdout() == b"out"
        assert response.read_stderr() == b"err"
        assert response.returncode == 5


def test_success_is_exit_code_zero(mode: tuple[Sandbox, dict[str, Any], str]) -> None:
    sandbox, extra, _ = mode
    with run(sandbox, extra, ["true"]) as response:
        assert response.returncode == 0


def test_binary_output_has_every_byte_value(mode: tuple[Sandbox, dict[str, Any], str]) -> None:
    sandbox, extra, _ = mode
    # printf's octal escapes produce every byte, NUL and invalid UTF-8 included.
    octal = "".join(f"\\{b:03o}" for b in ALL_BYTES)
    with run(sandbox, extra, ["printf", octal]) as response:
        assert response.read_stdout() == ALL_BYTES
        assert response.returncode == 0


# The client never closes the WebSocket of a preloaded call (its own leak): the socket's
# ResourceWarning is collected here, inside this test, and ignored.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_preloaded_call_returns_the_output(mode: tuple[Sandbox, dict[str, Any], str]) -> None:
    sandbox, extra, _ = mode
    with api_for(sandbox) as api:
        output = stream(
            api.connect_get_namespaced_pod_exec,
            ready_web_pod(sandbox.cluster),
            "demo",
            command=["echo", "hello"],
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            **extra,
        )
    gc.collect()
    assert output == "hello\n"


def test_v5_stdin_close_channel_gives_eof() -> None:
    with (
        run_sandbox_in_thread() as sandbox,
        run(sandbox, {}, ["sh", "-c", "cat; echo END"], stdin=True) as response,
    ):
        assert response.subprotocol == "v5.channel.k8s.io"
        response.write_stdin(ALL_BYTES)
        response.close_channel(0)
        response.run_forever(timeout=30)
        assert response.read_stdout() == ALL_BYTES + b"END\n"
        assert response.returncode == 0
