"""``AuditRecord``: one record type for execs and copies; without a hook it builds nothing,
draws no id and reads no wall clock."""

from __future__ import annotations

import datetime
import uuid

import pytest

from kuber_exec_anyio import AuditEvent
from kuber_exec_anyio._audit._record import AuditRecord, CopyPaths
from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, ResolvedTarget, Workspace

WORKSPACE = Workspace(project="team-a", uid="u-1")
UPLOAD = ExecRequest(workspace=WORKSPACE, deployment="web", command=("copy", "upload"))
DOWNLOAD = ExecRequest(workspace=WORKSPACE, deployment="web", command=("copy", "download"))
TARGET = ResolvedTarget(
    namespace="team-a",
    deployment="web",
    deployment_uid="d-1",
    pod="web-1",
    pod_uid="p-1",
    container="app",
)


def test_a_copy_record_without_a_hook_draws_no_id_and_reads_no_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(*_: object) -> object:
        raise AssertionError("paid for an event nobody receives")

    monkeypatch.setattr(uuid, "uuid4", refused)
    monkeypatch.setattr(datetime, "datetime", refused)
    paths = CopyPaths(direction="upload", local_path="a.txt", remote_path="/tmp")
    record = AuditRecord.for_copy(None, UPLOAD, paths)
    record.started(TARGET)
    record.copied(size=3, sha256="ab", verified=True)
    assert record.ended


def test_a_copy_record_says_what_moved() -> None:
    events: list[AuditEvent] = []
    paths = CopyPaths(direction="download", local_path=None, remote_path="/tmp/a")
    record = AuditRecord.for_copy(events.append, DOWNLOAD, paths)
    record.started(TARGET)
    paths.remote_path = "/tmp/a/b"  # the destination, once known
    record.interrupted(ExecError(ExecErrorCode.FAILED, "lost"), moved=5)
    record.copied(size=9, sha256="cd", verified=False)  # after an end: nothing more
    started, ended = events
    assert (started.kind, started.phase, started.direction, started.remote_path) == (
        "copy", "started", "download", "/tmp/a",
    )  # fmt: skip
    assert (ended.phase, ended.outcome, ended.error_code, ended.bytes_out, ended.bytes_in) == (
        "ended", "error", ExecErrorCode.FAILED, 5, 0,
    )  # fmt: skip
    assert (ended.remote_path, ended.session_id) == ("/tmp/a/b", started.session_id)
    assert ended.command == ("copy", "download")
