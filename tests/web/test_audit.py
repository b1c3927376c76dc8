"""Audit events from ExecService, under both runtimes, and the JSON-lines audit log."""

from __future__ import annotations

import datetime
import json
import logging
import stat
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from kuber_exec_anyio import (
    AuditEvent,
    ExecError,
    ExecErrorCode,
    Exit,
    JsonLinesAuditLog,
    Stdin,
)
from kuber_exec_sandbox import Sandbox
from support import DEMO
from support import demo_request as run
from support.web import service_for


@pytest.mark.anyio
async def test_execute_emits_started_then_ended(adapter: ModuleType, sandbox: Sandbox) -> None:
    events: list[AuditEvent] = []
    async with service_for(adapter, sandbox, audit=events.append) as service:
        result = await service.execute(run("sh", "-c", "cat; printf err >&2; exit 3"), stdin="abc")
    assert result.exit_code == 3
    started, ended = events
    assert (started.kind, started.phase, ended.phase) == ("execute", "started", "ended")
    assert started.session_id == ended.session_id
    assert started.workspace == DEMO
    assert (started.deployment, started.pod, started.container) == (
        "web",
        result.target.pod,
        "app",
    )
    assert started.command == ("sh", "-c", "cat; printf err >&2; exit 3")
    assert started.tty is False
    assert started.duration_seconds is None
    assert started.started_at.tzinfo is datetime.UTC
    assert (ended.outcome, ended.exit_code, ended.error_code) == ("exit", 3, None)
    assert (ended.bytes_in, ended.bytes_out) == (3, 6)
    assert ended.duration_seconds is not None
    assert ended.duration_seconds > 0


