"""The docs build needs Python and Node only: it passes with no Graphviz anywhere on ``PATH``.

The diagrams are drawn by Graphviz compiled to WebAssembly (``docs/hooks/render_dot.mjs``, from
the npm registry through ``make``), so a machine without the system package builds the same site.
The build here runs with a ``PATH`` that holds ``node`` and nothing else, whatever the machine has
installed: a hook that shelled out to ``dot`` (or to anything else) would fail it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kuber_exec_core.state import SessionState

ROOT = Path(__file__).resolve().parents[2]


def _unavailable(reason: str) -> None:
    """Skip with ``reason``; under ``CI=true`` fail instead (CI must run this build)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the docs build cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def test_the_docs_build_with_only_node_on_path(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    node = shutil.which("node")
    if not mkdocs.is_file():
        _unavailable("the docs extra is not installed (make installs it)")
    if node is None:
        _unavailable("Node.js is not installed")
    assert node is not None
    only_node = tmp_path / "bin"
    only_node.mkdir()
    (only_node / "node").symlink_to(node)
    assert shutil.which("dot", path=str(only_node)) is None
    site = tmp_path / "site"
    env = {**os.environ, "PATH": str(only_node), "NO_MKDOCS_2_WARNING": "1"}
    build = [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(site)]
    done = subprocess.run(build, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    states = (site / "diagrams" / "state-machine.svg").read_text(encoding="utf-8")
    for state in SessionState:
        assert f">{state.name}</text>" in states, state
    architecture = (site / "diagrams" / "architecture.svg").read_text(encoding="utf-8")
    assert ">kuber_exec_core</text>" in architecture
    page = (site / "state-machine" / "index.html").read_text(encoding="utf-8")
    assert '<figure class="kx-diagram" id="diagram-state-machine"><svg' in page
