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


def test_the_reference_hides_dunder_methods_but_the_protocol_ones(site: Path) -> None:
    with serve_directory(site) as base_url, chromium_page() as page:
        page.goto(base_url + "reference/service/")
        page.locator('[id="kuber_exec_anyio.ExecService"]').wait_for(state="visible")
        ids = page.eval_on_selector_all("[id]", "nodes => nodes.map(node => node.id)")
        members = [name for name in ids if name.startswith("kuber_exec_")]
        dunders = sorted(name for name in members if name.rsplit(".", 1)[-1].startswith("__"))
        # What `async with`, `async for` and a call rely on stays; __repr__, __init__ and the
        # like (not the contract) are gone.
        assert dunders == [
            "kuber_exec_anyio.InteractiveSession.__aiter__",
            "kuber_exec_anyio.InteractiveSession.__anext__",
            "kuber_exec_anyio.JsonLinesAuditLog.__call__",
            "kuber_exec_anyio.KubernetesBackend.__aenter__",
            "kuber_exec_anyio.KubernetesBackend.__aexit__",
            "kuber_exec_anyio.PortForward.__aenter__",
            "kuber_exec_anyio.PortForward.__aexit__",
            "kuber_exec_anyio.SessionHost.__aenter__",
            "kuber_exec_anyio.SessionHost.__aexit__",
            "kuber_exec_anyio.Viewer.__aiter__",
            "kuber_exec_anyio.Viewer.__anext__",
            "kuber_exec_anyio.transport.ExecConnector.__call__",
        ]


def _rgba(css: str) -> tuple[float, float, float, float]:
    parts = [float(v) for v in css[css.index("(") + 1 : css.index(")")].split(",")]
    return (parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else 1.0)


def _luminance(rgb: tuple[float, float, float]) -> float:
    def channel(value: float) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    red, green, blue = (channel(v) for v in rgb)
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def _contrast(text: str, opacity: float, background: str) -> float:
    """WCAG contrast of ``text`` (drawn at ``opacity``) over the opaque ``background``."""
    *fore, alpha = _rgba(text)
    *back, _ = _rgba(background)
    alpha *= opacity
    seen = tuple(f * alpha + b * (1 - alpha) for f, b in zip(fore, back, strict=True))
    lighter, darker = sorted((_luminance(seen), _luminance(tuple(back))), reverse=True)  # type: ignore[arg-type]
    return (lighter + 0.05) / (darker + 0.05)


@pytest.mark.parametrize(("scheme", "palette"), [("light", "default"), ("dark", "slate")])
def test_the_top_tabs_are_readable_in_both_themes(site: Path, scheme: str, palette: str) -> None:
    with serve_directory(site) as base_url, chromium_page(width=1400, height=500) as page:
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        page.goto(base_url + "platform-testing/")
        page.locator(".md-tabs").wait_for(state="visible")
        assert page.locator("body").get_attribute("data-md-color-scheme") == palette
        tabs = page.eval_on_selector_all(
            ".md-tabs__item",
            """items => items.map(item => {
                const link = item.querySelector('.md-tabs__link');
                const style = getComputedStyle(link);
                return {text: link.textContent.trim(), active: item.classList.contains(
                    'md-tabs__item--active'), color: style.color, opacity: style.opacity,
                    weight: style.fontWeight, underline: style.textDecorationLine};
            })""",
        )
        background = page.eval_on_selector(
            ".md-tabs", "tabs => getComputedStyle(tabs).backgroundColor"
        )
        assert [tab["text"] for tab in tabs if tab["active"]] == ["Guides"]
        for tab in tabs:
            ratio = _contrast(tab["color"], float(tab["opacity"]), background)
            assert ratio >= 4.5, (tab, background, ratio)  # WCAG AA for normal text
        # The current tab is told apart by weight and underline, not by faintness.
        (active,) = [tab for tab in tabs if tab["active"]]
        assert int(active["weight"]) >= 700
        assert "underline" in active["underline"]
        screenshot(page, f"docs-tabs-{scheme}", full_page=False)


def _only_loopback(base_url: str, requested: list[str]) -> None:
    foreign = [
        url for url in requested if not url.startswith((base_url, "data:", "blob:", "about:"))
    ]
    assert foreign == [], f"the site asked other hosts for {foreign}"
