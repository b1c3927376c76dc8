"""Many dropped pages at once: the drop test's tries as parallel pages in one Chromium.

One *try* is one page in a browser context of its own, with its own shell and its own
:class:`~.drop_proxy.DropProxy` in front of the server: it opens a terminal, exports a variable
named after the try, starts its scenario, has its network cut for ``drop_seconds`` (every
connection dropped, new ones refused), waits for the page to come back by itself and checks
that it is the same shell (its PID, its directory, the variable), that nothing was reported
missed, and, after ``exit 7``, that the bytes the page received are the session's recording
(length and CRC-32). Scenarios:

- ``seq``: ``seq 1 200000`` running when the network goes (most of its output arrives while
  the page is away: the ring holds it);
- ``top``: a full-screen ``top`` refreshing every half second through the drop;
- ``idle``: a prompt, nothing running.

:func:`soak` runs ``tries`` per scenario against one running server, ``parallel`` pages at a
time (scenarios interleaved), and returns one :class:`TryResult` per try; a try that fails
says why and never stops the others. :func:`summary` turns them into counts and the reattach
time (from the network's return to the page's resumed ``open``, polled every 100 ms) per
scenario. Used by ``tests/web/test_browser_shared.py`` (a small batch) and
``benchmarks/drop_soak.py`` (100 tries per scenario, 30 s drops, both servers).

Playwright's async API: the pages are driven concurrently from one asyncio loop; the proxies
are threads. Must run in the browser tier's loopback-only network namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import statistics
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .drop_proxy import DropProxy

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

__all__ = ["SCENARIOS", "SoakServer", "TryResult", "soak", "summary"]

SCENARIOS = ("seq", "top", "idle")
_POLL = 0.1
_SCREEN_POLL = 0.25
# How much of a recording's start is searched for the try's token (the first command's echo).
_HEAD = 64 * 1024


_PAGE_STATE = """({
  state: document.body.dataset.state,
  status: document.getElementById("status").textContent,
  received: kuberExec.received,
  parsed: kuberExec.parsed,
  reconnects: kuberExec.reconnects,
  missed: kuberExec.missed,
  error: kuberExec.error,
  exitCode: kuberExec.exitCode,
  sinceHeardMs: Math.round(performance.now() - kuberExec.lastHeard),
})"""


class SoakFailure(Exception):
    """A try's check did not hold (the message says which and what was seen)."""


@dataclass(frozen=True)
class SoakServer:
    """A running browser-terminal server: ``host:port``, its token, its recordings."""

    address: str
    token: str
    recordings: Path


@dataclass
class TryResult:
    scenario: str
    index: int
    ok: bool = False
    error: str | None = None
    reattach_seconds: float | None = None
    pid: str | None = None
    received: int | None = None
    seconds: float | None = None
    refused_while_down: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


async def _poll(
    page: Page,
    expression: str,
    until: Callable[[Any], bool],
    *,
    within: float,
    what: str,
    describe: Callable[[Any], str] | None = None,
) -> Any:
    """Evaluate ``expression`` every 100 ms until ``until(value)``; the value, or SoakFailure."""
    deadline = time.monotonic() + within
    while True:
        value = await page.evaluate(expression)
        if until(value):
            return value
        if time.monotonic() > deadline:
            seen = describe(value) if describe else repr(value)
            raise SoakFailure(f"{what}: not within {within:g} s ({seen})")
        await asyncio.sleep(_POLL)


async def _screen_has(page: Page, pattern: str, within: float) -> re.Match[str]:
    """Wait for ``pattern`` on the page's screen. Reading the screen (the whole scrollback,
    translated) costs the renderer: it is read again only once xterm.js has parsed more
    output (``kuberExec.parsed``; keyed on bytes received instead, the last ones could arrive
    before they were parsed and never be looked for again)."""
    deadline = time.monotonic() + within
    seen = -1
    screen = ""
    while True:
        parsed = int(await page.evaluate("kuberExec.parsed"))
        if parsed != seen:
            seen = parsed
            screen = str(await page.evaluate("kuberExec.screen()"))
            match = re.search(pattern, screen)
            if match is not None:
                return match
        if time.monotonic() > deadline:
            tail = screen[-600:].replace("\n", "|")
            raise SoakFailure(f"{pattern!r} not on the screen within {within:g} s: {tail}")
        await asyncio.sleep(_SCREEN_POLL)


async def _type(page: Page, line: str) -> None:
    """Type ``line`` and Enter: the line as one text input (as a paste without bracketing, or
    an input method, gives it: one message instead of one per key), Enter as a key."""
    await page.keyboard.insert_text(line)
    await page.keyboard.press("Enter")


async def _received(page: Page) -> int:
    return int(await page.evaluate("kuberExec.received"))


