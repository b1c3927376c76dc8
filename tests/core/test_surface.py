"""The core's shape: no I/O, typed packages, a public surface that resolves."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import kuber_exec_core

SRC = Path(__file__).resolve().parents[2] / "src"
CORE = SRC / "kuber_exec_core"

# Modules that do I/O, read a clock, start threads, use randomness or the environment, or are an
# event loop: none of them may be imported by the core (the adapters do that).
FORBIDDEN = {
    "_thread",
    "anyio",
    "asyncio",
    "concurrent",
    "datetime",
    "http",
    "httpx",
    "kubernetes",
    "logging",
    "multiprocessing",
    "os",
    "pathlib",
    "random",
    "requests",
    "secrets",
    "select",
    "selectors",
    "shutil",
    "signal",
    "socket",
    "socketserver",
    "ssl",
    "subprocess",
    "tempfile",
    "threading",
    "time",
    "trio",
    "trio_websocket",
    "urllib.request",
    "websockets",
}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            names.add("__import__")
    return names


def _forbidden(name: str) -> bool:
    parts = name.split(".")
    return any(".".join(parts[: i + 1]) in FORBIDDEN for i in range(len(parts)))


CORE_FILES = sorted(CORE.rglob("*.py"))  # the tar package too


def test_the_scan_sees_every_module() -> None:
    found = {p.relative_to(CORE).as_posix() for p in CORE_FILES}
    assert found >= {"__init__.py", "_session.py", "testing/__init__.py", "testing/_server.py"}
    assert _forbidden("os.path")
    assert _forbidden("urllib.request")
    assert not _forbidden("urllib.parse")
    assert _imported_modules(CORE / "_kube_api.py") >= {"json", "urllib.parse"}


@pytest.mark.parametrize("path", CORE_FILES, ids=[str(p.relative_to(CORE)) for p in CORE_FILES])
def test_core_modules_import_no_io(path: Path) -> None:
    imported = _imported_modules(path)
    assert "__import__" not in imported
    assert sorted(name for name in imported if _forbidden(name)) == []


def test_importing_the_core_loads_no_runtime() -> None:
    # The standard library may pull in a few helpers (threading, for one) on its own; what matters
    # is that no event loop, network or HTTP library comes with the core.
    meaningful = ["trio", "asyncio", "trio_websocket", "websockets", "httpx", "socket", "ssl"]
    code = (
        "import json, sys\n"
        "import kuber_exec_core\n"
        f"print(json.dumps([m for m in {meaningful!r} if m in sys.modules]))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC)},
    )
    assert json.loads(completed.stdout) == []


@pytest.mark.parametrize(
    "package", sorted(p.parent.name for p in SRC.glob("*/__init__.py")), ids=str
)
def test_every_package_is_typed(package: str) -> None:
    assert (SRC / package / "py.typed").is_file()


def test_every_public_name_resolves() -> None:
    names = kuber_exec_core.__all__
    assert len(names) == len(set(names)), "duplicates in __all__"
    missing = [name for name in names if not hasattr(kuber_exec_core, name)]
    assert missing == []
    # Public names are not private modules' leftovers.
    assert all(not name.startswith("_") for name in names)


def test_testing_module_surface() -> None:
    from kuber_exec_core import testing

    missing = [name for name in testing.__all__ if not hasattr(testing, name)]
    assert missing == []


@pytest.mark.parametrize(
    ("name", "home"),
    [("ApiGet", "kube"), ("state_diagram", "state"), ("ServerChannel", "server"),
     ("decode_message", "channels"), ("DEFAULT_OUTPUT_CAP_BYTES", "limits"),
     ("validate_request", "validation")],
)  # fmt: skip
def test_specialised_names_live_in_their_submodule_only(name: str, home: str) -> None:
    import importlib

    assert name in importlib.import_module(f"kuber_exec_core.{home}").__all__
    assert name not in kuber_exec_core.__all__
    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(kuber_exec_core, name)


@pytest.mark.parametrize(
    "name",
    # Public in a submodule, never top-level.
    ["Guard", "GUARDS", "GUARD_REFUSALS", "TERMINAL_STATES", "MAX_TERMINAL_DIMENSION",
     "CLOSE_STDIN_PAYLOAD", "InvalidRule", "TargetRefusal", "no_such_name"],
)  # fmt: skip
def test_a_name_that_was_never_top_level_is_an_attribute_error(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(kuber_exec_core, name)
