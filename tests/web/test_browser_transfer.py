"""File transfer in a real browser: a file dropped on the terminal lands in the shell's working
directory; the download field brings a file back. Headless Chromium on ``kuber-exec web
--sandbox`` (the browser tier: tests/run_browser_tier.sh); skipped elsewhere, failed under
CI=true when the tier cannot run."""

from __future__ import annotations

import json
import os
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

# A drop as the browser makes it: a DataTransfer holding a File, on the terminal's element.
_DROP = """([name, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, { type: "text/plain" }));
  const area = document.getElementById("terminal");
  for (const type of ["dragenter", "dragover", "drop"]) {
    const options = { dataTransfer: transfer, bubbles: true, cancelable: true };
    area.dispatchEvent(new DragEvent(type, options));
  }
}"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    reason = browser_unavailable_reason()
    if reason is not None:
        browser_unavailable(reason)
    server = DemoProcess(audit_log=tmp_path_factory.mktemp("web") / "audit.jsonl")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(demo: DemoProcess) -> Iterator[Page]:
    with chromium_page(width=1100, height=700) as browser_page:
        yield browser_page


def _wait(page: Page, expression: str, timeout: float = 15.0) -> object:
    """``expression``'s value once it is truthy."""

    def describe(_value: object) -> str:
        return f"{expression} stayed false; the screen:\n{page.evaluate('kuberExec.screen()')}"

    return poll_page(page, expression, timeout=timeout, describe=describe)


def _type(page: Page, line: str) -> None:
    page.keyboard.type(line)
    page.keyboard.press("Enter")


def test_a_dropped_file_arrives_in_the_shells_directory_and_downloads_back(
    page: Page, demo: DemoProcess, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo.base}?deployment=web#token={demo.token}")
    expect(page.locator("body")).to_have_attribute("data-state", "open")
    _type(page, f'cd {tmp_path}; echo IN""SIDE')
    _wait(page, "kuberExec.screen().includes('\\nINSIDE')")
    text = "dropped from the browser: café ✓\n"
    page.evaluate(_DROP, ["notes.txt", text])
    _wait(page, "kuberExec.transfers.length === 1")
    (record,) = page.evaluate("kuberExec.transfers")
    assert record["ok"], record
    assert record["result"]["path"] == str(tmp_path / "notes.txt")
    expect(page.locator("#transfer")).to_contain_text(f"uploaded notes.txt to {tmp_path}")
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == text
    # The shell sees it where it is.
    _type(page, "cat notes.txt; wc -c < notes.txt")
    _wait(page, "kuberExec.screen().includes('café ✓\\n')")
    assert f"\n{len(text.encode())}" in str(page.evaluate("kuberExec.screen()"))
    screenshot(page, "web-terminal-upload")

    # And back, through the download field.
    (tmp_path / "report.bin").write_bytes(payload := os.urandom(300_000))
    with page.expect_download() as waiting:
        page.locator("#download-path").fill("report.bin")
        page.locator("#download button").click()
    download = waiting.value
    assert download.suggested_filename == "report.bin"
    assert Path(download.path()).read_bytes() == payload
    expect(page.locator("#transfer")).to_contain_text("downloaded report.bin (300000 bytes)")

    events = [json.loads(line) for line in demo.audit_log.read_text().splitlines()]
    copies = [e for e in events if e["kind"] == "copy" and e["phase"] == "ended"]
    assert [(e["direction"], e["remote_path"], e["outcome"]) for e in copies][-2:] == [
        ("upload", str(tmp_path / "notes.txt"), "exit"),
        ("download", str(tmp_path / "report.bin"), "exit"),
    ]


def test_a_refused_upload_says_why(page: Page, demo: DemoProcess) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo.base}?deployment=web#token={demo.token}")
    expect(page.locator("body")).to_have_attribute("data-state", "open")
    _type(page, 'cd /sys; echo IN""SIDE')
    _wait(page, "kuberExec.screen().includes('\\nINSIDE')")
    page.evaluate(_DROP, ["nope.txt", "x"])
    _wait(page, "kuberExec.transfers.length === 1")
    (record,) = page.evaluate("kuberExec.transfers")
    assert (record["ok"], record["status"]) == (False, 403)
    expect(page.locator("#transfer")).to_contain_text("upload of nope.txt failed: EXEC_FAILED")
    expect(page.locator("#transfer")).to_contain_text("Permission denied")
