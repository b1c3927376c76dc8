"""The browser terminal's recordings: one asciicast v2 file per terminal, and who may replay it.

``create_app(..., recordings=DIRECTORY)`` records every terminal session in ``DIRECTORY`` as
``<id>.cast`` (the service's recorder: ``open_interactive(recording=...)``), next to
``<id>.json``, what the replay needs to know without reading the recording: whose it is (the
workspace the authorization callable answered), the Deployment, the container, the command and
when it started. The replay lists and serves a workspace's own recordings only.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import anyio

from kuber_exec_anyio import ExecRequest, Recording, Workspace

__all__ = ["RecordingStore"]

# What an id looks like: the start time (sortable) and a random part. Anything else asked for
# is refused before it touches the file system (no path can be smuggled in).
_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{12}$")
#: The terminal the recordings were written for (xterm.js is an xterm-256color terminal).
TERMINAL_ENV = {"TERM": "xterm-256color"}


class RecordingStore:
    """A directory of recordings (created, mode 0700, if missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"RecordingStore({str(self.directory)!r})"

    async def new(
        self, workspace: Workspace, request: ExecRequest, columns: int, rows: int
    ) -> Recording:
        """A recording for a terminal about to open: its id, its metadata written."""
        now = datetime.datetime.now(datetime.UTC)
        recording_id = f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(6)}"
        command = request.command
        metadata = {
            "id": recording_id,
            "workspace": {"project": workspace.project, "uid": workspace.uid},
            "deployment": request.deployment,
            "container": request.container,
            "command": [command] if isinstance(command, str) else list(command),
            "started_at": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        }
        await anyio.to_thread.run_sync(self._write_metadata, recording_id, metadata)
        return Recording(
            destination=self.directory / f"{recording_id}.cast",
            env=TERMINAL_ENV,
            title=f"{request.deployment} ({workspace.project})",
            columns=columns,
            rows=rows,
        )

    def _write_metadata(self, recording_id: str, metadata: dict[str, Any]) -> None:
        path = self.directory / f"{recording_id}.json"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(metadata, file)

    def metadata(self, recording_id: str) -> dict[str, Any] | None:
        """The metadata of ``recording_id``, or ``None`` (a malformed id, or no such file)."""
        if not _ID.match(recording_id):
            return None
        try:
            value = json.loads((self.directory / f"{recording_id}.json").read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def cast_path(self, recording_id: str) -> Path:
        """Where ``recording_id``'s recording is (check :meth:`metadata` first)."""
        return self.directory / f"{recording_id}.cast"

    def listing(self, workspace: Workspace) -> list[dict[str, Any]]:
        """``workspace``'s recordings, newest first, each its metadata and ``size`` (bytes);
        a terminal that never opened (no ``.cast``) is left out."""
        entries = []
        for path in self.directory.glob("*.json"):
            metadata = self.metadata(path.stem)
            if metadata is None or not owned_by(metadata, workspace):
                continue
            try:
                size = self.cast_path(path.stem).stat().st_size
            except OSError:
                continue
            entries.append({**metadata, "size": size})
        return sorted(entries, key=lambda entry: str(entry["id"]), reverse=True)


def owned_by(metadata: dict[str, Any], workspace: Workspace) -> bool:
    """Whether the recording's metadata names ``workspace`` as its owner."""
    owner = metadata.get("workspace")
    return owner == {"project": workspace.project, "uid": workspace.uid}
