"""Bad arguments to the service fail clearly, before anything reaches the cluster, on both
runtimes (issue 11, items 8 and 9; docs/errors.md says which error each raises)."""

from __future__ import annotations

from typing import Any

import pytest

from kuber_exec_core import ExecError, ExecErrorCode, ExecRequest, Stdin, Workspace

pytestmark = pytest.mark.anyio

REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=["cat"]
)


class UntouchableBackend:
    """A backend that fails the test if the service calls it at all."""

    calls = 0

    async def get_deployment(self, namespace: str, name: str) -> Any:
        self.calls += 1
        raise AssertionError("the service reached the cluster")

    async def list_pods(self, namespace: str, selector: Any) -> Any:
        self.calls += 1
        raise AssertionError("the service reached the cluster")

    def exec(self, *args: Any) -> Any:
        self.calls += 1
        raise AssertionError("the service reached the cluster")


async def refused(call: Any) -> tuple[ExecErrorCode, str]:
    with pytest.raises(ExecError) as caught:
        await call()
    return caught.value.code, caught.value.message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"stdin": "no"}, "stdin must be True or False, not str"),
        ({"tty": "yes"}, "tty must be True or False, not str"),
        ({"tty": 2}, "tty must be True or False, not int"),
        ({"tty": None}, "tty must be True or False, not NoneType"),
        ({"tty": False, "stdin": 0}, "stdin must be True or False, not int"),
    ],
)
async def test_open_interactive_refuses_flags_that_are_not_bools(
    adapter: Any, flags: dict[str, object], message: str
) -> None:
    backend = UntouchableBackend()
    service = adapter.ExecService(backend)

    async def open_() -> None:
        async with service.open_interactive(REQUEST, **flags):
            raise AssertionError("opened")

    assert await refused(open_) == (ExecErrorCode.INVALID, message)
    assert backend.calls == 0


@pytest.mark.parametrize(
    ("request_", "name"), [(None, "NoneType"), ({"deployment": "web"}, "dict"), ("web", "str")]
)
async def test_a_request_that_is_not_an_exec_request_is_exec_invalid(
    adapter: Any, request_: object, name: str
) -> None:
    backend = UntouchableBackend()
    service = adapter.ExecService(backend)
    expected = (ExecErrorCode.INVALID, f"request must be an ExecRequest, not {name}")

    async def open_() -> None:
        async with service.open_interactive(request_):
            raise AssertionError("opened")

    assert await refused(lambda: service.execute(request_)) == expected
    assert await refused(lambda: service.execute(request_, stdin=b"x")) == expected
    assert await refused(lambda: service.resolve_target(request_)) == expected
    assert await refused(open_) == expected
    assert backend.calls == 0


@pytest.mark.parametrize("backend", [None, {}, "https://127.0.0.1:6443", object()])
async def test_a_service_without_a_backend_is_a_type_error(adapter: Any, backend: object) -> None:
    with pytest.raises(TypeError) as caught:
        adapter.ExecService(backend)
    assert str(caught.value) == (
        "ExecService needs a Backend (with get_deployment, list_pods, exec), "
        f"not {type(backend).__name__}"
    )


async def test_limits_of_the_wrong_type_are_a_type_error(adapter: Any) -> None:
    with pytest.raises(TypeError, match="limits must be an ExecLimits or None, not dict"):
        adapter.ExecService(UntouchableBackend(), {"max_output_cap_bytes": 1})


async def test_a_non_bool_eof_is_refused_before_sending(adapter: Any) -> None:
    with pytest.raises(ExecError) as caught:
        adapter.Stdin(b"data", eof="no")
    assert caught.value.code is ExecErrorCode.INVALID
    assert Stdin is adapter.Stdin
