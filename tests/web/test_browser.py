"""The browser terminal in a real browser: Debian's headless Chromium, driven by Playwright.

The server is the demo a user starts, ``kuber-exec web --sandbox``, as a child process (so its
RSS is the app's own); the browser opens the URL it printed. Run by the browser tier
(tests/run_browser_tier.sh), inside a loopback-only network namespace; skipped elsewhere, failed
under CI=true when the tier cannot run. Screenshots and measured figures go to .artifacts/.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from browser_support import (
    ARTIFACTS,
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

METRICS = ARTIFACTS / "web-terminal-metrics.json"
_OPEN_TIMES: list[float] = []


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    reason = browser_unavailable_reason()
    if reason is not None:
        browser_unavailable(reason)
    audit_log = tmp_path_factory.mktemp("web") / "audit.jsonl"
    server = DemoProcess(audit_log=audit_log)
    try:
        yield server
    finally:
        server.stop()
    assert server.output.count(server.token) == 1, "the token was printed again or logged"


@pytest.fixture
def page(demo: DemoProcess) -> Iterator[Page]:
    with chromium_page(width=1100, height=700) as browser_page:
        yield browser_page


def _record(**figures: Any) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    known = json.loads(METRICS.read_text()) if METRICS.exists() else {}
    known.update(figures)
    METRICS.write_text(json.dumps(known, indent=2) + "\n")


def _open(page: Page, demo: DemoProcess, deployment: str = "web") -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo.base}?deployment={deployment}#token={demo.token}")
    expect(page.locator("body")).to_have_attribute("data-state", "open")
    # From `new WebSocket` to the app's "open" message: authorization, target resolution, the
    # exec WebSocket to the pod and the first resize. The first one also warms up the app.
    _OPEN_TIMES.append(round(float(page.evaluate("kuberExec.openMs")), 1))
    _record(session_open_ms_seen_by_browser=_OPEN_TIMES)


def _screen(page: Page) -> str:
    return str(page.evaluate("kuberExec.screen()"))


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


def _type(page: Page, line: str) -> None:
    page.keyboard.type(line)
    page.keyboard.press("Enter")


def test_type_commands_and_read_the_screen(page: Page, demo: DemoProcess) -> None:
    from playwright.sync_api import expect

    _open(page, demo)
    expect(page.locator("#status")).to_contain_text("connected in")
    _type(page, "echo hello from $HOSTNAME; echo $((6 * 7)) is the answer")
    screen = _wait_for_screen(page, "42 is the answer")
    assert "hello from web-" in screen
    _type(page, "ls --color=always -d /etc /bin /tmp; printf 'café ✓ \\033[1;32mdone\\033[0m\\n'")
    _wait_for_screen(page, "café ✓ done\n")
    # A window the size of a docs picture (docs/images/web-terminal.png is a copy of this one).
    size = page.locator("body").get_attribute("data-size")
    page.set_viewport_size({"width": 820, "height": 300})
    expect(page.locator("body")).not_to_have_attribute("data-size", size or "")
    screenshot(page, "web-terminal")


def test_stty_size_follows_the_window(page: Page, demo: DemoProcess) -> None:
    from playwright.sync_api import expect

    _open(page, demo)
    before = page.evaluate("kuberExec.size()")
    _type(page, "stty size")
    _wait_for_screen(page, f"{before['rows']} {before['columns']}\n")
    page.set_viewport_size({"width": 700, "height": 420})
    body = page.locator("body")
    expect(body).not_to_have_attribute("data-size", f"{before['columns']}x{before['rows']}")
    after = page.evaluate("kuberExec.size()")
    assert after["columns"] < before["columns"]
    assert after["rows"] < before["rows"]
    _type(page, "clear; stty size")
    _wait_for_screen(page, f"{after['rows']} {after['columns']}\n")


def test_ctrl_c_interrupts_a_sleep(page: Page, demo: DemoProcess) -> None:
    _open(page, demo)
    _type(page, "sh -c 'echo sleeping; exec sleep 60'")
    _wait_for_screen(page, "\nsleeping")
    started = time.monotonic()
    page.keyboard.press("Control+C")  # The TTY's line discipline turns it into SIGINT.
    # Wait for the shell's next prompt, so that the line typed next is the shell's (typed while
    # sleep still ran, the TTY would echo it before the prompt and the answer would follow it).
    _wait_for_screen(page, "^C\n# ")
    _type(page, "echo status $?")
    _wait_for_screen(page, "\nstatus 130")
    assert time.monotonic() - started < 30  # Well before the sleep's 60 s.
    assert "^C" in _screen(page)


def test_multibyte_characters_split_across_frames_render_whole(
    page: Page, demo: DemoProcess
) -> None:
    _open(page, demo)
    # Each character's bytes are split by a pause, so they reach the page in separate messages.
    _type(
        page,
        r"printf 'caf\303'; sleep 0.3; printf '\251 \342\202'; sleep 0.3; "
        r"printf '\254 \360\237'; sleep 0.3; printf '\230\200 done\n'",
    )
    screen = _wait_for_screen(page, " done\n")
    assert "café € 😀 done" in screen
    assert "\ufffd" not in screen


def test_the_exit_code_is_shown(page: Page, demo: DemoProcess) -> None:
    from playwright.sync_api import expect

    _open(page, demo)
    _type(page, "exit 3")
    expect(page.locator("#status")).to_have_text("process exited with code 3")
    expect(page.locator("body")).to_have_attribute("data-state", "failed")
    _wait_for_screen(page, "[process exited with code 3]")


def test_another_workspaces_deployment_is_refused_with_the_message(
    page: Page, demo: DemoProcess
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo.base}?deployment=other#token={demo.token}")
    status = page.locator("#status")
    expect(status).to_contain_text("EXEC_TARGET_FORBIDDEN")
    message = status.text_content() or ""
    assert "other" in message
    _wait_for_screen(page, "EXEC_TARGET_FORBIDDEN")
    screenshot(page, "web-terminal-refused")


def test_yes_for_ten_seconds_keeps_the_apps_rss_flat(page: Page, demo: DemoProcess) -> None:
    _open(page, demo)
    _type(page, "yes")
    _wait_for_screen(page, "y\ny\ny\n")
    samples: list[tuple[float, int, int]] = []
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < 10:
        received = int(page.evaluate("kuberExec.bytesReceived"))
        samples.append((round(elapsed, 2), demo.rss_bytes(), received))
        page.wait_for_timeout(250)  # The sampling period of the measurement.
    page.keyboard.press("Control+C")
    _type(page, "echo yes stopped")
    _wait_for_screen(page, "\nyes stopped\n", timeout=30)
    warm = [rss for at, rss, _ in samples if at >= 2]
    flowed = samples[-1][2] - samples[0][2]
    mib = 1024 * 1024
    _record(
        rss_during_yes_mib={
            "first": round(samples[0][1] / mib, 1),
            "min_after_2s": round(min(warm) / mib, 1),
            "max_after_2s": round(max(warm) / mib, 1),
        },
        yes_bytes_rendered_in_10s=flowed,
    )
    assert flowed > 1 * mib, "the output did not flow"
    assert max(warm) - min(warm) < 16 * mib, samples


def test_the_page_keeps_a_quiet_terminal_alive_with_pings(
    demo: DemoProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A server that pings every 0.5 s and drops a page it hears nothing from for 1.5 s: a
    # terminal left alone for 4 s is still there only if the page pings and answers pings.
    quick = DemoProcess(
        "--ping-interval", "0.5", audit_log=tmp_path_factory.mktemp("pings") / "audit.jsonl"
    )
    try:
        with chromium_page() as page:
            _open(page, quick)
            page.wait_for_timeout(4000)  # The quiet period under test, not a synchronisation.
            _type(page, "echo still connected")
            _wait_for_screen(page, "\nstill connected")
            assert page.locator("body").get_attribute("data-state") == "open"
    finally:
        quick.stop()


def test_nothing_animates_after_a_keystroke_so_its_echo_is_drawn_in_the_next_frame(
    page: Page, demo: DemoProcess
) -> None:
    # A blinking cursor is an endless CSS animation that xterm.js restarts at every cursor move,
    # and Chromium then holds each echo's frame back a whole frame interval (issue 19, measured
    # by make bench-browser). The rule: with the terminal focused and a key echoed, the page
    # runs no animation at all.
    _open(page, demo)
    page.focus(".xterm-helper-textarea")
    page.keyboard.type("echo steady")
    _wait_for_screen(page, "# echo steady")
    animations = page.evaluate(
        "document.getAnimations().map((a) => `${a.constructor.name} ${a.animationName || ''}`)"
    )
    assert animations == []
    # Queried and read in one script turn: xterm.js redraws a row by replacing its elements, and a
    # cursor element read after a redraw has detached it has no computed style at all ('').
    cursors = page.evaluate(
        "Array.from(document.querySelectorAll('.xterm-rows .xterm-cursor'))"
        ".map((element) => getComputedStyle(element).animationName)"
    )
    assert cursors == ["none"]
    page.keyboard.press("Control+U")
