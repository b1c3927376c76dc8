"""What every test folder shares: hypothesis profiles, adapter parametrization, leak checks.

``default`` keeps a local run quick; ``ci`` (selected when the environment variable ``CI`` is
``true``) runs more examples and drops the per-example deadline, which shared CI machines miss.
``HYPOTHESIS_PROFILE`` overrides the choice. Tests marked for anyio run under both adapters:
``anyio_backend`` is parametrized over trio and asyncio and ``adapter`` is the matching package.
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

import kuber_exec_asyncio
import kuber_exec_trio

# tests/plugin runs pytest inside pytest to check the kuber-exec plugin's options and skips.
pytest_plugins = ("pytester",)

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci",
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "default")
)


def pytest_configure(config: pytest.Config) -> None:
    # Start from the signal dispositions a terminal gives, however the run was launched: a
    # shell's `cmd &` or `nohup` leaves SIGINT, SIGQUIT or SIGHUP ignored, every process the
    # tests start (the sandbox's pod processes, the CLI) inherits that, and the tests of
    # hang-ups and interrupts then see a shell that outlives its HUP or a CLI that ignores ^C.
    del config
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _unclosed_resources_fail_their_own_test() -> Iterator[None]:
    # An unclosed socket is reported when it is collected; collect now, so that the
    # ResourceWarning (an error under filterwarnings=error) names the test that leaked it.
    yield
    gc.collect()


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each anyio test under trio and under asyncio."""
    return str(request.param)


@pytest.fixture
def adapter(anyio_backend: str) -> ModuleType:
    """``kuber_exec_trio`` or ``kuber_exec_asyncio``: the adapter of the running event loop,
    whose public names and shapes are the same."""
    return kuber_exec_trio if anyio_backend == "trio" else kuber_exec_asyncio
