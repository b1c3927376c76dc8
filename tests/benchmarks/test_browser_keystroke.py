"""``make bench-browser`` measures what it says: a smoke run of a few keystrokes, in the browser
tier (a loopback-only network namespace, real headless Chromium, the demo app). No timing is
asserted: only that every keystroke was seen at each step, in order, and written to the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from browser_support import browser_unavailable, browser_unavailable_reason

pytestmark = pytest.mark.browser


def test_a_short_run_times_every_keystroke_at_every_step(tmp_path: Path) -> None:
    reason = browser_unavailable_reason()
    if reason is not None:
        browser_unavailable(reason)
    import browser_keystroke

    output = tmp_path / "browser.json"
    arguments = ["--keys", "4", "--warmup", "1", "--block", "2", "--large-mb", "0.2"]
    assert browser_keystroke.main([*arguments, "--large-rounds", "1", "--json", str(output)]) == 0
    report = json.loads(output.read_text(encoding="utf-8"))
    row = report["results"]["this"]
    samples = row["samples_ms"]
    # Every counted keystroke went through send, echo message and screen, in that order.
    assert len(samples["baseline"]) == len(samples["terminal"]) == 4
    assert len(samples["message_to_screen"]) == 4
    assert all(value > 0 for value in samples["baseline"] + samples["terminal"])
    assert row["keydown_to_send_ms"] >= 0
    assert row["send_to_message_ms"] > 0
    assert row["message_to_screen_ms"] > 0
    assert row["app_echo_ms"] > 0
    assert len(row["large_output_seconds"]) == 1
    assert report["commit"]["sha"]
    assert report["machine"]["chromium"].startswith("Chromium")
    assert report["table"][0].startswith("Keystroke to screen")
