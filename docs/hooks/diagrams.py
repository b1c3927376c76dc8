"""MkDocs hook: the site's diagrams, drawn by Graphviz at build time (no network, no JavaScript
in the page).

- ``state-machine``: generated from ``kuber_exec_core.state`` (``TRANSITIONS``,
  ``TERMINAL_STATES``), the same table ``state_diagram()`` turns into Mermaid text;
- ``architecture``: the packages, their imports (read from ``src/`` with ``ast``) and the path of
  one exec's data from the app to the pod's process and back.

A page asks for a diagram with an HTML comment on a line of its own, ``<!-- diagram: NAME -->``;
the hook replaces it with the SVG inline (so its text is in the page, searchable and selectable)
and also writes ``diagrams/NAME.svg`` into the site.

Graphviz is the WebAssembly build of Viz.js (``@viz-js/viz``, pinned by
``docs/hooks/package-lock.json``; ``make`` installs it with ``npm ci``), run by Node through
``render_dot.mjs``: the build needs Python and Node only, never a system Graphviz.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from kuber_exec_core.state import TERMINAL_STATES, TRANSITIONS, SessionState

HOOKS = Path(__file__).resolve().parent
SRC = HOOKS.parents[1] / "src"
RENDERER = HOOKS / "render_dot.mjs"
MARKER = re.compile(r"<!--\s*diagram:\s*([a-z0-9-]+)\s*-->")
# Graphviz sizes the boxes for text in FONT (WebAssembly Graphviz has no fonts of its own, only
# built-in metrics: DejaVu Sans is the widest common sans-serif it knows), and the SVG then asks
# for FONT_FAMILY, so a narrower Helvetica or Arial still fits.
FONT = "DejaVu Sans"
FONT_FAMILY = "DejaVu Sans,Helvetica,Arial,sans-serif"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def state_machine_dot() -> str:
    """The session state table as DOT: one edge per (from, to) pair, labelled with its inputs."""
    edges: dict[tuple[SessionState, SessionState], list[str]] = {}
    for (state, event), target in TRANSITIONS.items():
        edges.setdefault((state, target), []).append(event.value)
    lines = [
        "digraph session_states {",
        f'  graph [rankdir=LR, fontname="{FONT}", bgcolor="transparent", nodesep=0.6];',
        f'  node [shape=box, style="rounded,filled", fillcolor="#e8eaf6", fontname="{FONT}"];',
        f'  edge [fontname="{FONT}", fontsize=11];',
        '  start [shape=circle, width=0.25, label="", style=filled, fillcolor=black];',
        '  finish [shape=doublecircle, width=0.2, label="", style=filled, fillcolor=black];',
        f"  start -> {SessionState.OPEN.name};",
    ]
    for state in SessionState:
        lines.append(f"  {state.name} [label={_quote(state.name)}];")
    for (state, target), events in edges.items():
        label = "\\n".join(events)
        lines.append(f'  {state.name} -> {target.name} [label="{label}"];')
    for state in SessionState:
        if state in TERMINAL_STATES:
            lines.append(f"  {state.name} -> finish;")
    lines.append("}")
    return "\n".join(lines) + "\n"


#: The packages drawn, in layers from the app down, with what each is.
PACKAGES: dict[str, str] = {
    "kuber_exec_cli": "the kuber-exec command",
    "kuber_exec_trio": "trio binding\\n(reads in the receiving task)",
    "kuber_exec_asyncio": "asyncio binding\\n(an asyncio.Protocol)",
    "kuber_exec_websocket": "exec WebSocket client\\non websockets' sans-IO protocol\\n"
    "upgrade, message assembly, pings",
    "kuber_exec_anyio": "async layer on anyio\\nExecService, InteractiveSession\\n"
    "KubernetesBackend (REST over httpx)\\nexec connection (keepalive, bounded close)",
    "kuber_exec_core": "sans-IO core: every rule, no I/O\\nvalidation, limits, targeting plans\\n"
    "channel codec, ExecSession state table",
    "kuber_exec_sandbox": "sandbox API server\\n(loopback, for demos and tests)",
}


def package_imports(src: Path = SRC) -> set[tuple[str, str]]:
    """(importer, imported) pairs between the project's packages, read from the source."""
    pairs: set[tuple[str, str]] = set()
    for package in PACKAGES:
        for path in sorted((src / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names: Iterable[str] = ()
                if isinstance(node, ast.Import):
                    names = (alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = (node.module,)
                for name in names:
                    top = name.partition(".")[0]
                    if top in PACKAGES and top != package:
                        pairs.add((package, top))
    return pairs


def reduced(pairs: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The transitive reduction: ``a -> c`` is dropped when ``a -> b -> ... -> c`` exists."""

    def reachable(start: str, skip: tuple[str, str]) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            node = stack.pop()
            for edge in pairs:
                if edge != skip and edge[0] == node and edge[1] not in seen:
                    seen.add(edge[1])
                    stack.append(edge[1])
        return seen

    return {edge for edge in pairs if edge[1] not in reachable(edge[0], skip=edge)}


def architecture_dot(src: Path = SRC) -> str:
    """The packages (grey dashed: what depends on what) and one exec's data path (blue)."""
    data = 'color="#1a56db", fontcolor="#1a56db", penwidth=2'
    lines = [
        "digraph architecture {",
        f'  graph [rankdir=TB, fontname="{FONT}", bgcolor="transparent", nodesep=0.35,'
        " ranksep=0.5, newrank=true];",
        f'  node [shape=box, style="rounded,filled", fillcolor="#e8eaf6", fontname="{FONT}",'
        " fontsize=13];",
        f'  edge [fontname="{FONT}", fontsize=11];',
        '  app [label="your app\\n(trio or asyncio)", fillcolor="#fff3e0"];',
    ]
    lines.append('  subgraph cluster_lib { label="kuber-exec"; style="rounded"; color="#c5cae9";')
    for package, what in PACKAGES.items():
        lines.append(f"    {package} [label=<<b>{package}</b><br/>{_html(what)}>];")
    lines.append("  }")
    lines += [
        '  subgraph cluster_k8s { label="Kubernetes"; style="rounded,dashed"; color="#888888";',
        '    apiserver [label="API server", fillcolor="#e0f2f1"];',
        '    kubelet [label="kubelet and\\ncontainer runtime", fillcolor="#e0f2f1"];',
        '    process [label="the command, in\\nthe pod\'s container", fillcolor="#e0f2f1"];',
        "  }",
        "  { rank=same; app; kuber_exec_cli; }",
        "  { rank=same; kuber_exec_trio; kuber_exec_asyncio; }",
        "  { rank=same; kuber_exec_anyio; apiserver; }",
        "  { rank=same; kuber_exec_sandbox; kuber_exec_core; kubelet; }",
        '  app -> kuber_exec_trio [style=dashed, color="#9e9e9e", arrowhead=open];',
        '  app -> kuber_exec_asyncio [style=dashed, color="#9e9e9e", arrowhead=open];',
    ]
    for importer, imported in sorted(reduced(package_imports(src))):
        lines.append(f'  {importer} -> {imported} [style=dashed, color="#9e9e9e", arrowhead=open];')
    lines += [
        f'  app -> kuber_exec_anyio [{data}, label=" execute()\\n open_interactive()"];',
        f"  kuber_exec_anyio -> kuber_exec_core [{data}, dir=both,"
        ' label=" bytes in,\\n events out"];',
        f'  kuber_exec_anyio -> apiserver [{data}, label="REST reads\\n(httpx)"];',
        f'  kuber_exec_trio -> apiserver [{data}, label=" exec WebSocket"];',
        f"  kuber_exec_asyncio -> apiserver [{data}];",
        f'  apiserver -> kubelet [{data}, label=" exec stream"];',
        f'  kubelet -> process [{data}, dir=both, label=" stdin, stdout, stderr"];',
        '  kuber_exec_sandbox -> apiserver [style=dotted, color="#9e9e9e", arrowhead=none,'
        ' constraint=false, label="stands in for"];',
        "}",
    ]
    return "\n".join(lines) + "\n"


def _html(text: str) -> str:
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("\\n", "<br/>")


DIAGRAMS: dict[str, Callable[[], str]] = {
    "state-machine": state_machine_dot,
    "architecture": architecture_dot,
}

_rendered: dict[str, str] = {}


def render(name: str) -> str:
    """The SVG of diagram ``name`` (cached for the build)."""
    if name not in _rendered:
        _rendered[name] = render_dot(DIAGRAMS[name]())
    return _rendered[name]


def render_dot(dot: str) -> str:
    """``dot`` drawn as SVG by Graphviz's dot layout (WebAssembly, run by Node).

    Raises:
        PluginError: Node or the npm package is missing, or Graphviz reported an error or a
            warning (the build is strict).
    """
    node = shutil.which("node")
    if node is None:
        raise PluginError("Node.js is needed to draw the diagrams (make installs the rest)")
    if not (HOOKS / "node_modules" / "@viz-js" / "viz").is_dir():
        raise PluginError("the diagrams' Graphviz is missing: run make (npm ci in docs/hooks)")
    done = subprocess.run(
        [node, str(RENDERER)],
        input=dot,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise PluginError(f"Graphviz failed on a diagram: {done.stderr.strip()}")
    return done.stdout.replace(f'font-family="{FONT}"', f'font-family="{FONT_FAMILY}"')


def _inline(svg: str) -> str:
    """The ``<svg>`` element alone (no XML declaration, doctype or comments)."""
    return svg[svg.index("<svg") :]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name in DIAGRAMS:
        files.append(File.generated(config, f"diagrams/{name}.svg", content=render(name)))
    return files


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in DIAGRAMS:
            raise PluginError(f"{page.file.src_uri}: no diagram named {name!r}")
        url = "/".join([".."] * page.url.count("/")) or "."
        return (
            f'<figure class="kx-diagram" id="diagram-{name}">{_inline(render(name))}'
            f'<figcaption><a href="{url}/diagrams/{name}.svg">SVG file</a></figcaption></figure>'
        )

    return MARKER.sub(replace, html)
