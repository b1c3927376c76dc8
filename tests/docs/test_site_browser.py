"""The built documentation, looked at in a real browser (the browser tier: run_browser_tier.sh).

The site is built from this checkout (``mkdocs build --strict``), served by ``http.server`` on
127.0.0.1 inside the tier's loopback-only network namespace and opened in Debian's headless
Chromium: the state-machine page shows a drawn diagram (an SVG with every state's name), the
reference lists ``ExecService``'s methods, the search finds an error code, and the browser never
asks any host but the local server for anything. Screenshots go to ``.artifacts/docs-*.png``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from browser_support import (
    ARTIFACTS,
    browser_unavailable_reason,
    chromium_page,
    screenshot,
    serve_directory,
)
from kuber_exec_core.state import SessionState

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from this checkout with warnings as errors."""
    if browser_unavailable_reason() is not None:
        pytest.skip("the browser tier is unavailable (the page fixture says why)")
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    return out


def test_the_state_machine_page_shows_a_drawn_diagram(site: Path) -> None:
    with serve_directory(site) as base_url, chromium_page() as page:
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(base_url + "state-machine/")
        diagram = page.locator("#diagram-state-machine svg")
        diagram.wait_for(state="visible")
        box = diagram.bounding_box()
        assert box is not None
        assert box["width"] > 300
        assert box["height"] > 100
        labels = diagram.locator("g.node text").all_text_contents()
        assert {state.name for state in SessionState} <= set(labels)
        # The Mermaid text is kept, folded away, not shown as the diagram.
        assert not page.locator("details pre").is_visible()
        screenshot(page, "docs-state-machine")
        _only_loopback(base_url, requested)


def test_the_reference_lists_execservice_methods(site: Path) -> None:
    with serve_directory(site) as base_url, chromium_page() as page:
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(base_url + "reference/service/")
        heading = page.locator('[id="kuber_exec_anyio.ExecService"]')
        heading.wait_for(state="visible")
        for method in ("execute", "open_interactive"):
            anchor = page.locator(f'[id="kuber_exec_anyio.ExecService.{method}"]')
            assert anchor.is_visible(), method
            assert method in anchor.inner_text()
        toc = page.get_by_role("navigation", name="Table of contents").last.inner_text()
        assert "execute" in toc
        assert "open_interactive" in toc
        page.goto(base_url + "reference/service/#kuber_exec_anyio.ExecService")
        page.wait_for_load_state("load")
        screenshot(page, "docs-reference-execservice", full_page=False)
        _only_loopback(base_url, requested)


def test_the_search_finds_an_error_code(site: Path) -> None:
    with serve_directory(site) as base_url, chromium_page() as page:
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(base_url)
        query = page.locator("input.md-search__input")
        query.click()
        query.press_sequentially("EXEC_TARGET_FORBIDDEN")
        first = page.locator("li.md-search-result__item").first
        first.wait_for(state="visible")
        results = page.locator("ol.md-search-result__list").inner_text()
        assert "EXEC_TARGET_FORBIDDEN" in results
        screenshot(page, "docs-search", full_page=False)
        _only_loopback(base_url, requested)


def test_the_home_and_benchmark_pages_show_their_pictures(site: Path) -> None:
    with serve_directory(site) as base_url, chromium_page() as page:
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(base_url)
        architecture = page.locator("#diagram-architecture svg")
        architecture.wait_for(state="visible")
        labels = " ".join(architecture.locator("g.node text").all_text_contents())
        for package in ("kuber_exec_core", "kuber_exec_anyio", "kuber_exec_trio", "API server"):
            assert package in labels
        screenshot(page, "docs-home")
        page.goto(base_url + "benchmarks/")
        charts = page.locator("img[src$='.svg']")
        assert charts.count() == 5  # throughput, cpu, latency, memory, endtoend
        for index in range(5):
            chart = charts.nth(index)
            chart.scroll_into_view_if_needed()
            width = chart.evaluate("image => image.complete ? image.naturalWidth : 0")
            assert width > 300, chart.get_attribute("src")
            name = Path(chart.get_attribute("src") or f"chart-{index}").stem
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            chart.screenshot(path=str(ARTIFACTS / f"docs-benchmarks-{name}.png"))
        page.evaluate("window.scrollTo(0, 0)")
        screenshot(page, "docs-benchmarks")
        _only_loopback(base_url, requested)


def _only_loopback(base_url: str, requested: list[str]) -> None:
    foreign = [
        url for url in requested if not url.startswith((base_url, "data:", "blob:", "about:"))
    ]
    assert foreign == [], f"the site asked other hosts for {foreign}"
