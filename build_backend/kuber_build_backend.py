"""The build backend: setuptools' own, plus the browser terminal's npm assets in the wheel.

``kuber_exec_web`` serves xterm.js, its fit addon and asciinema-player from a ``node_modules`` next
to it, which the repository never holds: ``npm ci`` makes it from ``package-lock.json`` (the pinned
versions, with their integrity hashes). Building a wheel (from the tree or from the sdist) runs
``npm ci`` when that ``node_modules`` is missing or does not match the lockfile, then copies what
the app serves (the scripts, the stylesheet, the source maps, the licences) into the wheel.
Editable installs use the source tree's ``node_modules`` as it is (``make`` runs ``npm ci``). The
only network a build needs beyond Python's package index is npm's registry, and only without a
matching ``node_modules``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from setuptools.build_meta import *  # noqa: F403 - the PEP 517 hooks, unchanged
from setuptools.command.build_py import build_py as _setuptools_build_py

WEB = Path(__file__).resolve().parent.parent / "src" / "kuber_exec_web"

#: Each npm package the app serves, and its files that go into the wheel.
ASSETS: dict[str, tuple[str, ...]] = {
    "@xterm/xterm": (
        "LICENSE",
        "package.json",
        "css/xterm.css",
        "lib/xterm.js",
        "lib/xterm.js.map",
    ),
    "@xterm/addon-fit": (
        "LICENSE",
        "package.json",
        "lib/addon-fit.js",
        "lib/addon-fit.js.map",
    ),
    # The replay page's player: one self-contained script (its terminal emulator is WebAssembly
    # inlined in it) and its stylesheet.
    "asciinema-player": (
        "LICENSE",
        "package.json",
        "dist/bundle/asciinema-player.min.js",
        "dist/bundle/asciinema-player.css",
    ),
}


def _locked_versions(web: Path) -> dict[str, str]:
    lock = json.loads((web / "package-lock.json").read_text(encoding="utf-8"))
    packages = lock.get("packages", {})
    return {name: packages[f"node_modules/{name}"]["version"] for name in ASSETS}


def _installed_version(web: Path, name: str) -> str | None:
    manifest = web / "node_modules" / name / "package.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def _matches_lock(web: Path) -> bool:
    locked = _locked_versions(web)
    for name, files in ASSETS.items():
        if _installed_version(web, name) != locked[name]:
            return False
        if not all((web / "node_modules" / name / file).is_file() for file in files):
            return False
    return True


def ensure_node_modules(web: Path = WEB) -> None:
    """Run ``npm ci`` in ``web`` unless its ``node_modules`` already matches the lockfile.

    Raises:
        RuntimeError: npm is not installed, ``npm ci`` failed, or its result does not match.
    """
    if _matches_lock(web):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "building kuber-exec's wheel bundles xterm.js from npm: install Node.js and npm, "
            f"or run `npm ci` in {web} first"
        )
    command = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"]
    done = subprocess.run(command, cwd=web, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`npm ci` failed in {web} (exit status {done.returncode})")
    if not _matches_lock(web):
        raise RuntimeError(f"`npm ci` in {web} did not install the locked front-end files")


def bundle_assets(destination: Path, web: Path = WEB) -> list[Path]:
    """Copy the served npm files into ``destination/node_modules``; return what was written."""
    written: list[Path] = []
    for name, files in ASSETS.items():
        for file in files:
            target = destination / "node_modules" / name / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(web / "node_modules" / name / file, target)
            written.append(target)
    return written


class build_py(_setuptools_build_py):
    """setuptools' ``build_py``, then the browser terminal's npm assets (not when editable)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            ensure_node_modules()
            bundle_assets(Path(self.build_lib) / "kuber_exec_web")