@pytest.mark.anyio
async def test_interactive_session_counts_bytes_both_ways(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    events: list[AuditEvent] = []
    async with (
        service_for(adapter, sandbox, audit=events.append) as service,
        service.open_interactive(run("sh", "-c", "read line; echo got $line; exit 7")) as session,
    ):
        await session.send(Stdin(b"hello\r"))
        with anyio.fail_after(30):
            frames = [frame async for frame in session]
        assert frames[-1] == Exit(7, "NonZeroExitCode", frames[-1].message)
        assert [event.phase for event in events] == ["started"]
    started, ended = events
    assert (started.kind, started.tty, ended.outcome, ended.exit_code) == (
        "interactive",
        True,
        "exit",
        7,
    )
    assert ended.bytes_in == 6
    # The TTY echoes the line, then the output: at least "hello\r\ngot hello\r\n".
    assert ended.bytes_out >= len(b"hello\r\ngot hello\r\n")


@pytest.mark.anyio
async def test_an_execute_over_its_cap_counts_what_it_received(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    events: list[AuditEvent] = []
    async with service_for(adapter, sandbox, audit=events.append) as service:
        with pytest.raises(ExecError) as capped:
            await service.execute(run("sh", "-c", "head -c 100000 /dev/zero"), stdout_cap=1000)
    assert capped.value.code is ExecErrorCode.OUTPUT_LIMIT
    ended = events[-1]
    assert (ended.outcome, ended.error_code) == ("error", ExecErrorCode.OUTPUT_LIMIT)
    # The chunk that crossed the cap was received too: more than the cap, at most the output.
    assert 1000 < ended.bytes_out <= 100_000
    assert ended.bytes_in == 0


@pytest.mark.anyio
async def test_a_session_left_early_is_closed(adapter: ModuleType, sandbox: Sandbox) -> None:
    events: list[AuditEvent] = []
    async with (
        service_for(adapter, sandbox, audit=events.append) as service,
        service.open_interactive(run("sleep", "30"), tty=False),
    ):
        pass
    assert [(event.phase, event.outcome) for event in events] == [
        ("started", None),
        ("ended", "closed"),
    ]


@pytest.mark.anyio
async def test_a_refused_target_has_only_an_ended_event(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    events: list[AuditEvent] = []
    async with service_for(adapter, sandbox, audit=events.append) as service:
        with pytest.raises(ExecError) as refused:
            await service.execute(run("id", deployment="other"))
    assert refused.value.code is ExecErrorCode.TARGET_FORBIDDEN
    (ended,) = events
    assert (ended.phase, ended.outcome, ended.pod, ended.deployment) == (
        "ended",
        "error",
        None,
        "other",
    )
    assert ended.error_code is ExecErrorCode.TARGET_FORBIDDEN
    assert ended.error_message == refused.value.message


@pytest.mark.anyio
async def test_a_cancelled_execute_is_recorded_as_aborted(
    adapter: ModuleType, sandbox: Sandbox
) -> None:
    events: list[AuditEvent] = []
    async with service_for(adapter, sandbox, audit=events.append) as service:
        with anyio.move_on_after(0.5):
            await service.execute(run("sleep", "30"))
    assert [event.phase for event in events] == ["started", "ended"]
    assert (events[1].error_code, events[1].error_message) == (ExecErrorCode.ABORTED, "cancelled")


@pytest.mark.anyio
async def test_a_failing_hook_is_logged_and_the_exec_goes_on(
    adapter: ModuleType, sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: AuditEvent) -> None:
        raise RuntimeError("the audit store is down")

    caplog.set_level(logging.ERROR, logger="kuber_exec")
    async with service_for(adapter, sandbox, audit=broken) as service:
        result = await service.execute(run("echo", "fine"))
        async with service.open_interactive(run("true"), tty=False) as session:
            with anyio.fail_after(30):
                assert [frame async for frame in session] == [Exit(0)]
    assert result.stdout == b"fine\n"
    failures = [r for r in caplog.records if "audit hook failed" in r.getMessage()]
    assert len(failures) == 4
    assert all(r.exc_info and "the audit store is down" in str(r.exc_info[1]) for r in failures)


def test_json_lines_log_writes_one_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    event = _event()
    with JsonLinesAuditLog(path) as log:
        log(event)
        log(event)
        log.flush()
        assert path.read_text(encoding="utf-8").count("\n") == 2
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == [event.to_dict()] * 2
    assert lines[0]["workspace"] == {"project": "demo", "uid": "demo-uid"}
    assert lines[0]["started_at"] == "2026-12-01T09:00:00.000Z"
    assert lines[0]["error_code"] == "EXEC_TARGET_FORBIDDEN"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert log.dropped == 0


def test_json_lines_log_drops_rather_than_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log = JsonLinesAuditLog(tmp_path / "audit.jsonl", max_pending=2)
    disk = threading.Event()
    writing = threading.Event()
    real_write = log._write

    def slow_write(event: AuditEvent) -> None:
        writing.set()
        disk.wait()
        real_write(event)

    monkeypatch.setattr(log, "_write", slow_write)
    caplog.set_level(logging.WARNING, logger="kuber_exec")
    try:
        log(_event())  # taken by the writer thread, which then blocks on the "disk"
        assert writing.wait(10)
        for _ in range(5):
            log(_event())  # two fit in the queue, three are dropped: none of these blocks
        assert log.dropped == 3
        assert [r.getMessage().split(";")[1] for r in caplog.records] == [
            f" 1 dropped so far ({log.path})",
            f" 2 dropped so far ({log.path})",
        ]
    finally:
        disk.set()
        log.close()
    assert len((tmp_path / "audit.jsonl").read_text(encoding="utf-8").splitlines()) == 3


def _event(**changes: Any) -> AuditEvent:
    fields: dict[str, Any] = {
        "kind": "execute",
        "phase": "ended",
        "session_id": "0" * 32,
        "workspace": DEMO,
        "deployment": "other",
        "pod": None,
        "container": None,
        "command": ("id",),
        "tty": False,
        "started_at": datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC),
        "duration_seconds": 0.01,
        "outcome": "error",
        "error_code": ExecErrorCode.TARGET_FORBIDDEN,
        "error_message": "Deployment other belongs to another workspace",
    }
    fields.update(changes)
    return AuditEvent(**fields)
