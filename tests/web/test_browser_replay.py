"""The replay in a real browser: a live terminal recorded, then played by asciinema-player.

``kuber-exec web --sandbox --record-dir DIR`` as a child process; headless Chromium types into
the terminal (xterm.js), leaves, then opens the replay page, where asciinema-player (from npm,
not ours) plays the recording: at its end the player's screen shows the text xterm.js showed
when the live session ended. Play, pause and seek are driven through the player's own controls
and API. Run by the browser tier (tests/run_browser_tier.sh); skipped elsewhere, failed under
CI=true when it cannot run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from browser_support import (
    browser_unavailable,
    browser_unavailable_reason,
    chromium_page,
    poll_page,
    screenshot,
)

from .app_server import DemoProcess

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DemoProcess, Path]]:
    reason = browser_unavailable_reason()
    if reason is not None:
        browser_unavailable(reason)
    folder = tmp_path_factory.mktemp("web")
    casts = folder / "casts"
    server = DemoProcess("--record-dir", str(casts), audit_log=folder / "audit.jsonl")
    try:
        yield server, casts
    finally:
        server.stop()


def _poll(page: Page, expression: str, predicate: object, timeout: float = 20.0) -> object:
    """``expression``'s value once ``predicate(value)`` holds."""
    assert callable(predicate)
    return poll_page(page, expression, predicate, timeout=timeout)


def _live_session(page: Page, demo: DemoProcess) -> str:
    """Type into a live terminal; return its screen when the session ends (the page leaves)."""
    from playwright.sync_api import expect

    page.goto(f"{demo.base}?deployment=web#token={demo.token}")
    expect(page.locator("body")).to_have_attribute("data-state", "open")
    for line in (
        "echo recorded from $HOSTNAME",
        "printf 'caf\\303\\251 \\342\\202\\254 \\033[1;32mgreen\\033[0m\\n'",
        "seq 1 5",
    ):
        page.keyboard.type(line)
        page.keyboard.press("Enter")
    screen = _poll(page, "kuberExec.screen()", lambda text: text.rstrip().endswith("5\n#"))
    assert isinstance(screen, str)
    # Leaving the page closes the terminal: the recording ends on this very screen.
    page.goto("about:blank")
    return screen


def _replay(page: Page, demo: DemoProcess, recording_id: str) -> None:
    page.goto(f"{demo.base.rstrip('/')}/replay?id={recording_id}#token={demo.token}")
    _poll(page, "kuberReplay.loaded", bool)


@pytest.fixture(scope="module")
def recorded(demo: tuple[DemoProcess, Path]) -> tuple[str, str]:
    """One live session, recorded: the screen it ended with, and its recording's id."""
    server, casts = demo
    with chromium_page(width=1000, height=600) as page:
        live = _live_session(page, server)
    return live, _poll_recorded(casts, server)


def _poll_recorded(casts: Path, server: DemoProcess, timeout: float = 20.0) -> str:
    """The id of the one recording, once the session's ended audit event says it is closed."""
    deadline = time.monotonic() + timeout
    while '"phase": "ended"' not in server.audit_text():
        assert time.monotonic() < deadline, "the session never ended"
        time.sleep(0.05)
    (cast,) = sorted(casts.glob("*.cast"))
    return cast.stem


def test_the_replay_ends_on_the_screen_the_live_session_ended_with(
    demo: tuple[DemoProcess, Path], recorded: tuple[str, str]
) -> None:
    server, _ = demo
    live, recording_id = recorded
    with chromium_page(width=1000, height=600) as page:
        _replay(page, server, recording_id)
        assert page.locator(f'a[data-id="{recording_id}"]').count() == 1
        # Play with the player's own button, to the end.
        page.locator(".ap-play-button").click()
        _poll(page, "kuberReplay.ended", bool, timeout=60)
        # The player announces its end before it has necessarily drawn the last frame (it
        # renders on the next animation frame): the screen is read until it shows the live
        # one, within a bound, and a timeout names what it showed (CI once read it one
        # frame early: the last command without its output).
        wanted = [line.rstrip() for line in live.splitlines()]
        replayed = _poll(
            page, "kuberReplay.screen()", lambda text: text.splitlines() == wanted, timeout=10
        )
        screenshot(page, "web-replay")
    assert isinstance(replayed, str)
    assert "café € green" in replayed


def test_play_pause_and_seek(demo: tuple[DemoProcess, Path], recorded: tuple[str, str]) -> None:
    server, _ = demo
    with chromium_page(width=1000, height=600) as page:
        _replay(page, server, recorded[1])
        duration = float(page.evaluate("kuberReplay.player.getDuration()"))
        assert duration > 0
        button = page.locator(".ap-control-bar .ap-playback-button")
        # Play with the control bar's button: the clock moves.
        button.click()
        _poll(page, "document.body.dataset.state", lambda state: state in ("playing", "ended"))
        _poll(page, "kuberReplay.player.getCurrentTime()", lambda at: at > 0)
        # Pause with the same button: the clock stops.
        if page.evaluate("document.body.dataset.state") == "playing":
            button.click()
            _poll(page, "document.body.dataset.state", lambda state: state == "paused")
        paused = float(page.evaluate("kuberReplay.player.getCurrentTime()"))
        page.wait_for_timeout(300)  # A paused player's clock must not move in this while.
        assert float(page.evaluate("kuberReplay.player.getCurrentTime()")) == paused
        # Seek with the progress bar: a click half-way is half-way through the recording.
        bar = page.locator(".ap-control-bar .ap-progressbar")
        box = bar.bounding_box()
        assert box is not None
        bar.click(position={"x": box["width"] / 2, "y": box["height"] / 2})
        at = _poll(
            page,
            "kuberReplay.player.getCurrentTime()",
            lambda t: abs(t - duration / 2) < duration * 0.15,
        )
        assert isinstance(at, float | int)
        # Seek to the end (the player's API): the last screen.
        page.evaluate(f"kuberReplay.player.seek({duration})")
        _poll(page, "kuberReplay.screen()", lambda text: "café € green" in text)
