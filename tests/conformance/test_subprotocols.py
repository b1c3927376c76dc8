"""The offer is the user's (``ExecService(subprotocols=...)``): a server or proxy that speaks only
``v4.base64.channel.k8s.io``, ``base64.channel.k8s.io`` or ``channel.k8s.io`` can be used, each
with its own semantics (issue 11, item 2). The sandbox serves only the one protocol."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kuber_exec_core import (
    Error,
    ExecError,
    ExecErrorCode,
    Exit,
    Stdin,
    Stdout,
    Subprotocol,
)
from kuber_exec_sandbox import Sandbox, demo_cluster, run_sandbox_in_thread
from support import backend_for
from support import demo_request as run

pytestmark = pytest.mark.anyio

ONLY = [Subprotocol.V4_BASE64, Subprotocol.BASE64, Subprotocol.LEGACY, Subprotocol.V4]


@pytest.fixture(scope="module", params=ONLY, ids=[p.value for p in ONLY])
def only(request: pytest.FixtureRequest) -> Iterator[tuple[Subprotocol, Sandbox]]:
    protocol: Subprotocol = request.param
    with run_sandbox_in_thread(demo_cluster(), offer_v5=False, subprotocols=[protocol]) as box:
        yield protocol, box


async def test_the_default_offer_is_refused_by_such_a_server(
    adapter: Any, only: tuple[Subprotocol, Sandbox]
) -> None:
    protocol, sandbox = only
    async with backend_for(adapter, sandbox) as backend:
        if protocol is Subprotocol.V4:
            # The default offer (v5, v4) includes it: the server's own protocol is chosen.
            result = await adapter.ExecService(backend).execute(run("true"))
            assert result.exit_code == 0
            return
        with pytest.raises(ExecError) as caught:
            await adapter.ExecService(backend).execute(run("true"))
    assert caught.value.code is ExecErrorCode.FAILED
    assert "supports none of the offered exec subprotocols" in caught.value.message


async def test_offering_the_servers_protocol_runs_commands(
    adapter: Any, only: tuple[Subprotocol, Sandbox]
) -> None:
    protocol, sandbox = only
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, subprotocols=[Subprotocol.V5, protocol.value])
        assert service.subprotocols == (Subprotocol.V5, protocol)
        service = adapter.ExecService(backend, subprotocols=[protocol])
        result = await service.execute(run("sh", "-c", "printf 'out\\377'; printf err >&2"))
        assert (result.exit_code, result.stdout, result.stderr) == (0, b"out\xff", b"err")
        if protocol.has_structured_status:
            failed = await service.execute(run("sh", "-c", "exit 3"))
            assert failed.exit_code == 3
        else:
            # Pre-v4: success is a clean close without a status; failure is text, no exit code.
            with pytest.raises(ExecError) as caught:
                await service.execute(run("sh", "-c", "exit 3"))
            assert caught.value.code is ExecErrorCode.FAILED
            assert "3" in caught.value.message


async def test_stdin_eof_stays_refused_where_the_protocol_cannot_signal_it(
    adapter: Any, only: tuple[Subprotocol, Sandbox]
) -> None:
    protocol, sandbox = only
    async with backend_for(adapter, sandbox) as backend:
        service = adapter.ExecService(backend, subprotocols=[protocol])
        before = sandbox.live_processes
        with pytest.raises(ExecError) as refused:
            await service.execute(run("cat"), stdin=b"data")
        assert refused.value.code is ExecErrorCode.INVALID
        assert "needs v5.channel.k8s.io" in refused.value.message
        assert sandbox.live_processes == before  # nothing was started
        # The shell waits for a second line, so the refused EOF meets a running session (a
        # session that has already ended refuses every frame as EXEC_ABORTED first, as the seed
        # does); the second line, not an EOF, is what ends it.
        script = "read x; echo got $x; read y"
        async with service.open_interactive(run("sh", "-c", script), tty=False) as s:
            assert s.protocol is protocol
            await s.send(Stdin(b"line\n"))
            with pytest.raises(ExecError) as eof:
                await s.send(Stdin(b"", eof=True))
            assert eof.value.code is ExecErrorCode.INVALID
            assert "v5.channel.k8s.io" in eof.value.message
            await s.send(Stdin(b"bye\n"))
            frames = [frame async for frame in s]
        assert frames[0] == Stdout(b"got line\n")
        assert frames[-1] == Exit(0)
        assert not any(isinstance(f, Error) for f in frames)


@pytest.mark.parametrize(
    ("offer", "message"),
    [
        ([], "subprotocols must be a non-empty sequence"),
        ("v5.channel.k8s.io", "subprotocols must be a non-empty sequence"),
        (["v6.channel.k8s.io"], "unknown exec subprotocol 'v6.channel.k8s.io'"),
        ([Subprotocol.V4, "v4.channel.k8s.io"], "offered twice"),
    ],
)
async def test_a_bad_offer_is_invalid(
    adapter: Any, sandbox: Sandbox, offer: Any, message: str
) -> None:
    async with backend_for(adapter, sandbox) as backend:
        with pytest.raises(ExecError) as caught:
            adapter.ExecService(backend, subprotocols=offer)
    assert caught.value.code is ExecErrorCode.INVALID
    assert message in caught.value.message
