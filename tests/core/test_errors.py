"""``ExecError``: its structured fields (the HTTP status, the Status's reason and code, the rule it
reports), kept by pickling and shown by the repr only when set."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import (
    ExecError,
    ExecErrorCode,
    ExecLimits,
    ExecOutputLimitError,
    ExecRequest,
    Workspace,
)
from kuber_exec_core.kube import TargetRefusal
from kuber_exec_core.validation import InvalidRule

optional_status = st.none() | st.integers(min_value=100, max_value=599)
REQUEST = ExecRequest(
    workspace=Workspace(project="team-a", uid="u-1"), deployment="web", command=("true",)
)


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


def test_an_error_carries_its_rule_and_of_reads_it_not_the_text() -> None:
    limits = ExecLimits()
    error = InvalidRule.ARGUMENT_COUNT.error(limits)
    assert error.rule is InvalidRule.ARGUMENT_COUNT
    assert InvalidRule.of(error, limits) is InvalidRule.ARGUMENT_COUNT
    assert TargetRefusal.of(error, REQUEST) is None
    assert repr(error).endswith(", rule=InvalidRule.ARGUMENT_COUNT)")
    # The same code and wording without the rule reports none: the text decides nothing.
    assert InvalidRule.of(ExecError(error.code, error.message), limits) is None
    copy = pickle.loads(pickle.dumps(error))
    assert copy.rule is InvalidRule.ARGUMENT_COUNT
    refused = TargetRefusal.NOT_OWNED.error(REQUEST)
    assert (refused.rule, TargetRefusal.of(refused, REQUEST)) == (TargetRefusal.NOT_OWNED,) * 2
    assert InvalidRule.of(refused, limits) is None
