"""The one private anyio API the async layer uses, ``anyio._core._eventloop.get_async_backend``
(``InteractiveSession`` looks the running backend up once instead of on every frame): pinned
below anyio 5 in pyproject.toml, and checked here on both runtimes so that an anyio release that
moves or changes it fails this test by name, not a session somewhere."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import anyio
import pytest
from anyio._core._eventloop import get_async_backend

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_anyio_requirement_has_an_upper_bound_the_installed_anyio_meets() -> None:
    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    [requirement] = [r for r in extras["optional-dependencies"]["anyio"] if r.startswith("anyio")]
    # 4.7: anyio.wait_readable / wait_writable / notify_closing (the forward's listeners).
    assert requirement == "anyio>=4.7,<5"
    assert int(version("anyio").split(".")[0]) == 4


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_the_running_backend_checkpoints_if_cancelled(backend: str) -> None:
    async def main() -> None:
        checkpoint = get_async_backend().checkpoint_if_cancelled
        await checkpoint()  # not cancelled: returns
        with anyio.CancelScope() as scope:
            scope.cancel()
            await checkpoint()
            raise AssertionError("checkpoint_if_cancelled did not raise in a cancelled scope")
        assert scope.cancelled_caught

    anyio.run(main, backend=backend)
