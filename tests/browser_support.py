"""Real-browser tests: Debian's headless Chromium driven by Playwright, reaching loopback only.

The browser tier (``tests/run_browser_tier.sh``, ``make test-browser``) runs its whole pytest
process inside a fresh network namespace that has nothing but ``lo`` (``unshare --net``, then
``ip link set lo up``, as root), so whatever a test serves and the browser it drives share that
namespace, and the browser cannot reach anything else. ``chromium_page()`` asserts that before it
starts the browser.

Usage, in a test marked ``@pytest.mark.browser``::

    from browser_support import chromium_page, serve_directory

    def test_site(tmp_path: Path) -> None:
        with serve_directory(site) as base_url, chromium_page() as page:
            page.goto(base_url + "index.html")

When Chromium (``/usr/bin/chromium``, apt package ``chromium``), Playwright for Python (pip
``playwright``; its wheel ships the driver, ``playwright install`` is never needed) or root is
missing, or the process is not in a loopback-only namespace, the test is skipped with the reason,
or fails when the environment variable ``CI`` is ``true``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import importlib.util
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium (apt package ``chromium``); never a browser downloaded by Playwright."""

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Command-line switches: headless, no phoning home (updates, sync, background fetches)."""

ARTIFACTS = Path(__file__).resolve().parent.parent / ".artifacts"
"""Where browser tests save screenshots (``.artifacts/`` at the repository root, gitignored)."""

_IFF_UP = 0x1
_SIOCGIFFLAGS = 0x8913


def browser_unavailable(reason: str) -> NoReturn:
    """Skip the test with ``reason``, or fail it when ``CI`` is ``true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser tier unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"browser tier unavailable: {reason}")


def _interfaces() -> list[str]:
    # /proc/self/net follows the namespace of the reading process (/sys/class/net follows the
    # namespace sysfs was mounted in, which unshare --net does not change).
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines if ":" in line)


def _lo_is_up() -> bool:
    request = struct.pack("16sH14x", b"lo", 0)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            answer = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request)
    except OSError:
        return False
    flags: int = struct.unpack("16sH14x", answer)[1]
    return bool(flags & _IFF_UP)


def _route_devices() -> set[str]:
    """The interfaces named by the IPv4 and IPv6 routing tables."""
    devices: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if fields:
                devices.add(fields[0])
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/net/ipv6_route").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 10:
                devices.add(fields[9])
    return devices


def loopback_only_problem() -> str | None:
    """Why this process's network namespace is not loopback-only (``None`` when it is).

    Loopback-only means: the only interface is ``lo``, it is up, and no route names any other
    interface.
    """
    try:
        interfaces = _interfaces()
    except OSError as exc:
        return f"cannot list network interfaces: {exc}"
    others = [name for name in interfaces if name != "lo"]
    if others:
        return f"non-loopback interfaces present: {', '.join(others)}"
    if "lo" not in interfaces or not _lo_is_up():
        return "the loopback interface is not up (ip link set lo up)"
    routed = sorted(_route_devices() - {"lo"})
    if routed:
        return f"routes through non-loopback interfaces: {', '.join(routed)}"
    return None


def in_loopback_only_netns() -> bool:
    """Whether the process is in a network namespace that reaches nothing but loopback."""
    return loopback_only_problem() is None


def browser_unavailable_reason() -> str | None:
    """What is missing for the browser tier, or ``None`` when it can run."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"{CHROMIUM} not found (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is not installed (pip install playwright)"
    if os.geteuid() != 0:
        return "needs root to run in a loopback-only network namespace (tests/run_browser_tier.sh)"
    problem = loopback_only_problem()
    if problem is not None:
        return (
            f"not in a loopback-only network namespace ({problem}); run tests/run_browser_tier.sh"
        )
    return None


@contextlib.contextmanager
def chromium_page(
    *, width: int = 1280, height: int = 900, timeout_ms: float = 15_000
) -> Iterator[Page]:
    """A Playwright page in a fresh headless Chromium, with a fresh profile directory.

    Skips (or fails under ``CI=true``) when the tier cannot run; asserts the loopback-only
    namespace before the browser starts. The browser and its profile are gone on exit.
    """
    reason = browser_unavailable_reason()
    if reason is not None:
        browser_unavailable(reason)
    assert in_loopback_only_netns(), loopback_only_problem()

    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="kuber-exec-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=list(CHROMIUM_ARGS),
                viewport={"width": width, "height": height},
                service_workers="block",
            )
            try:
                context.set_default_timeout(timeout_ms)
                page = context.pages[0] if context.pages else context.new_page()
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port) from a thread.

    Yields the base URL, ending in ``/``. The server runs in this process, so inside the browser
    tier it lives in the same loopback-only namespace as the browser.
    """
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="browser-http", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot (of the whole page, or of the viewport) as ``.artifacts/<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def poll_page(
    page: Page,
    expression: str,
    until: Callable[[Any], bool] = bool,
    *,
    timeout: float = 15.0,
    describe: Callable[[Any], str] | None = None,
) -> Any:
    """Evaluate ``expression`` in ``page`` every 50 ms until ``until(value)`` holds; the value.
    (Playwright's own ``wait_for_function`` needs eval, which the pages' Content-Security-Policy
    forbids.)

    Raises:
        AssertionError: after ``timeout`` seconds, saying ``describe(value)`` of the last value
            (by default that ``expression`` stayed that value).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if until(value):
            return value
        if time.monotonic() > deadline:
            said = describe(value) if describe else f"{expression} stayed {value!r}"
            raise AssertionError(said)
        page.wait_for_timeout(50)
