"""What a current Kubernetes answers that 1.20 cannot: v5.channel.k8s.io end to end.

On 1.30 and later the API server (or, from 1.36, the kubelet it hands the WebSocket to)
negotiates ``v5.channel.k8s.io`` when it is offered first, and v5 is the only protocol that can
close stdin: ``execute(stdin=...)``, ``cat``-style pipes and every upload go through it. Each test
runs on both releases of the tier and asserts what its release does: where 1.20 cannot do a
thing, the test asserts the clear refusal instead.
"""

from __future__ import annotations

import hashlib
import os
from types import ModuleType
from typing import Any

import anyio
import pytest

from .kube import Cluster, negotiated, shell_request
from .wire import Refusal, Session, run

pytestmark = pytest.mark.anyio

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
TEN_MB = 10 * 1024 * 1024


def v5_expected(server_minor: int) -> bool:
    """Whether this release negotiates v5 (on by default since 1.30)."""
    return server_minor >= 30


def shell(adapter: ModuleType, *command: str) -> Any:
    return shell_request(adapter, list(command))


async def collect(session: Any, adapter: ModuleType) -> tuple[bytes, bytes, Any]:
    out, err = bytearray(), bytearray()
    with anyio.fail_after(60):
        async for frame in session:
            if isinstance(frame, adapter.Stdout):
                out += frame.data
            elif isinstance(frame, adapter.Stderr):
                err += frame.data
            else:
                return bytes(out), bytes(err), frame
    pytest.fail(f"the session ended without an exit; output {bytes(out)!r}")


async def test_v5_is_chosen_when_offered_first(
    adapter: ModuleType, workloads: Any, admin_service: Any, server_minor: int
) -> None:
    async with admin_service.open_interactive(
        shell(adapter, "sh", "-c", "exit 0"), tty=False, stdin=True
    ) as session:
        protocol = session.protocol.value
        negotiated(protocol)
        _, _, end = await collect(session, adapter)
    assert protocol == (V5 if v5_expected(server_minor) else V4)
    assert isinstance(end, adapter.Exit)
    assert end.exit_code == 0


async def test_execute_with_stdin_counts_ten_megabytes(
    adapter: ModuleType, workloads: Any, admin_service: Any, server_minor: int
) -> None:
    data = os.urandom(TEN_MB)
    if not v5_expected(server_minor):
        # 1.20 has no v5, so no way to close stdin: refused before the command starts.
        with pytest.raises(adapter.ExecError) as caught:
            await admin_service.execute(shell(adapter, "wc", "-c"), stdin=data)
        assert caught.value.code is adapter.ExecErrorCode.INVALID
        assert V5 in caught.value.message
        return
    result = await admin_service.execute(shell(adapter, "wc", "-c"), stdin=data)
    assert (result.exit_code, result.stdout.split()) == (0, [str(TEN_MB).encode()])


async def test_cat_round_trips_ten_megabytes_of_random_bytes(
    adapter: ModuleType, workloads: Any, admin_service: Any, server_minor: int
) -> None:
    data = os.urandom(TEN_MB)
    limits = adapter.ExecLimits(max_output_cap_bytes=16 << 20, default_output_cap_bytes=16 << 20)
    service = adapter.ExecService(admin_service.backend, limits)
    if not v5_expected(server_minor):
        with pytest.raises(adapter.ExecError) as caught:
            await service.execute(shell(adapter, "cat"), stdin=data)
        assert caught.value.code is adapter.ExecErrorCode.INVALID
        return
    result = await service.execute(shell(adapter, "cat"), stdin=data)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout) == TEN_MB
    assert hashlib.sha256(result.stdout).digest() == hashlib.sha256(data).digest()


async def test_stdin_eof_ends_cat_in_an_interactive_pipe_session(
    adapter: ModuleType, workloads: Any, admin_service: Any, server_minor: int
) -> None:
    async with admin_service.open_interactive(
        shell(adapter, "cat"), tty=False, stdin=True
    ) as session:
        if not v5_expected(server_minor):
            with pytest.raises(adapter.ExecError) as caught:
                await session.send(adapter.Stdin(b"x", eof=True))
            assert caught.value.code is adapter.ExecErrorCode.INVALID
            return
        await session.send(adapter.Stdin(b"first line\n"))
        await session.send(adapter.Stdin(b"second, then the end", eof=True))
        out, err, end = await collect(session, adapter)
    assert out == b"first line\nsecond, then the end"
    assert (err, type(end), end.exit_code) == (b"", adapter.Exit, 0)


@pytest.mark.parametrize(
    ("script", "code"),
    [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", 137), ("kill -TERM $$", 143)],
)
async def test_exit_codes_and_signals(
    adapter: ModuleType, workloads: Any, admin_service: Any, script: str, code: int
) -> None:
    result = await admin_service.execute(shell(adapter, "sh", "-c", script))
    assert result.exit_code == code


def wire(cluster: Cluster, protocols: list[str], **kwargs: Any) -> Session:
    answer = run(cluster, **kwargs, protocols=protocols)
    assert isinstance(answer, Session), answer
    return answer


def test_the_server_never_sends_the_v5_close_signal(
    cluster: Cluster, workloads: Any, server_minor: int
) -> None:
    if not v5_expected(server_minor):
        # No v5 path at all: an offer of v5 alone is refused with an empty 403.
        answer = run(cluster, ["true"], protocols=[V5])
        assert isinstance(answer, Refusal)
        assert (answer.status, answer.body) == (403, b"")
        return
    # stdin, then the client's close of stdin ([255, 0]); cat echoes and ends.
    session = wire(
        cluster,
        [V5, V4],
        command=["sh", "-c", "cat; echo done >&2; exit 4"],
        stdin=[b"\x00hello", b"\xff\x00"],
    )
    assert session.subprotocol == V5
    channels = {channel for channel, _ in session.messages}
    assert 255 not in channels, session.messages
    assert channels <= {1, 2, 3}, session.messages
    assert (session.channel(1), session.channel(2)) == (b"hello", b"done\n")
    status = session.status
    assert (status["status"], status["reason"]) == ("Failure", "NonZeroExitCode")
    assert {"reason": "ExitCode", "message": "4"} in status["details"]["causes"]
    assert (session.close_code, session.server_closed_first) == (1000, True)
