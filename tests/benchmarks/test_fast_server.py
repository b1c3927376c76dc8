"""The benchmark server answers what kuber-exec asks, on both runtimes, so it cannot rot.

Correctness only: speed lives in benchmarks/ (no timing here).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from kuber_exec_core import Exit, Stdin, Stdout
from support import demo_request as request

from .fast_server_support import FastServer

pytestmark = pytest.mark.anyio


async def test_resolution_and_small_execs(adapter: Any, fast_server: FastServer) -> None:
    async with adapter.KubernetesBackend(adapter.ClusterConfig(fast_server.url)) as backend:
        service = adapter.ExecService(backend)
        target = await service.resolve_target(request("true"))
        assert (target.namespace, target.pod, target.container) == ("demo", fast_server.pod, "app")
        echoed = await service.execute(request("echo", "hello", "there"))
        assert (echoed.exit_code, echoed.stdout, echoed.stderr) == (0, b"hello there\n", b"")
        failed = await service.execute(request("false"))
        assert (failed.exit_code, failed.reason) == (1, "NonZeroExitCode")
        # 100,000 bytes in 4 KiB messages: 24 whole ones and a short last one.
        output = await service.execute(request("bench-stdout", "100000", "4096"))
        assert (output.exit_code, output.stdout) == (0, bytes(100_000))
        head = await service.execute(request("head", "-c", "70000", "/dev/zero"))
        assert head.stdout == bytes(70_000)


async def test_an_interactive_cat_echoes_until_stdin_closes(
    adapter: Any, fast_server: FastServer
) -> None:
    async with adapter.KubernetesBackend(adapter.ClusterConfig(fast_server.url)) as backend:
        service = adapter.ExecService(backend)
        async with service.open_interactive(request("cat"), tty=False) as session:
            await session.send(Stdin(b"one "))
            await session.send(Stdin(b"two", eof=True))
            frames = [frame async for frame in session]
    assert b"".join(f.data for f in frames if isinstance(f, Stdout)) == b"one two"
    assert frames[-1] == Exit(0)


async def test_the_target_cache_syncs_from_its_watches(
    adapter: Any, fast_server: FastServer
) -> None:
    async with (
        adapter.KubernetesBackend(adapter.ClusterConfig(fast_server.url)) as backend,
        backend.watch(["demo"]) as cache,
    ):
        await cache.wait_synced()
        result = await adapter.ExecService(backend).execute(request("echo", "cached"))
    assert result.stdout == b"cached\n"


def test_its_stats_count_sessions(fast_server: FastServer) -> None:
    with urllib.request.urlopen(fast_server.url + "/fast-server/stats", timeout=30) as answer:
        stats = json.load(answer)
    assert stats["cpu_seconds"] > 0
    assert stats["rss_kib"] > 0
    assert stats["sessions"] == 0


def _execs(fast_server: FastServer) -> int:
    with urllib.request.urlopen(fast_server.url + "/fast-server/stats", timeout=30) as answer:
        count: int = json.load(answer)["execs"]
    return count


@pytest.mark.parametrize("cleanup", [True, False])
async def test_leaving_a_running_session_costs_one_cleanup_exec_when_supervised(
    adapter: Any, fast_server: FastServer, cleanup: bool
) -> None:
    """What benchmarks/load.py counts while N sessions leave: one more exec each, supervised."""
    events: list[Any] = []
    async with adapter.KubernetesBackend(adapter.ClusterConfig(fast_server.url)) as backend:
        service = adapter.ExecService(backend, audit=events.append, cleanup=cleanup)
        before = _execs(fast_server)
        async with service.open_interactive(request("sleep", "3600"), tty=False, stdin=False):
            assert _execs(fast_server) == before + 1
        left = _execs(fast_server)
    assert left == before + (2 if cleanup else 1)
    ended = [event for event in events if event.phase == "ended"]
    assert [None if e.cleanup is None else e.cleanup.value for e in ended] == (
        ["none"] if cleanup else [None]
    )
