"""The ``cri_runtime`` fixture: a private containerd whose CRI streaming server answers on loopback.

The client tests run under both adapters, as tests/conformance does: ``anyio_backend`` is
parametrized over trio and asyncio and ``adapter`` is the module of the running event loop.

Every test in this folder gets the ``runtime`` marker (deselect with ``-m "not runtime"``).
When the runtime cannot be provided (not root, packages missing and not installable, containerd or
runc failing), the fixture skips the test with the reason; when the environment variable ``CI`` is
``true`` it fails instead, so CI never silently loses the ground-truth tests.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from .cri_runtime import CriRuntime, RuntimeUnavailable, ensure_packages, running_cri_runtime

_HERE = Path(__file__).resolve().parent


def runtime_unavailable(reason: str) -> NoReturn:
    """Skip, or under ``CI=true`` fail, with ``reason``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"real container runtime unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"real container runtime unavailable: {reason}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items: mark only the ones in this folder.
    for item in items:
        if item.path.resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.runtime)


@pytest.fixture(scope="session")
def cri_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CriRuntime]:
    """A running containerd with one host-network pod and a ``sleep`` busybox container.

    ``cri_runtime.exec_url(["echo", "hi"])`` returns a fresh single-use exec URL
    (``http://127.0.0.1:PORT/exec/TOKEN``) on its streaming server. Everything is torn down at the
    end of the session.
    """
    with contextlib.ExitStack() as stack:
        try:
            ensure_packages()
            runtime = stack.enter_context(running_cri_runtime(tmp_path_factory.mktemp("cri")))
        except RuntimeUnavailable as exc:
            runtime_unavailable(str(exc))
        yield runtime
