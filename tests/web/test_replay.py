"""The browser terminal's recordings and replay, under uvicorn, without a browser.

A terminal is opened over the page's own WebSocket subprotocol; its recording is then listed
and fetched through the replay's API, as the replay page does, and read back with
``asciinema cat``. The page itself in a real browser is tests/web/test_browser_replay.py.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

import kuber_exec_asyncio as adapter
from kuber_exec_asyncio import AuditEvent, Workspace
from kuber_exec_sandbox import Sandbox
from kuber_exec_web import TerminalRefused, TerminalRequest, create_app
from support import DEMO
from support.web import TOKEN
from support.web import control as _control
from support.web import output_until as _output_until
from support.web import terminal as _terminal

from .app_server import serve_app

pytestmark = pytest.mark.anyio

OTHER_TOKEN = "another-workspaces-token"
OTHER = Workspace(project="demo", uid="other-uid")
SEEN: list[TerminalRequest] = []


def authorize(request: TerminalRequest) -> Workspace:
    """Two workspaces behind two tokens; every request is kept for the checks."""
    SEEN.append(request)
    if request.bearer_token == TOKEN:
        return DEMO
    if request.bearer_token == OTHER_TOKEN:
        return OTHER
    raise TerminalRefused("not authorized")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # uvicorn runs on asyncio.


@pytest.fixture
async def replay(
    sandbox: Sandbox, tmp_path: Path
) -> AsyncIterator[tuple[str, Path, list[AuditEvent]]]:
    """The app with recordings in ``tmp_path / "casts"``: its address, the folder, the events."""
    events: list[AuditEvent] = []
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        service = adapter.ExecService(backend, audit=events.append)
        folder = tmp_path / "casts"
        app = create_app(service, authorize, default_deployment="web", recordings=folder)
        async with serve_app(app) as address:
            yield address, folder, events


async def _record_a_terminal(address: str) -> bytes:
    """A terminal that prints something and exits; returns the output it showed."""
    async with _terminal(address, "deployment=web&cols=90&rows=20") as ws:
        assert (await _control(ws))["type"] == "open"
        await ws.send(b"printf 'caf\\303\\251 ok\\n'; exit 5\r")
        shown = await _output_until(ws, "café ok\r\n".encode())
        while (message := await ws.recv()) != '{"type": "exit", "code": 5}':
            if isinstance(message, bytes):
                shown += message
    return shown


async def _get(address: str, path: str, token: str | None = TOKEN) -> httpx.Response:
    # Async: the app serves from this very event loop.
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(f"http://{address}/{path}", headers=headers)


async def test_a_terminal_is_recorded_and_its_recording_replayed(
    replay: tuple[str, Path, list[AuditEvent]],
) -> None:
    address, folder, events = replay
    shown = await _record_a_terminal(address)
    listing = await _get(address, "api/recordings")
    assert listing.status_code == 200
    (entry,) = listing.json()["recordings"]
    assert entry["workspace"] == {"project": "demo", "uid": "demo-uid"}
    assert (entry["deployment"], entry["command"][0], entry["command"][-1]) == ("web", "env", "sh")
    cast = await _get(address, f"api/recordings/{entry['id']}")
    assert cast.status_code == 200
    assert cast.headers["content-type"] == "application/x-asciicast"
    assert len(cast.content) == entry["size"]
    header = json.loads(cast.content.splitlines()[0])
    # The page's size from its URL is the header's; the terminal is xterm.js.
    assert (header["width"], header["height"]) == (90, 20)
    assert header["env"] == {"TERM": "xterm-256color"}
    path = folder / f"{entry['id']}.cast"
    assert path.read_bytes() == cast.content
    done = await anyio.run_process(
        [sys.executable, "-m", "asciinema", "cat", str(path)],
        start_new_session=True,
        env={**os.environ, "PYTHONUTF8": "1"},
    )
    assert done.stdout == shown
    # Keystrokes are not recorded (the TTY's echo is output).
    assert {json.loads(line)[1] for line in cast.content.splitlines()[1:]} == {"o"}
    ended = events[-1]
    assert ended.recording == str(path)
    assert ended.recording_error is None


async def test_recordings_are_behind_the_authorization_callable(
    replay: tuple[str, Path, list[AuditEvent]],
) -> None:
    address, folder, _ = replay
    await _record_a_terminal(address)
    (entry,) = (await _get(address, "api/recordings")).json()["recordings"]
    SEEN.clear()
    for token in (None, "wrong"):
        refused = await _get(address, f"api/recordings/{entry['id']}", token=token)
        assert refused.status_code == 403
        assert refused.json() == {"code": "UNAUTHORIZED", "message": "not authorized"}
        assert (await _get(address, "api/recordings", token=token)).status_code == 403
    # The callable saw the recording's Deployment and the bearer token.
    assert (SEEN[0].deployment, SEEN[0].bearer_token) == ("web", None)
    assert SEEN[1].deployment == ""  # the list: no ?deployment=
    assert SEEN[2].bearer_token == "wrong"
    # Another workspace sees none of it: an empty list, and no such recording.
    assert (await _get(address, "api/recordings", token=OTHER_TOKEN)).json() == {"recordings": []}
    hidden = await _get(address, f"api/recordings/{entry['id']}", token=OTHER_TOKEN)
    assert hidden.status_code == 404
    assert hidden.json()["code"] == "NOT_FOUND"
    # An id that is not one never reaches the file system.
    for bad in ("..%2F..%2Fetc%2Fpasswd", "x", entry["id"] + "0", entry["id"].upper()):
        assert (await _get(address, f"api/recordings/{bad}")).status_code == 404
    assert sorted(path.suffix for path in folder.iterdir()) == [".cast", ".json"]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


async def test_the_replay_page_serves_the_player_from_npm_under_its_policy(
    replay: tuple[str, Path, list[AuditEvent]],
) -> None:
    address, _, _ = replay
    page = await _get(address, "replay", token=None)
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "script-src 'self' 'wasm-unsafe-eval';" in policy
    assert "unsafe-eval'" not in policy.replace("'wasm-unsafe-eval'", "")
    assert '<script src="assets/asciinema-player/asciinema-player.min.js">' in page.text
    player = await _get(address, "assets/asciinema-player/asciinema-player.min.js", token=None)
    assert player.status_code == 200
    assert b"AsciinemaPlayer" in player.content
    assert (
        await _get(address, "assets/asciinema-player/asciinema-player.css", None)
    ).status_code == 200
    assert (await _get(address, "static/replay.js", None)).status_code == 200
    # The terminal page links to it.
    assert '<a id="replay" href="replay">Recordings</a>' in (await _get(address, "", None)).text


async def test_without_recordings_there_is_no_replay(sandbox: Sandbox) -> None:
    events: list[AuditEvent] = []
    async with adapter.KubernetesBackend(adapter.ClusterConfig(sandbox.url)) as backend:
        service = adapter.ExecService(backend, audit=events.append)
        app = create_app(service, authorize, default_deployment="web")
        async with serve_app(app) as address:
            await _no_replay(address)
    assert events[-1].recording is None


async def _no_replay(address: str) -> None:
    assert (await _get(address, "replay")).status_code == 404
    assert (await _get(address, "api/recordings")).status_code == 404
    assert 'id="replay"' not in (await _get(address, "")).text
    async with _terminal(address) as ws:
        assert (await _control(ws))["type"] == "open"
