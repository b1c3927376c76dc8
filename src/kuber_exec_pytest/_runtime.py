"""Which event loop a fixture runs on, and the kuber-exec binding for it."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["binding_for_running_loop", "running_loop"]


def running_loop() -> str:
    """``"trio"`` or ``"asyncio"``: the library running the current task.

    Raises:
        RuntimeError: no event loop is running, or it is neither trio nor asyncio.
    """
    name = _current_library()
    if name not in ("trio", "asyncio"):
        raise RuntimeError(
            "the kuber-exec fixtures kuber_backend and kuber_service run in an async test: "
            "mark it @pytest.mark.trio (pytest-trio) or @pytest.mark.anyio (anyio's plugin)"
            + (f", not under {name}" if name else "")
        )
    return name


def _current_library() -> str | None:
    try:
        import sniffio
    except ImportError:  # pragma: no cover - trio (the sandbox's dependency) brings sniffio
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return "asyncio"
    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None


def binding_for_running_loop() -> ModuleType:
    """``kuber_exec_trio`` or ``kuber_exec_asyncio``, for the loop running now.

    Raises:
        RuntimeError: as :func:`running_loop`, or the binding's extra is not installed.
    """
    loop = running_loop()
    try:
        return importlib.import_module(f"kuber_exec_{loop}")
    except ImportError as error:
        raise RuntimeError(
            f"this test runs on {loop}: install kuber-exec[testing,{loop}] ({error})"
        ) from None