def _recorded_output(cast: Path) -> bytes:
    output = []
    for line in cast.read_text(encoding="utf-8").splitlines()[1:]:
        _, code, data = json.loads(line)
        if code == "o":
            output.append(data)
    return "".join(output).encode("utf-8")


def _find_recording(recordings: Path, token: str) -> Path:
    """The recording whose output starts with the try's token echoed (typed keys are echoed
    one event each: the token is looked for in the joined output, not in the file)."""
    for cast in recordings.glob("*.cast"):
        head = ""
        with cast.open(encoding="utf-8") as file:
            file.readline()  # The header.
            for line in file:
                with contextlib.suppress(ValueError):
                    _, code, data = json.loads(line)
                    if code == "o":
                        head += data
                if token in head:
                    return cast
                if len(head) > _HEAD:
                    break
    raise SoakFailure(f"no recording holds the try's token {token}")


async def _matches_recording(recordings: Path, token: str, received: int, crc: int) -> None:
    """The recording of the try's session is the page's stream: same length, same CRC-32.
    The recorder may still be writing its last events as the page shows the exit: wait (10 s
    at most) for the length to arrive, then compare."""
    deadline = time.monotonic() + 10
    cast = _find_recording(recordings, token)
    while True:
        recorded = _recorded_output(cast)
        if len(recorded) == received or time.monotonic() > deadline:
            break
        await asyncio.sleep(_POLL)
    if len(recorded) != received:
        raise SoakFailure(
            f"the page got {received} bytes, the recording {cast.name} holds {len(recorded)}"
        )
    if zlib.crc32(recorded) != crc:
        raise SoakFailure(f"same length, different bytes than the recording {cast.name}")


async def _drop(page: Page, proxy: DropProxy, seconds: float) -> float:
    """Cut the page's network for ``seconds``; the seconds from its return to the page's
    resumed ``open``."""
    reconnects = int(await page.evaluate("kuberExec.reconnects"))
    proxy.cut(seconds)
    back = time.monotonic() + seconds
    # Seen reconnecting, or already back from it (under a batch's load a poll can come after
    # the whole round trip); given as long as the reconnect itself.
    await _poll(
        page,
        "[document.body.dataset.state, kuberExec.reconnects]",
        lambda seen: seen[0] == "reconnecting" or int(seen[1]) > reconnects,
        within=seconds + 30,
        what="the page showing reconnecting",
    )
    await _poll(
        page,
        "kuberExec.reconnects",
        lambda count: int(count) > reconnects,
        within=seconds + 30,
        what="the page reconnecting",
    )
    return max(0.0, time.monotonic() - back)


async def _one_try(
    browser: Browser, server: SoakServer, result: TryResult, drop_seconds: float
) -> None:
    phases = result.extra.setdefault("phase_seconds", {})
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        phases[name] = round(now - clock, 2)
        clock = now

    proxy = DropProxy(server.address)
    running = proxy.running()
    address = running.__enter__()
    context = await browser.new_context(viewport={"width": 1000, "height": 600})
    try:
        context.set_default_timeout(60_000)
        page = await context.new_page()
        phase("context")
        await page.goto(f"http://{address}/?deployment=web#token={server.token}")
        phase("loaded")
        try:
            await _poll(
                page,
                "document.body.dataset.state",
                lambda state: state == "open",
                within=120,
                what="the terminal opening",
            )
        except SoakFailure as failure:
            said = await page.evaluate("document.getElementById('status').textContent")
            raise SoakFailure(f"{failure}; the page says {said!r}") from None
        phase("open")
        token = f"t{result.index}{result.scenario}{secrets.token_hex(6)}"
        await _type(page, f"cd /tmp && export K38={token} && echo ready=$$=")
        pid = (await _screen_has(page, r"ready=(\d+)=", within=60)).group(1)
        result.pid = pid
        phase("ready")
        if result.scenario == "seq":
            before = await _received(page)
            await _type(page, "seq 1 200000; echo do''ne")
            await _poll(
                page,
                "kuberExec.received",
                lambda received: int(received) > before + 20_000,
                within=60,
                what="seq's output arriving",
            )
            result.reattach_seconds = await _drop(page, proxy, drop_seconds)
            await _screen_has(page, r"\ndone\n", within=180)
        elif result.scenario == "top":
            before = await _received(page)
            frames = int((drop_seconds + 6) / 0.5)
            await _type(page, f"top -d 0.5 -n {frames}; echo to''p")
            await _poll(
                page,
                "kuberExec.received",
                lambda received: int(received) > before + 4_000,
                within=60,
                what="top's screen arriving",
            )
            await _screen_has(page, r"load average", within=60)
            result.reattach_seconds = await _drop(page, proxy, drop_seconds)
            await _screen_has(page, r"\ntop\n", within=drop_seconds + 90)
        else:
            result.reattach_seconds = await _drop(page, proxy, drop_seconds)
        phase("scenario")
        await _type(page, "echo again=$$:$(pwd):$K38")
        await _screen_has(page, rf"again={pid}:/tmp:{token}", within=60)
        missed = int(await page.evaluate("kuberExec.missed"))
        if missed:
            raise SoakFailure(f"the page was told it missed {missed} bytes")
        await _type(page, "exit 7")
        await _poll(
            page, "kuberExec.exitCode", lambda code: code == 7, within=60, what="exit code 7"
        )
        phase("checked")
        received = await _received(page)
        crc = int(await page.evaluate("kuberExec.crc"))
        result.received = received
        if proxy.cuts != 1:
            raise SoakFailure(f"the proxy was cut {proxy.cuts} times")
        result.refused_while_down = proxy.refused
        await _matches_recording(server.recordings, token, received, crc)
        phase("compared")
        result.ok = True
    except BaseException:
        # What the page saw, for the failure's cause: its state, how far it received and parsed.
        with contextlib.suppress(Exception):
            result.extra["page"] = await asyncio.wait_for(page.evaluate(_PAGE_STATE), 10)
        raise
    finally:
        with contextlib.suppress(Exception):
            await context.close()
        await asyncio.to_thread(running.__exit__, None, None, None)
        phase("closed")


