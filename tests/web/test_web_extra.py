"""``pip install kuber-exec[web]`` brings what the asyncio web app needs, and no trio.

The app (``kuber_exec_web``) runs on the asyncio binding under uvicorn; only the
``kuber-exec web --sandbox`` demo runs the sandbox, which is trio code, and it asks for it by name
when it is missing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9._-]+")
SELF_EXTRAS = re.compile(r"^kuber-exec\[([^\]]+)\]$")


def extra_distributions(extra: str) -> set[str]:
    """Every distribution ``kuber-exec[extra]`` installs (the project's own extras followed)."""
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    found: set[str] = set()
    seen: set[str] = set()
    pending = [extra]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in optional[name]:
            if match := SELF_EXTRAS.match(requirement):
                pending += [part.strip() for part in match.group(1).split(",")]
            else:
                distribution = REQUIREMENT_NAME.match(requirement)
                assert distribution is not None, requirement
                found.add(distribution.group(0).lower())
    return found


def test_the_closure_follows_the_projects_own_extras() -> None:
    assert {"trio", "hypercorn", "starlette"} <= extra_distributions("web-trio")
    assert "hypothesis" in extra_distributions("test")


def test_the_web_extra_installs_the_asyncio_app_and_no_trio() -> None:
    web = extra_distributions("web")
    assert {"starlette", "uvicorn", "websockets", "anyio", "h11"} <= web
    assert web.isdisjoint({"trio", "trio-websocket", "hypercorn", "wsproto"}), web


def test_the_web_app_and_its_demo_module_load_no_trio() -> None:
    code = (
        "import json, sys\n"
        "import kuber_exec_web, kuber_exec_web.demo\n"
        "print(json.dumps(sorted(m for m in ('trio', 'trio_websocket', 'kuber_exec_sandbox',"
        " 'kuber_exec_trio') if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC)},
    )
    assert json.loads(done.stdout) == []


def test_the_sandbox_demo_names_the_missing_extra() -> None:
    # The sandbox made unimportable, as without the sandbox extra.
    code = (
        "import sys\n"
        "sys.modules['kuber_exec_sandbox'] = None\n"
        "from kuber_exec_web.demo import main\n"
        "sys.exit(main(['--sandbox']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 125, done.stderr
    assert "EXEC_FAILED: --sandbox needs the sandbox" in done.stderr
    assert "pip install 'kuber-exec[web,sandbox]'" in done.stderr
    assert done.stdout == ""
