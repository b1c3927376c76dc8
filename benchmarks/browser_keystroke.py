"""The browser terminal's keystroke-to-screen time against the page's own baseline (issue 19).

    make bench-browser                         # in a loopback-only network namespace (root)
    python benchmarks/browser_keystroke.py [--keys 60] [--against /work/main] [--large-mb 20]

Starts ``kuber-exec web --sandbox`` (the demo a user starts: the sandbox's pods are local
processes with a real TTY, here a shell) and drives Debian's headless Chromium at it, through the
browser tier's own helpers (``tests/browser_support.py``: it refuses to start the browser outside
a loopback-only network namespace). In the same page, interleaved keystroke by keystroke:

- **baseline**: a plain ``<input>`` whose ``input`` event writes its value into a DOM node; from
  the keydown's ``event.timeStamp`` to the frame that shows it;
- **terminal**: a keystroke into xterm.js, from its keydown to the frame that shows the echoed
  character on the cursor's row, split into keydown -> WebSocket send, send -> the echo's message,
  message -> on screen.

"On screen" is one rule for both (``browser_probe.js``): the first task after the frame whose
rendering includes the DOM mutation. A WebSocket client without a browser (``browser_echo.py``)
types into the same app, for the app's own share of "send to echo". Then a large output
(``yes | head -c N``) from the Enter key to the frame showing the marker printed after it, as
throughput.

``--against DIR``: a second app from another source tree (``DIR/src``, with its own
``node_modules``), e.g. a checkout of main, in a page of its own, alternated with this tree's
block by block, so before and after come from the same run. Prints a table and writes
``results/browser.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_echo import app_echo  # noqa: E402

from browser_support import chromium_page, loopback_only_problem  # noqa: E402
from web.app_server import DemoProcess  # noqa: E402

if TYPE_CHECKING:
    from playwright.sync_api import Page

RESULTS = HERE / "results"
PROBE = (HERE / "browser_probe.js").read_text(encoding="utf-8")
# Letters typed at the shell's prompt; the line is killed (Ctrl-U) after this many.
LINE_KEYS = 24
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
PROMPT_MARK = "# "


@dataclass
class Tree:
    """One app under test: its name, the source tree it runs from, and its samples."""

    name: str
    source: Path
    baseline: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    to_send: list[float] = field(default_factory=list)
    to_message: list[float] = field(default_factory=list)
    to_screen: list[float] = field(default_factory=list)
    large_seconds: list[float] = field(default_factory=list)
    typed: str = ""
    prompt: str = ""
    app: dict[str, float] = field(default_factory=dict)


def git(source: Path, *argv: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(source), *argv], capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def commit(source: Path) -> dict[str, Any]:
    """The commit a tree is at, and whether its working tree differed from it."""
    return {
        "sha": git(source, "rev-parse", "HEAD") or None,
        "describe": git(source, "describe", "--always", "--dirty") or None,
        "subject": git(source, "log", "-1", "--format=%s") or None,
        "dirty": bool(git(source, "status", "--porcelain", "--untracked-files=no")),
    }


def machine() -> dict[str, Any]:
    model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    chromium = subprocess.run(
        ["/usr/bin/chromium", "--version"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpus": os.cpu_count() or 1,
        "load_average": os.getloadavg()[0],
        "chromium": chromium or None,
    }


@contextlib.contextmanager
def demo_from(source: Path, audit_log: Path) -> Iterator[DemoProcess]:
    """``kuber-exec web --sandbox`` running ``source``'s packages (``source/src`` first)."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(source / "src")
    try:
        server = DemoProcess(audit_log=audit_log)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield server
    finally:
        server.stop()


def arm(page: Page, kind: str, text: str) -> None:
    """Arm the probe (``kind``: terminalKey, baselineKey or screenShows) for ``text``; the
    promise is kept in the page, not awaited (Playwright's evaluate would wait for it)."""
    page.evaluate(f"(text) => {{ kuberExecProbe.pending = kuberExecProbe.{kind}(text); }}", text)


def landed(page: Page) -> dict[str, Any]:
    """The armed keystroke's times, once it is on screen."""
    times: dict[str, Any] = page.evaluate("kuberExecProbe.pending")
    return times


