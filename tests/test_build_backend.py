"""The in-tree build backend (build_backend/): xterm.js from the npm lockfile into the wheel.

The slow test that builds the real wheel and installs it is tests/examples/test_wheel_venv.py;
these check the backend's own decisions on a copy of the web package's lockfile.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_backend"))

import kuber_build_backend as backend  # noqa: E402 - after its folder is on the path

WEB = ROOT / "src" / "kuber_exec_web"


def fake_web(tmp_path: Path, *, version_of: dict[str, str] | None = None) -> Path:
    """A web package folder: the real lockfile, and a node_modules with the served files."""
    web = tmp_path / "web"
    web.mkdir()
    shutil.copyfile(WEB / "package-lock.json", web / "package-lock.json")
    locked = backend._locked_versions(web)
    for name, files in backend.ASSETS.items():
        for file in files:
            path = web / "node_modules" / name / file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{name}/{file}\n")
        manifest = {"name": name, "version": (version_of or {}).get(name, locked[name])}
        (web / "node_modules" / name / "package.json").write_text(json.dumps(manifest))
    return web


def test_the_lockfile_pins_what_the_app_serves() -> None:
    locked = backend._locked_versions(WEB)
    dependencies = json.loads((WEB / "package.json").read_text())["dependencies"]
    assert locked == dependencies  # exact versions, both ways


def test_a_matching_node_modules_is_used_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    web = fake_web(tmp_path)
    monkeypatch.setenv("PATH", "")  # no npm: it must not be needed
    backend.ensure_node_modules(web)
    written = backend.bundle_assets(tmp_path / "wheel", web)
    relative = sorted(str(path.relative_to(tmp_path / "wheel")) for path in written)
    assert relative == sorted(
        f"node_modules/{name}/{file}" for name, files in backend.ASSETS.items() for file in files
    )
    assert (tmp_path / "wheel/node_modules/@xterm/xterm/lib/xterm.js").read_text() == (
        "@xterm/xterm/lib/xterm.js\n"
    )


@pytest.mark.parametrize("broken", ["other version", "missing file"])
def test_a_stale_node_modules_needs_npm_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    if broken == "other version":
        web = fake_web(tmp_path, version_of={"@xterm/xterm": "5.0.0"})
    else:
        web = fake_web(tmp_path)
        (web / "node_modules/@xterm/addon-fit/lib/addon-fit.js").unlink()
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match=r"bundles xterm\.js from npm: install Node\.js and npm"):
        backend.ensure_node_modules(web)
