"""Names a package exports without importing the modules that define them until first use.

Why: importing a runtime binding to run one command (``kuber-exec exec``, a service that only
execs) must not pay for port-forward, copying, debug containers and shared sessions, nor
``kuber-exec --help`` for the core's session machinery (issue 35's start-up). It lives in the
core, the bottom layer, so that the core's own package and the async layer's facades share it.
A facade module lists where each name lives and installs :func:`lazy_exports`' ``__getattr__``
and ``__dir__`` (PEP 562); the first access imports the home module and caches the object in
the facade's namespace, so later accesses are plain global lookups and ``is`` identity holds.

The facade imports the same names under ``typing.TYPE_CHECKING`` so type checkers and the docs
see ordinary re-exports; ``tests/test_architecture.py`` checks those imports and the table agree.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: MutableMapping[str, object], homes: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a facade module whose names live elsewhere.

    ``namespace`` is the facade's ``globals()``; ``homes`` maps a module (absolute, or relative
    to the facade's package when it starts with a dot) to the names the facade takes from it.
    An unknown name raises ``AttributeError``, as a module without the name would.
    """
    facade = str(namespace["__name__"])
    package = str(namespace.get("__package__") or facade.rpartition(".")[0])
    where = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {facade!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