def settle(page: Page) -> None:
    """Two animation frames: focus changes and their repaints are done."""
    page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def open_terminal(page: Page, server: DemoProcess, tree: Tree) -> None:
    from playwright.sync_api import expect

    page.add_init_script(script=PROBE)
    page.goto(f"{server.base}?deployment=web#token={server.token}")
    expect(page.locator("body")).to_have_attribute("data-state", "open")
    deadline = time.monotonic() + 30
    while PROMPT_MARK not in (row := str(page.evaluate("kuberExec.screen()"))):
        if time.monotonic() > deadline:
            raise SystemExit(f"{tree.name}: no shell prompt on the screen:\n{row}")
        page.wait_for_timeout(50)
    page.focus(".xterm-helper-textarea")
    settle(page)
    tree.prompt = str(page.evaluate("kuberExec.screen()")).splitlines()[-1].rstrip()


def kill_line(page: Page, tree: Tree) -> None:
    """Ctrl-U: the TTY erases the typed line; wait until the cursor's row is the prompt."""
    if not tree.typed:
        return
    page.focus(".xterm-helper-textarea")
    settle(page)
    arm(page, "terminalKey", tree.prompt)
    page.keyboard.press("Control+U")
    landed(page)
    tree.typed = ""


def baseline_key(page: Page, tree: Tree, key: str, *, count: bool) -> None:
    page.focus("#bench-input")
    settle(page)
    value = str(page.input_value("#bench-input"))
    if len(value) >= LINE_KEYS:
        page.fill("#bench-input", "")
        value = ""
        settle(page)
    arm(page, "baselineKey", value + key)
    page.keyboard.press(key)
    times = landed(page)
    if count:
        tree.baseline.append(times["painted"] - times["keydown"])


def terminal_key(page: Page, tree: Tree, key: str, *, count: bool) -> None:
    if len(tree.typed) >= LINE_KEYS:
        kill_line(page, tree)
    page.focus(".xterm-helper-textarea")
    settle(page)
    expected = tree.prompt + " " + tree.typed + key
    arm(page, "terminalKey", expected)
    page.keyboard.press(key)
    times = landed(page)
    tree.typed += key
    if not count:
        return
    keydown, send, message, painted = (
        times["keydown"],
        times["send"],
        times["message"],
        times["painted"],
    )
    tree.total.append(painted - keydown)
    if send is not None and message is not None:
        tree.to_send.append(send - keydown)
        tree.to_message.append(message - send)
        tree.to_screen.append(painted - message)


def large_output(page: Page, tree: Tree, size: int, round_number: int) -> None:
    """``yes | head -c SIZE`` then a marker: from the Enter key to the frame showing it."""
    kill_line(page, tree)
    command = f"yes | head -c {size}; echo large-{round_number}-$((6*7))-done"
    page.keyboard.type(command)
    settle(page)
    arm(page, "screenShows", f"large-{round_number}-42-done")
    page.keyboard.press("Enter")
    times = landed(page)
    tree.large_seconds.append((times["painted"] - times["keydown"]) / 1000)
    page.keyboard.type("clear")
    arm(page, "terminalKey", tree.prompt)
    page.keyboard.press("Enter")
    landed(page)
    tree.typed = ""


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def summary(tree: Tree) -> dict[str, Any]:
    base, total = median(tree.baseline), median(tree.total)
    return {
        "source": str(tree.source),
        "commit": commit(tree.source),
        "keys": len(tree.total),
        "baseline_ms": base,
        "terminal_ms": total,
        "ratio": round(total / base, 2) if base and total else None,
        "keydown_to_send_ms": median(tree.to_send),
        "send_to_message_ms": median(tree.to_message),
        "message_to_screen_ms": median(tree.to_screen),
        # The same echo from a WebSocket client on loopback, without a browser.
        "app_echo_ms": tree.app.get("echo_ms"),
        "app_ping_ms": tree.app.get("ping_ms"),
        "baseline_p90_ms": round(statistics.quantiles(tree.baseline, n=10)[-1], 2)
        if len(tree.baseline) >= 10
        else None,
        "terminal_p90_ms": round(statistics.quantiles(tree.total, n=10)[-1], 2)
        if len(tree.total) >= 10
        else None,
        "large_output_seconds": [round(value, 3) for value in tree.large_seconds],
        "samples_ms": {
            "baseline": [round(value, 2) for value in tree.baseline],
            "terminal": [round(value, 2) for value in tree.total],
            "message_to_screen": [round(value, 2) for value in tree.to_screen],
        },
        "large_output_median_seconds": median(tree.large_seconds),
    }


