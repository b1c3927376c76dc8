"""The API reference (docs/reference/) documents every public name of the library's packages.

The reference pages are lists of mkdocstrings directives (``::: dotted.path``), grouped the way a
user looks for them. A name in a package's ``__all__`` counts as documented when some directive
renders that very object under that name: ``kuber_exec_trio.ExecService`` is documented by
``::: kuber_exec_anyio.ExecService``, since it is the same class. The test reads the markdown,
so it needs no docs build; ``make docs`` (strict) checks that every directive renders.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: ([A-Za-z_][\w.]*)\s*$", re.MULTILINE)

#: The documented import packages; their public submodules are found, not listed.
TOP_PACKAGES = (
    "kuber_exec_core",
    "kuber_exec_anyio",
    "kuber_exec_trio",
    "kuber_exec_asyncio",
    "kuber_exec_pytest",
)


def public_modules() -> list[str]:
    names: list[str] = []
    for top in TOP_PACKAGES:
        package = importlib.import_module(top)
        names.append(top)
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                names.append(f"{top}.{info.name}")
    return names


def resolve(path: str) -> object:
    """The object a directive's dotted path names (a module, or an attribute of one)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            current: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            current = getattr(current, part)
        return current
    raise ImportError(path)


def directives() -> dict[str, list[str]]:
    """Each directive's path, with the reference pages it is on."""
    found: dict[str, list[str]] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for path in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            found.setdefault(path, []).append(page.name)
    return found


def documented(module: ModuleType, name: str, paths: dict[str, object]) -> bool:
    obj = getattr(module, name)
    return any(path.rpartition(".")[2] == name and target is obj for path, target in paths.items())


def test_the_reference_has_directives() -> None:
    assert len(directives()) > 100


def test_every_directive_names_a_public_object() -> None:
    for path in directives():
        resolve(path)
        assert not any(part.startswith("_") for part in path.split(".")), path


def test_no_object_is_documented_twice_under_one_path() -> None:
    twice = {path: pages for path, pages in directives().items() if len(pages) > 1}
    assert twice == {}


@pytest.mark.parametrize("module_name", public_modules())
def test_every_public_name_is_in_the_reference(module_name: str) -> None:
    module = importlib.import_module(module_name)
    paths = {path: resolve(path) for path in directives()}
    assert module_name in paths, f"the reference has no section for {module_name}"
    missing = [name for name in module.__all__ if not documented(module, name, paths)]
    assert missing == [], f"{module_name}: not in docs/reference/: {missing}"


def test_every_reference_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    in_nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?(reference/[\w-]+\.md)\s*$", config, re.M))
    on_disk = {f"reference/{page.name}" for page in REFERENCE.glob("*.md")}
    assert in_nav == on_disk
