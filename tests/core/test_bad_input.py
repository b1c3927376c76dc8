"""Flags are bools and requests are ExecRequests: nothing is read by truthiness or duck typing
(issue 11, items 8 and 9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecRequest,
    Stdin,
    TargetResolution,
    Workspace,
)
from kuber_exec_core.validation import validate_flag, validate_request, validate_request_type

#: Anything but True and False: the values a caller passes by mistake, and more.
NOT_BOOLS: st.SearchStrategy[object] = st.one_of(
    st.sampled_from(["no", "yes", "", "false", 0, 1, 2, None, 0.0, [], [False], {}]),
    st.integers(),
    st.text(max_size=5),
    st.floats(allow_nan=False),
    st.none(),
)

REQUEST = ExecRequest(
    workspace=Workspace(project="demo", uid="demo-uid"), deployment="web", command=("echo",)
)


@given(NOT_BOOLS)
def test_a_flag_that_is_not_a_bool_is_invalid(value: object) -> None:
    with pytest.raises(ExecError) as caught:
        validate_flag(value, "tty")
    assert caught.value.code is ExecErrorCode.INVALID
    assert caught.value.message == f"tty must be True or False, not {type(value).__name__}"


@given(NOT_BOOLS)
def test_stdin_eof_must_be_a_bool(value: object) -> None:
    with pytest.raises(ExecError) as caught:
        Stdin(b"data", eof=value)  # type: ignore[arg-type]
    assert caught.value.code is ExecErrorCode.INVALID
    assert caught.value.message.startswith("eof must be True or False, not ")


def test_bools_pass() -> None:
    assert validate_flag(True, "stdin") is True
    assert validate_flag(False, "stdin") is False
    assert Stdin(b"x", eof=True).eof is True
    assert Stdin(b"x").eof is False


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "NoneType"),
        ({"deployment": "web"}, "dict"),
        ("web", "str"),
        (REQUEST.command, "tuple"),
    ],
)
def test_a_request_that_is_not_an_exec_request_is_invalid(value: object, name: str) -> None:
    expected = (ExecErrorCode.INVALID, f"request must be an ExecRequest, not {name}")
    for check in (
        lambda: validate_request_type(value),
        lambda: validate_request(value, ExecLimits()),  # type: ignore[arg-type]
        lambda: TargetResolution(value, ExecLimits()),  # type: ignore[arg-type]
    ):
        with pytest.raises(ExecError) as caught:
            check()
        assert (caught.value.code, caught.value.message) == expected
    assert validate_request_type(REQUEST) is REQUEST
