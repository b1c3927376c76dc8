"""The testing kit: MemoryBackend under both adapters, driven by the core's strategies.

This is also the worked example of docs/testing.md: a property test of exec handling, with no
cluster and no sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import kuber_exec_asyncio.testing
import kuber_exec_trio.testing
from kuber_exec_core import Error, ExecError, ExecResult, Exit, Stdin, Subprotocol
from kuber_exec_core.kube import TargetRefusal
from kuber_exec_core.testing import (
    DeploymentScenario,
    ServerScript,
    deployment_scenarios,
    frame_message,
    server_scripts,
)
from support import single_pod_cluster

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
    if scenario.expected_refusal is not None:
        # The code and which refusal it was, not the wording.
        assert isinstance(outcome, ExecError)
        assert outcome.code == scenario.expected_refusal.code
        assert TargetRefusal.of(outcome, scenario.request) is scenario.expected_refusal
        assert backend.calls == []
        return
    targets = [call.target for call in backend.calls]
    assert targets[0] == scenario.expected_target
    if len(targets) > 1:
        # A command that could not start (the runtime's InternalError, 500, before any output)
        # is retried once on another pod (docs/cleanup.md: a rolling update fails no exec).
        assert len(targets) == 2
        assert isinstance(script.terminal, Error)
        assert "Internal error" in script.terminal.message
        assert targets[1].pod != targets[0].pod
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
    scenario_respond = single_pod_cluster()
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


class _NeverClosing:
    """A scripted connection whose server, after its script, neither sends nor closes."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.subprotocol = connection.subprotocol
        self.closed_cleanly = False
        self.close_reason = None

    async def send_message(self, message: Any) -> None:
        await self._connection.send_message(message)

    async def receive_message(self) -> Any:
        message = await self._connection.receive_message()
        if message is None:
            await anyio.sleep_forever()
        return message


def _never_closing(backend: Any) -> Any:
    original = backend.exec

    @asynccontextmanager
    async def exec_(*args: Any) -> AsyncIterator[Any]:
        async with original(*args) as connection:
            yield _NeverClosing(connection)

    backend.exec = exec_
    return backend


STATUS = b'{"metadata":{},"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"4"}]}}'  # noqa: E501


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@pytest.mark.parametrize(
    ("subprotocol", "status", "outcome"),
    [
        # A whole Status in pieces: the exit code, without waiting for a close.
        (Subprotocol.V5, [STATUS[:17], STATUS[17:60], STATUS[60:]], 4),
        (Subprotocol.V4, [STATUS[:1], STATUS[1:]], 4),
        (Subprotocol.V4_BASE64, [STATUS[:9], STATUS[9:40], STATUS[40:]], 4),
        # Pre-v4 text has no end: what arrived, once STATUS_END_TIMEOUT has passed.
        (Subprotocol.LEGACY, [b"command not ", b"found"], "command not found"),
        (Subprotocol.BASE64, [b"command ", b"not found"], "command not found"),
        # The start of a Status and then silence: a bounded, explained failure.
        (Subprotocol.V4, [STATUS[:30]], "the exec status did not end within 2 s"),
    ],
)
def test_a_status_and_a_server_that_never_closes_end_the_run(
    name: str, subprotocol: Subprotocol, status: list[bytes], outcome: int | str
) -> None:
    from kuber_exec_anyio._drivers import STATUS_END_TIMEOUT

    adapter, testing, run = ADAPTERS[name]
    messages = [frame_message(subprotocol, 3, piece) for piece in status]
    backend = _never_closing(
        testing.MemoryBackend(single_pod_cluster(), messages, subprotocols=[subprotocol])
    )
    request = adapter.ExecRequest(
        workspace=adapter.Workspace(project="demo", uid="demo-uid"), deployment="web", command=["x"]
    )

    async def main() -> tuple[Any, float]:
        start = anyio.current_time()
        with anyio.fail_after(STATUS_END_TIMEOUT + 5):
            try:
                service = adapter.ExecService(backend, subprotocols=[subprotocol])
                result: Any = await service.execute(request)
            except ExecError as error:
                result = error
        return result, anyio.current_time() - start

    result, elapsed = run(main)
    if isinstance(outcome, int):
        assert isinstance(result, ExecResult)
        assert result.exit_code == outcome
        assert elapsed < STATUS_END_TIMEOUT / 2
    else:
        assert isinstance(result, ExecError)
        assert outcome in result.message
        assert elapsed < STATUS_END_TIMEOUT + 1
