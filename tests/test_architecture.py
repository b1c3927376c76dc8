"""The house rules of docs/architecture.md: which package may import which, and pinned surfaces.

The rules themselves (:data:`ALLOWED`, :data:`WINGS`) live in ``tests/support/architecture.py``,
which also writes that page's tables and diagram from them and from the code.

Each package may import only the packages below it in the layering; the import scan reads every
module's source (``ast``), so a rule breaks here the moment someone adds the import. A direct
import is not the whole story (a package may reach a forbidden one through an allowed one), so
each package is also imported in a fresh interpreter and what got loaded is checked.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.architecture import ALLOWED, ANYIO, HALL, PAGE, SRC, WINGS, rewrite

#: Third-party libraries a package may not import: what keeps each extra independent.
FORBIDDEN_LIBRARIES: dict[str, set[str]] = {
    "kuber_exec_core": {"anyio", "trio", "asyncio", "httpx", "websockets", "trio_websocket"},
    # Its HTTP client is its own, on h11 (start-up: httpx cost a quarter of `kuber-exec exec`'s).
    "kuber_exec_anyio": {
        "trio",
        "asyncio",
        "websockets",
        "trio_websocket",
        "wsproto",
        "httpx",
        "httpcore",
    },
    "kuber_exec_websocket": {
        "anyio",
        "trio",
        "asyncio",
        "httpx",
        "trio_websocket",
        "h11",
        "wsproto",
    },
    "kuber_exec_trio": {"asyncio", "trio_websocket"},
    "kuber_exec_asyncio": {"trio", "trio_websocket"},
}


#: What importing a package may not load, even through the packages it may import: the
#: libraries of another extra (an asyncio user never loads trio; the sans-IO packages no event
#: loop, no HTTP client) and, for the plugin, anything before a fixture runs.
NEVER_LOADED: dict[str, set[str]] = {
    "kuber_exec_core": {
        "anyio", "trio", "asyncio", "sniffio", "httpx", "httpcore", "websockets",
        "trio_websocket", "h11", "wsproto",
    },
    "kuber_exec_websocket": {
        "anyio", "trio", "asyncio", "sniffio", "httpx", "httpcore", "trio_websocket", "h11",
        "wsproto",
    },
    "kuber_exec_anyio": {
        "trio", "asyncio", "websockets", "trio_websocket", "wsproto", "httpx", "httpcore",
    },
    "kuber_exec_trio": {"asyncio", "trio_websocket", "httpx", "httpcore"},
    "kuber_exec_asyncio": {"trio", "trio_websocket", "httpx", "httpcore"},
    "kuber_exec_pytest": {"anyio", "trio", "asyncio", "httpx", "websockets"},
}  # fmt: skip


#: ``websockets``' clients with I/O of their own: the bindings drive its sans-IO protocol.
_WEBSOCKETS_CLIENTS = (
    "websockets.asyncio",
    "websockets.sync",
    "websockets.legacy",
    "websockets.trio",
    "websockets.server",
)

#: Modules of an allowed library that a package may still not import: both bindings use
#: ``websockets``' sans-IO protocol, never its asyncio (or threaded, or own trio) client.
FORBIDDEN_MODULES: dict[str, tuple[str, ...]] = {
    "kuber_exec_websocket": _WEBSOCKETS_CLIENTS,
    "kuber_exec_trio": _WEBSOCKETS_CLIENTS,
    "kuber_exec_asyncio": _WEBSOCKETS_CLIENTS,
}


def _modules(path: Path) -> set[str]:
    """The full names of the modules ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _private_imports(path: Path, package: str) -> set[str]:
    """Project modules imported by their private (underscored) submodule from another package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top, _, rest = node.module.partition(".")
            private = any(part.startswith("_") for part in rest.split("."))
            if top != package and top.startswith("kuber_exec_") and private:
                found.add(node.module)
    return found


PACKAGES = sorted(p.parent.name for p in SRC.glob("kuber_exec_*/__init__.py"))


def test_the_architecture_page_is_what_the_code_says() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert rewrite(page) == page, "docs/architecture.md is stale: run scripts/architecture.py"


def test_the_page_rewrite_replaces_only_the_generated_parts() -> None:
    page = PAGE.read_text(encoding="utf-8")
    stale = page.replace("| `kuber_exec_core` |", "| `kuber_exec_old` |", 1)
    assert stale != page
    assert rewrite(stale) == page
    with pytest.raises(ValueError, match="no markers"):
        rewrite("# a page without the markers\n")


def test_every_package_has_a_rule() -> None:
    assert set(PACKAGES) <= set(ALLOWED), "a new package needs its line in ALLOWED"
    assert {"kuber_exec_core", "kuber_exec_anyio", "kuber_exec_trio"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_is_below_them(package: str) -> None:
    offending: dict[str, list[str]] = {}
    for path in sorted((SRC / package).rglob("*.py")):
        imported = _imports(path)
        project = {name for name in imported if name.startswith("kuber_exec_")} - {package}
        bad = sorted(project - ALLOWED[package])
        bad += sorted(imported & FORBIDDEN_LIBRARIES.get(package, set()))
        if bad:
            offending[str(path.relative_to(SRC))] = bad
    assert offending == {}


def _reachable(package: str) -> set[str]:
    """The project packages ``package`` may load: what it imports, and what those import."""
    found: set[str] = set()
    todo = [package]
    while todo:
        for allowed in ALLOWED[todo.pop()]:
            if allowed not in found:
                found.add(allowed)
                todo.append(allowed)
    return found


def _loaded_by(package: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after ``import package`` and a touch of
    every name it exports (a lazy export's module is imported only when the name is used)."""
    script = (
        f"import sys, {package}\n"
        f"for name in getattr({package}, '__all__', ()): getattr({package}, name)\n"
        "print(*sorted({m.partition('.')[0] for m in sys.modules}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return set(run.stdout.split())


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_loads_nothing_forbidden(package: str) -> None:
    loaded = _loaded_by(package)
    project = {name for name in loaded if name.startswith("kuber_exec_")} - {package}
    assert sorted(project - _reachable(package)) == []
    assert sorted(loaded & NEVER_LOADED.get(package, set())) == []


def test_the_fresh_interpreter_check_sees_a_transitive_import() -> None:
    # kuber_exec_trio imports anyio only through kuber_exec_anyio: a direct scan misses it.
    assert {"anyio", "kuber_exec_anyio", "trio"} <= _loaded_by("kuber_exec_trio")


@pytest.mark.parametrize("package", sorted(FORBIDDEN_MODULES))
def test_packages_keep_out_of_the_forbidden_parts_of_their_libraries(package: str) -> None:
    forbidden = FORBIDDEN_MODULES[package]
    offending = {
        str(path.relative_to(SRC)): bad
        for path in sorted((SRC / package).rglob("*.py"))
        if (bad := sorted(m for m in _modules(path) if m.startswith(forbidden)))
    }
    assert offending == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_use_each_other_only_through_public_modules(package: str) -> None:
    offending = {
        str(path.relative_to(SRC)): sorted(found)
        for path in sorted((SRC / package).rglob("*.py"))
        if (found := _private_imports(path, package))
    }
    assert offending == {}


def _wing_of(module: str) -> str | None:
    """The wing of ``kuber_exec_anyio``'s ``module`` (``"hall"`` for its top level), or
    ``None`` outside the async layer."""
    top, _, rest = module.partition(".")
    if top != "kuber_exec_anyio":
        return None
    first = rest.partition(".")[0]
    return first if first in WINGS else HALL


def test_the_async_layer_is_a_hall_and_its_wings() -> None:
    folders = {path.parent.name for path in ANYIO.glob("*/__init__.py")}
    assert folders == set(WINGS)
    for wing in WINGS:
        assert (ANYIO / wing / "__init__.py").read_text(encoding="utf-8").startswith('"""')


def test_each_wing_imports_only_what_its_rule_allows() -> None:
    offending: dict[str, list[str]] = {}
    for path in sorted(ANYIO.rglob("*.py")):
        module = _module_name(path)
        wing = _wing_of(module)
        assert wing is not None
        if wing == HALL:
            continue
        reached = {_wing_of(target) for target in _absolute_imports(path, module)}
        bad = sorted(w for w in reached if w is not None and w != wing and w not in WINGS[wing])
        if bad:
            offending[str(path.relative_to(SRC))] = bad
    assert offending == {}


def _absolute_imports(path: Path, module: str) -> set[str]:
    """The modules ``path`` (the module ``module``) imports, relative imports resolved."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            found.add(origin)
    return found


def _private_name(name: str) -> bool:
    # ``_x`` and ``__x``, not dunders (``__aenter__``) nor Enum's sunders (``_value2member_map_``).
    return name.startswith("_") and not name.endswith("_")


def _defined_privately(tree: ast.Module) -> set[str]:
    """The private names a module defines for its own objects: ``self._x = …``, methods and
    class attributes named ``_x``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private_name(node.name):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if _private_name(node.attr):
                names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                targets = statement.targets if isinstance(statement, ast.Assign) else []
                if isinstance(statement, ast.AnnAssign):
                    targets = [statement.target]
                names.update(
                    t.id for t in targets if isinstance(t, ast.Name) and _private_name(t.id)
                )
    return names


#: The standard library's public names that start with an underscore.
PUBLIC_UNDERSCORED = frozenset({"os._exit"})


def _foreign_private_reads(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls`` and ``_name`` is not this module's own
    (nor a public name of the standard library's, :data:`PUBLIC_UNDERSCORED`)."""
    tree = ast.parse(source)
    own = _defined_privately(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private_name(node.attr):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in own and ast.unparse(node) not in PUBLIC_UNDERSCORED:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_private_attributes() -> None:
    # Modules talk through public names; what one module keeps private (its ``_x``) no other
    # reads, so a refactor of one module's internals cannot break a sibling (issue 18).
    offending = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if (found := _foreign_private_reads(path.read_text(encoding="utf-8")))
    }
    assert offending == {}


def test_the_private_attribute_rule_catches_a_read() -> None:
    source = "class A:\n    def f(self, other):\n        return other._secret, other.__x__\n"
    assert _foreign_private_reads(source) == ["line 3: other._secret"]
    assert _foreign_private_reads("import os\nos._exit(0)\nos._secret\n") == ["line 3: os._secret"]
    # The module's own private names (here an attribute it sets) may be read on its objects.
    assert _foreign_private_reads(source + "    def g(self):\n        self._secret = 1\n") == []


#: The pinned public surfaces: changing one is an API change, made here on purpose.
CORE_NAMES = {
    "ExecError", "ExecErrorCode", "ExecOutputLimitError", "StreamName",
    "ExecLimits", "ExecRequest", "Impersonation", "Workspace",
    "EXEC_MANAGED_BY_LABEL", "EXEC_MANAGED_BY_VALUE", "EXEC_WORKSPACE_UID_LABEL",
    "Deployment", "FetchDeployment", "FetchPods", "LabelSelector", "Pod", "PodContainer",
    "ResolvedTarget", "TargetResolution", "TargetResolved",
    "ClientFrame", "Close", "Error", "Exit", "Resize", "ServerFrame", "Stderr", "Stdin",
    "Stdout", "stdin_bytes",
    "DEFAULT_SUBPROTOCOLS", "NEED_DATA", "SESSION_ENDED", "ExecResult", "ExecSession",
    "ExecStreams", "ExecuteRun", "Subprotocol",
}  # fmt: skip

#: How many names every runtime binding exports besides its own ``KubernetesBackend`` and
#: ``connect_exec`` (``kuber_exec_anyio.BINDING_NAMES``, listed once in
#: ``kuber_exec_anyio.binding``): changing it is an API change, made here on purpose.
#: (Issue 38 added 6: shared sessions; issue 37 added 11: attach, logs and debug containers;
#: issue 36 added 3: BoundPort, PortForward, PortForwardRecord.)
BINDING_NAME_COUNT = 58


def test_the_core_surface_is_pinned_and_h11_sized() -> None:
    import kuber_exec_core

    assert set(kuber_exec_core.__all__) == CORE_NAMES
    assert len(kuber_exec_core.__all__) <= 40


@pytest.mark.parametrize("binding", ["kuber_exec_trio", "kuber_exec_asyncio"])
def test_each_runtime_binding_exports_exactly_the_shared_names(binding: str) -> None:
    import kuber_exec_anyio
    import kuber_exec_anyio.binding

    shared = kuber_exec_anyio.BINDING_NAMES
    assert len(set(shared)) == len(shared) == BINDING_NAME_COUNT
    assert set(CORE_NAMES) & set(shared) <= set(kuber_exec_anyio.__all__)
    module = importlib.import_module(binding)
    assert module.__all__ == [*shared, "KubernetesBackend", "connect_exec"]
    # The same objects as the async layer's, and no public name beyond them (but submodules).
    assert [n for n in shared if getattr(module, n) is not getattr(kuber_exec_anyio, n)] == []
    public = {n for n in vars(module) if n.isidentifier() and not n.startswith("_")}
    unlisted = public - set(module.__all__)
    assert {n for n in unlisted if not inspect.ismodule(getattr(module, n))} == set()


def _type_checking_imports(module: Path) -> dict[str, set[str]]:
    """What a lazy facade imports under ``if typing.TYPE_CHECKING:``: module (dotted as written) to
    the names it takes from it."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
    )
    imports: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        names = imports.setdefault("." * node.level + (node.module or ""), set())
        for alias in node.names:
            assert alias.asname in (None, alias.name), ast.unparse(node)  # re-exported as is
            names.add(alias.name)
    return imports


def test_the_shared_names_are_the_binding_modules_imports() -> None:
    import kuber_exec_anyio
    import kuber_exec_anyio.binding

    binding = kuber_exec_anyio.binding
    # What type checkers see (the TYPE_CHECKING imports) is what the runtime table serves.
    homes = {module: set(names) for module, names in binding._HOMES.items()}
    assert _type_checking_imports(SRC / "kuber_exec_anyio" / "binding.py") == homes
    imported = {name for names in homes.values() for name in names}
    assert binding.__all__ == list(kuber_exec_anyio.BINDING_NAMES)
    assert set(binding.__all__) == imported
    assert {n for n in dir(binding) if not n.startswith("_")} >= imported
    public = {n for n in vars(binding) if n.isidentifier() and not n.startswith("_")}
    assert public <= imported
    # CleanupStatus: what ExecService.cleanup_status returns (docs/cleanup.md), for annotations.
    assert set(kuber_exec_anyio.__all__) == {
        "BINDING_NAMES", "BackendHooks", "CleanupStatus", "KubernetesBackend", *binding.__all__
    }  # fmt: skip


def test_the_core_s_names_are_its_type_checking_imports() -> None:
    import kuber_exec_core

    # The core's package exports lazily too (kuber-exec --help must not build every class):
    # what type checkers see is what the runtime table serves, and __all__ is exactly that.
    homes = {module: set(names) for module, names in kuber_exec_core._HOMES.items()}
    assert _type_checking_imports(SRC / "kuber_exec_core" / "__init__.py") == homes
    assert set(kuber_exec_core.__all__) == {name for names in homes.values() for name in names}
    assert len(kuber_exec_core.__all__) == len(set(kuber_exec_core.__all__))


def test_the_limits_lazy_names_are_its_type_checking_imports() -> None:
    import kuber_exec_core.limits

    # The Lease arithmetic is exported lazily (an exec does not build its classes): what type
    # checkers see is what the runtime table serves, and every name of it is in __all__.
    homes = {module: set(names) for module, names in kuber_exec_core.limits._HOMES.items()}
    assert _type_checking_imports(SRC / "kuber_exec_core" / "limits.py") == homes
    assert {name for names in homes.values() for name in names} <= set(
        kuber_exec_core.limits.__all__
    )


def test_help_loads_none_of_the_core_s_session_machinery() -> None:
    script = (
        "import sys\nfrom kuber_exec_cli._main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(*sorted(sys.modules), file=sys.stderr)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert "usage:" in run.stdout, run.stderr
    loaded = run.stderr.split()
    heavy = ("kuber_exec_core._session", "kuber_exec_core._exec_url", "kuber_exec_core._kube_api")
    assert [m for m in loaded if m.startswith(heavy)] == []
    assert [m for m in loaded if m.startswith(("trio", "anyio", "websockets"))] == []


def test_the_bindings_share_one_implementation() -> None:
    import kuber_exec_asyncio
    import kuber_exec_trio

    for name in ("ExecService", "InteractiveSession", "ClusterConfig", "ExecRequest"):
        assert getattr(kuber_exec_trio, name) is getattr(kuber_exec_asyncio, name)
    # Only the transport differs.
    trio_backend: object = kuber_exec_trio.KubernetesBackend
    assert trio_backend is not kuber_exec_asyncio.KubernetesBackend
    assert (
        kuber_exec_trio.KubernetesBackend.__mro__[1]
        is kuber_exec_asyncio.KubernetesBackend.__mro__[1]
    )


#: Modules an app that only execs never loads: importing a runtime binding and running an exec
#: must not pay for port-forward, copying, debug containers or shared sessions (start-up of
#: ``kuber-exec exec``, issue 35). ``kuber_exec_anyio.binding`` exports their names lazily.
EXEC_NEVER_LOADS = (
    "kuber_exec_anyio._portforward",
    "kuber_exec_anyio._copy",
    "kuber_exec_anyio._debug",
    "kuber_exec_anyio._shared",
    "kuber_exec_core.portforward",
    "kuber_exec_core.sharing",
    # Debug containers, recordings and the Lease slots of cluster-wide limits: loaded when a
    # service is given a debug policy, a recording or cluster_slots, or opens a debug session.
    "kuber_exec_core.debug",
    "kuber_exec_core.asciicast",
    "kuber_exec_core._lease_slots",
    "kuber_exec_core._session_record",
    "kuber_exec_anyio._audit._recording",
    "kuber_exec_anyio._kubernetes._lease_slots",
    "kuber_exec_core.tar",
    "kuber_exec_core.copy",
)


@pytest.mark.parametrize("binding", ["kuber_exec_trio", "kuber_exec_asyncio"])
def test_an_exec_only_app_loads_none_of_the_other_features(binding: str) -> None:
    script = (
        f"import sys\nfrom {binding} import ExecService, ExecRequest, KubernetesBackend\n"
        "print(*sorted(sys.modules))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert run.returncode == 0, run.stderr
    loaded = run.stdout.split()
    assert [m for m in loaded if m.startswith(EXEC_NEVER_LOADS)] == []
    # ... and the first use of a lazy name imports its module and is the same object after.
    module = importlib.import_module(binding)
    assert (
        module.PortForward
        is module.PortForward
        is importlib.import_module("kuber_exec_anyio._portforward._forward").PortForward
    )
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018


@pytest.mark.parametrize(
    "module", ["kuber_exec_core.state", "kuber_exec_core.channels", "kuber_exec_core.kube",
               "kuber_exec_core.server", "kuber_exec_core.limits", "kuber_exec_core.watch",
               "kuber_exec_core.validation", "kuber_exec_core.supervision",
               "kuber_exec_core.asciicast", "kuber_exec_core.transport",
               "kuber_exec_core.copy", "kuber_exec_core.tar",
               "kuber_exec_anyio.transport", "kuber_exec_anyio.binding",
               "kuber_exec_anyio.testing"],
)  # fmt: skip
def test_public_submodules_resolve(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__all__
    assert [name for name in imported.__all__ if not hasattr(imported, name)] == []


def test_docstrings_cite_no_numbered_protocol_sections() -> None:
    # docs/protocol.md has no numbered sections: a "protocol.md §3" reference leads nowhere.
    cited = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if "protocol.md §" in path.read_text(encoding="utf-8")
    ]
    assert cited == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported: its top level, and the branches of
    its top-level ``if`` and ``try`` blocks, but not ``if TYPE_CHECKING:`` (never run)."""
    for node in body:
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _module_level(part)
        else:
            yield node


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Which modules each module imports as it is imported, among ``sources`` (a module's name:
    its source and whether it is a package's ``__init__``). ``from pkg import sub`` is an
    import of ``pkg.sub`` when that is a module, of ``pkg`` otherwise; the parent packages an
    import initialises first are not counted (Python finishes them before the child)."""
    graph: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        package = name if is_package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _module_level(ast.parse(source).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                origin = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                targets = [
                    f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in sources else origin
                    for alias in node.names
                ]
            else:
                continue
            edges.update(target for target in targets if target in sources and target != name)
        graph[name] = edges
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or around a circle: each strongly
    connected component of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circles_in_src() -> None:
    # A circle makes the modules' import order matter and hides which one owns a rule
    # (issue 33: _request ⇄ _rules, _limits ⇄ _session).
    sources = {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(SRC.rglob("*.py"))
    }
    assert import_circles(import_graph(sources)) == []


def test_the_circle_check_finds_a_circle() -> None:
    sources = {
        "pkg": ("", True),
        "pkg._a": ("from ._b import x\n", False),
        "pkg._b": ("from . import _c\n", False),
        "pkg._c": ("import pkg._a\n", False),
        "pkg._d": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._a import y\n",
            False,
        ),
    }
    graph = import_graph(sources)
    assert graph["pkg._d"] == set()  # an annotation-only import runs never
    assert import_circles(graph) == [["pkg._a", "pkg._b", "pkg._c"]]
    sources["pkg._c"] = ("import os\n", False)
    assert import_circles(import_graph(sources)) == []


TESTS = SRC.parent / "tests"


def _imports_of_test_modules(path: Path) -> list[str]:
    """The test modules and conftests ``path`` imports (relative or by name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [alias.name for alias in node.names if not node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            last = name.rpartition(".")[2]
            if last == "conftest" or last.startswith("test_"):
                found.append(name)
    return found


def test_tests_share_helpers_through_support_not_through_each_other() -> None:
    # Shared helpers live in tests/support (or a folder's own helper modules, such as the
    # real-cluster tier's kube.py and wire.py); a test module or a conftest imported by another
    # test drags its fixtures and tests along.
    offending = {
        str(path.relative_to(TESTS)): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := _imports_of_test_modules(path))
    }
    assert offending == {}