async def _run_try(
    browser: Browser,
    server: SoakServer,
    result: TryResult,
    drop_seconds: float,
    slots: asyncio.Semaphore,
    pacing: asyncio.Lock,
    progress: Callable[[TryResult], None] | None,
) -> None:
    async with slots:
        async with pacing:
            # Pages start at most 2 a second: a burst of new pages is all CPU at once.
            await asyncio.sleep(0.5)
        started = time.monotonic()
        try:
            async with asyncio.timeout(drop_seconds + 300):
                await _one_try(browser, server, result, drop_seconds)
        except SoakFailure as failure:
            result.error = str(failure)
        except TimeoutError:
            result.error = "the try took longer than its bound"
        except Exception as error:  # A Playwright error is a failed try, not a stopped soak.
            result.error = f"{type(error).__name__}: {error}"[:2000]
        result.seconds = round(time.monotonic() - started, 2)
        if progress is not None:
            progress(result)


async def soak(
    server: SoakServer,
    *,
    tries: int,
    drop_seconds: float,
    parallel: int,
    scenarios: Sequence[str] = SCENARIOS,
    chromium: str = "/usr/bin/chromium",
    chromium_args: Sequence[str] = (),
    progress: Callable[[TryResult], None] | None = None,
) -> list[TryResult]:
    """``tries`` tries of each scenario against ``server``, ``parallel`` pages at a time in one
    headless Chromium; every try's result (failed ones say why)."""
    from playwright.async_api import async_playwright

    results = [TryResult(scenario, index) for index in range(tries) for scenario in scenarios]
    slots = asyncio.Semaphore(parallel)
    pacing = asyncio.Lock()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium, headless=True, args=list(chromium_args)
        )
        try:
            await asyncio.gather(
                *(
                    _run_try(browser, server, result, drop_seconds, slots, pacing, progress)
                    for result in results
                )
            )
        finally:
            await browser.close()
    return results


def _percentile(values: Sequence[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))], 3)


def summary(results: Sequence[TryResult]) -> dict[str, Any]:
    """Counts, failures and reattach p50/p95, in all and per scenario."""

    def block(chosen: Sequence[TryResult]) -> dict[str, Any]:
        reattach = [r.reattach_seconds for r in chosen if r.ok and r.reattach_seconds is not None]
        return {
            "tries": len(chosen),
            "passes": sum(r.ok for r in chosen),
            "reattach_seconds_p50": _percentile(reattach, 0.5),
            "reattach_seconds_p95": _percentile(reattach, 0.95),
            "reattach_seconds_max": max(reattach, default=None),
            "reattach_seconds_mean": round(statistics.fmean(reattach), 3) if reattach else None,
            "failures": [asdict(r) for r in chosen if not r.ok],
        }

    scenarios = sorted({r.scenario for r in results}, key=SCENARIOS.index)
    return {
        **block(results),
        "each": [
            {
                "scenario": r.scenario,
                "index": r.index,
                "ok": r.ok,
                "reattach_seconds": None
                if r.reattach_seconds is None
                else round(r.reattach_seconds, 3),
                "seconds": r.seconds,
                **r.extra,
            }
            for r in results
        ],
        "scenarios": {
            name: block([r for r in results if r.scenario == name]) for name in scenarios
        },
    }
