"""``ExecError``: its structured fields (the HTTP status and the Status's reason and code), kept by
pickling and shown by the repr only when set."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode, ExecOutputLimitError

optional_status = st.none() | st.integers(min_value=100, max_value=599)


def test_code_and_message_alone_still_construct_it() -> None:
    error = ExecError(ExecErrorCode.FAILED, "boom")
    assert (error.code, error.message) == (ExecErrorCode.FAILED, "boom")
    assert (error.http_status, error.status_reason, error.status_code) == (None, None, None)
    assert repr(error) == "ExecError('EXEC_FAILED', 'boom')"
    assert str(error) == "EXEC_FAILED: boom"


def test_the_repr_shows_the_fields_that_are_set() -> None:
    error = ExecError(
        ExecErrorCode.FAILED, "gone", http_status=404, status_reason="NotFound", status_code=404
    )
    assert repr(error) == (
        "ExecError('EXEC_FAILED', 'gone', http_status=404, status_reason='NotFound', "
        "status_code=404)"
    )
    assert repr(ExecError(ExecErrorCode.FAILED, "x", status_code=500)) == (
        "ExecError('EXEC_FAILED', 'x', status_code=500)"
    )
    assert str(error) == "EXEC_FAILED: gone"  # the message is what users see


@given(
    code=st.sampled_from(ExecErrorCode),
    message=st.text(max_size=40),
    http_status=optional_status,
    status_reason=st.none() | st.text(max_size=20),
    status_code=optional_status,
)
def test_pickling_keeps_every_field(
    code: ExecErrorCode,
    message: str,
    http_status: int | None,
    status_reason: str | None,
    status_code: int | None,
) -> None:
    error = ExecError(
        code,
        message,
        http_status=http_status,
        status_reason=status_reason,
        status_code=status_code,
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ExecError
    assert (copy.code, copy.message, copy.http_status, copy.status_reason, copy.status_code) == (
        code,
        message,
        http_status,
        status_reason,
        status_code,
    )
    assert repr(copy) == repr(error)
    assert copy.args == error.args


def test_a_subclass_keeps_its_own_fields_through_pickling() -> None:
    error = pickle.loads(pickle.dumps(ExecOutputLimitError("stderr", 10)))
    assert isinstance(error, ExecOutputLimitError)
    assert (error.stream, error.limit_bytes, error.code) == (
        "stderr",
        10,
        ExecErrorCode.OUTPUT_LIMIT,
    )
    assert error.http_status is None