def table(results: dict[str, dict[str, Any]], large: int) -> list[str]:
    def cell(value: float | None, unit: str = "") -> str:
        return "-" if value is None else f"{value:.1f}{unit}"

    lines = [
        "Keystroke to screen, headless Chromium, medians (ms)",
        f"{'tree':<10} {'keys':>5} {'baseline':>9} {'terminal':>9} {'ratio':>6} "
        f"{'key>send':>9} {'send>echo':>10} {'echo>screen':>12}",
    ]
    for name, row in results.items():
        lines.append(
            f"{name:<10} {row['keys']:>5} {cell(row['baseline_ms']):>9} "
            f"{cell(row['terminal_ms']):>9} {cell(row['ratio'], 'x'):>6} "
            f"{cell(row['keydown_to_send_ms']):>9} {cell(row['send_to_message_ms']):>10} "
            f"{cell(row['message_to_screen_ms']):>12}"
        )
    lines.append("")
    lines.append("Without a browser: a WebSocket client's keystroke echo and ping (medians, ms)")
    for name, row in results.items():
        lines.append(f"{name:<10} echo {cell(row['app_echo_ms'])}  ping {cell(row['app_ping_ms'])}")
    lines.append("")
    lines.append(f"Large output: yes | head -c {large}, Enter to the marker on screen (median)")
    for name, row in results.items():
        seconds = row["large_output_median_seconds"]
        if seconds is None:
            continue
        lines.append(f"{name:<10} {seconds:.2f} s  ({large / seconds / 1e6:.1f} MB/s)")
    return lines


def run(arguments: argparse.Namespace) -> dict[str, Any]:
    trees = [Tree("this", ROOT)]
    if arguments.against is not None:
        trees.append(Tree("against", Path(arguments.against).resolve()))
    large = int(arguments.large_mb * 1_000_000)
    started = time.time()
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-browser-")))
        first = stack.enter_context(chromium_page(width=1100, height=700, timeout_ms=60_000))
        pages: list[Page] = []
        servers: list[DemoProcess] = []
        for tree in trees:
            server = stack.enter_context(demo_from(tree.source, scratch / f"{tree.name}.jsonl"))
            # One browser: the second tree's page is a window of its own in the same context.
            page = first if not pages else first.context.new_page()
            open_terminal(page, server, tree)
            pages.append(page)
            servers.append(server)
        keys = 0
        warmup = arguments.warmup
        total = arguments.keys + warmup
        while keys < total:
            for tree, page in zip(trees, pages, strict=True):
                page.bring_to_front()
                for offset in range(min(arguments.block, total - keys)):
                    key = ALPHABET[(keys + offset) % len(ALPHABET)]
                    count = keys + offset >= warmup  # Warm-up keystrokes are not counted.
                    baseline_key(page, tree, key, count=count)
                    terminal_key(page, tree, key, count=count)
            keys += arguments.block
        for tree, server in zip(trees, servers, strict=True):
            tree.app = app_echo(server.base, server.token, arguments.keys)
        for round_number in range(arguments.large_rounds):
            for tree, page in zip(trees, pages, strict=True):
                page.bring_to_front()
                large_output(page, tree, large, round_number)
    results = {tree.name: summary(tree) for tree in trees}
    return {
        "format": 1,
        "source": "benchmarks/browser_keystroke.py",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(started)),
        "elapsed_seconds": round(time.time() - started, 1),
        "machine": machine(),
        "commit": commit(ROOT),
        "keys": arguments.keys,
        "large_output_bytes": large,
        "results": results,
        "table": table(results, large),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--keys", type=int, default=60, help="keystrokes per row (60)")
    parser.add_argument("--warmup", type=int, default=5, help="uncounted first keystrokes (5)")
    parser.add_argument("--block", type=int, default=5, help="keystrokes per tree in turn (5)")
    parser.add_argument("--against", help="another source tree to measure in the same run")
    parser.add_argument("--large-mb", type=float, default=20.0, help="large output, MB (20)")
    parser.add_argument("--large-rounds", type=int, default=3, help="large output rounds (3)")
    parser.add_argument("--json", type=Path, default=RESULTS / "browser.json")
    arguments = parser.parse_args(argv)
    problem = loopback_only_problem()
    if problem is not None:
        parser.error(f"run in a loopback-only network namespace (make bench-browser): {problem}")
    report = run(arguments)
    print("\n".join(report["table"]))
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {arguments.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
