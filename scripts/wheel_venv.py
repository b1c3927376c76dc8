"""Build kuber-exec's wheel from this tree and install it in a fresh virtual environment.

    python scripts/wheel_venv.py [DIR]      (default: build/wheel-venv)

What a new user gets: ``pip wheel . --no-deps`` into ``DIR/dist``, then ``python -m venv
DIR/venv`` and one ``pip install`` of the wheel with the extras the tests use
(``testing,trio,asyncio,web,web-trio,cli``) and of ``examples/platform-tests``, whose only
dependency is the published package: every other package comes from the configured index. The
venv is made again only when the wheel's contents changed (``DIR/venv/.wheel-record`` holds
the wheel's RECORD): ``make test`` builds it once and ``make test-browser`` reuses it, because
the browser tier runs where there is no network.

Prints the venv's path on its last line. Exits non-zero (with pip's output) on any failure.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "build" / "wheel-venv"
EXTRAS = "testing,trio,asyncio,web,web-trio,cli"
EXAMPLE = ROOT / "examples" / "platform-tests"
_STAMP = ".wheel-record"


def build_wheel(dist: Path) -> Path:
    """``pip wheel . --no-deps`` into ``dist`` (emptied first); the wheel's path."""
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)]
    subprocess.run(pip, check=True)
    (wheel,) = dist.glob("kuber_exec-*.whl")
    return wheel


def record_digest(wheel: Path) -> str:
    """A digest of the wheel's RECORD: its files and their hashes, not its timestamps."""
    with zipfile.ZipFile(wheel) as archive:
        (record,) = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
        return hashlib.sha256(archive.read(record)).hexdigest()


def ensure_venv(directory: Path = DEFAULT_DIR) -> Path:
    """The venv at ``directory/venv`` with this tree's wheel installed; made if stale."""
    wheel = build_wheel(directory / "dist")
    venv = directory / "venv"
    digest = record_digest(wheel)
    stamp = venv / _STAMP
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # From a copy: pip builds a local project in place, and its build/ must not land in the tree.
    example = directory / "example-src"
    shutil.rmtree(example, ignore_errors=True)
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run([*install, f"{wheel}[{EXTRAS}]", str(example)], check=True)
    stamp.write_text(digest + "\n")
    return venv


def main() -> int:
    directory = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_DIR
    print(ensure_venv(directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
