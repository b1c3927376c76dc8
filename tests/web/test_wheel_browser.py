"""The browser terminal as a new user installs it: the wheel in a fresh venv, then Chromium.

The venv is ``build/wheel-venv/venv`` (``scripts/wheel_venv.py``: the wheel built from this
tree, installed with ``[testing,trio,asyncio,web,web-trio,cli]`` from the package index), which
``make test-browser`` prepares before it enters the loopback-only network namespace (the
browser tier has no network to install anything). Its ``kuber-exec web --sandbox`` must serve
xterm.js from the wheel itself, with nothing from this tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from browser_support import (
    browser_unavailable,
    browser_unavailable_reason,
    chromium_page,
    poll_page,
)

from .app_server import DemoProcess

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

VENV = Path(__file__).resolve().parents[2] / "build" / "wheel-venv" / "venv"


@pytest.fixture
def wheel_demo(tmp_path: Path) -> Iterator[DemoProcess]:
    reason = browser_unavailable_reason()
    if reason is None and not (VENV / "bin" / "kuber-exec").is_file():
        reason = f"no wheel venv at {VENV}: run `make wheel-venv` (make test-browser does)"
    if reason is not None:
        browser_unavailable(reason)
    server = DemoProcess(
        "--record-dir",
        str(tmp_path / "casts"),
        audit_log=tmp_path / "audit.jsonl",
        command=(str(VENV / "bin" / "kuber-exec"),),
    )
    try:
        yield server
    finally:
        server.stop()


def _wait_for_screen(page: Page, text: str, timeout: float = 15.0) -> str:
    """The terminal's buffer once it contains ``text``."""
    return str(
        poll_page(
            page,
            "kuberExec.screen()",
            lambda screen: text in str(screen),
            timeout=timeout,
            describe=lambda screen: f"{text!r} not on the screen:\n{screen}",
        )
    )


def test_the_installed_wheel_serves_a_working_terminal(wheel_demo: DemoProcess) -> None:
    from playwright.sync_api import expect

    with chromium_page(width=900, height=500) as page:
        xterm = page.request.get(f"{wheel_demo.base}assets/xterm/lib/xterm.js")
        assert xterm.ok
        assert xterm.body().startswith(b"/**") or b"Terminal" in xterm.body()
        page.goto(f"{wheel_demo.base}?deployment=web#token={wheel_demo.token}")
        expect(page.locator("body")).to_have_attribute("data-state", "open")
        page.keyboard.type("echo from the wheel: $((6 * 7))")
        page.keyboard.press("Enter")
        _wait_for_screen(page, "from the wheel: 42")
        # The replay's player comes from the wheel too.
        player = page.request.get(
            f"{wheel_demo.base}assets/asciinema-player/asciinema-player.min.js"
        )
        assert player.ok
        assert b"AsciinemaPlayer" in player.body()
        page.goto(f"{wheel_demo.base}replay")
        expect(page.locator("#recordings a")).to_have_count(1)
    assert "EXEC_FAILED" not in wheel_demo.output
