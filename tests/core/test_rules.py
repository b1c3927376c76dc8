"""The one table of request rules and targeting refusals: the seed's wording, and lookups both ways.

Validation, targeting and the testing kit all read this table; here its texts are pinned to the
seed's, letter by letter, and ``of`` is checked to name the rule or refusal an error reports.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode, ExecLimits, ExecRequest, Workspace
from kuber_exec_core import testing as kt
from kuber_exec_core._rules import _REQUEST_MESSAGES, _TARGET_REFUSALS
from kuber_exec_core.kube import TargetRefusal
from kuber_exec_core.validation import InvalidRule

LIMITS = ExecLimits(max_command_arguments=5, max_command_bytes=300, max_argument_bytes=70)
REQUEST = ExecRequest(
    workspace=Workspace(project="team-a", uid="u-1"),
    deployment="web.v2",
    command=("ls",),
    container="app",
)

#: The seed's messages (exec-service.ts, validateInput and resolveTarget), for LIMITS and REQUEST.
SEED_RULES = {
    InvalidRule.WORKSPACE: "Workspace is required",
    InvalidRule.PROJECT: (
        "Workspace project must be a valid lowercase DNS name of at most 63 characters"
    ),
    InvalidRule.WORKSPACE_UID: "Workspace UID must be between 1 and 256 characters",
    InvalidRule.DEPLOYMENT: (
        "Deployment name must be a valid lowercase DNS name of at most 253 characters"
    ),
    InvalidRule.CONTAINER: (
        "Container name must be a valid lowercase DNS name of at most 63 characters"
    ),
    InvalidRule.COMMAND_MISSING: "Command is required",
    InvalidRule.ARGUMENT_COUNT: "Command cannot contain more than 5 arguments",
    InvalidRule.ARGUMENT_NUL: "Command arguments must be strings without null bytes",
    InvalidRule.ARGUMENT_UNICODE: "Command arguments must be valid Unicode text",
    InvalidRule.ARGUMENT_BYTES: "Command argument exceeds 70 bytes",
    InvalidRule.COMMAND_BYTES: "Command exceeds 300 bytes",
}
SEED_REFUSALS = {
    TargetRefusal.DEPLOYMENT_NOT_FOUND: (
        ExecErrorCode.TARGET_NOT_FOUND,
        "Deployment web.v2 was not found",
    ),
    TargetRefusal.NOT_OWNED: (
        ExecErrorCode.TARGET_FORBIDDEN,
        "Deployment web.v2 is not owned by this workspace",
    ),
    TargetRefusal.NO_POD_SELECTOR: (
        ExecErrorCode.TARGET_NOT_READY,
        "Deployment web.v2 has no usable pod selector",
    ),
    TargetRefusal.NO_CONTAINER: (
        ExecErrorCode.TARGET_NOT_READY,
        "Deployment web.v2 has no container",
    ),
    TargetRefusal.CONTAINER_NOT_FOUND: (
        ExecErrorCode.TARGET_NOT_FOUND,
        "Container app was not found or running in a deployment pod",
    ),
    TargetRefusal.NO_RUNNING_POD: (
        ExecErrorCode.TARGET_NOT_READY,
        "Deployment web.v2 has no running owned pod/container",
    ),
}


@pytest.mark.parametrize("rule", list(InvalidRule), ids=lambda rule: rule.value)
def test_every_rule_has_the_seeds_message(rule: InvalidRule) -> None:
    assert rule.code is ExecErrorCode.INVALID
    assert rule.message(LIMITS) == SEED_RULES[rule]
    error = rule.error(LIMITS)
    assert type(error) is ExecError
    assert (error.code, error.message) == (ExecErrorCode.INVALID, SEED_RULES[rule])


@pytest.mark.parametrize("refusal", list(TargetRefusal), ids=lambda refusal: refusal.value)
def test_every_refusal_has_the_seeds_code_and_message(refusal: TargetRefusal) -> None:
    assert (refusal.code, refusal.message(REQUEST)) == SEED_REFUSALS[refusal]
    error = refusal.error(REQUEST)
    assert type(error) is ExecError
    assert (error.code, error.message) == SEED_REFUSALS[refusal]


def test_names_are_taken_as_text_not_as_templates() -> None:
    # A name is never parsed as a format string (validation would refuse it first, but the table
    # must not depend on that).
    odd = ExecRequest(workspace=REQUEST.workspace, deployment="{container}", command=("ls",))
    assert (
        TargetRefusal.NOT_OWNED.message(odd)
        == "Deployment {container} is not owned by this workspace"
    )


@given(limits=st.one_of(st.just(LIMITS), kt.exec_limits()), rule=st.sampled_from(InvalidRule))
def test_of_names_the_rule_an_error_reports(limits: ExecLimits, rule: InvalidRule) -> None:
    assert InvalidRule.of(rule.error(limits), limits) is rule
    # The messages tell every rule apart, whatever the limits.
    assert len({r.message(limits) for r in InvalidRule}) == len(InvalidRule)


@given(request=kt.valid_exec_requests(), refusal=st.sampled_from(TargetRefusal))
def test_of_names_the_refusal_an_error_reports(
    request: ExecRequest, refusal: TargetRefusal
) -> None:
    assert TargetRefusal.of(refusal.error(request), request) is refusal


@pytest.mark.parametrize(
    "error",
    [
        ExecError(ExecErrorCode.INVALID, "stdoutCapBytes must be between 1 and 10"),
        # The right text with another code is not the rule.
        ExecError(ExecErrorCode.FAILED, "Command is required"),
        ExecError(ExecErrorCode.TARGET_NOT_READY, "Deployment web.v2 was not found"),
        # Another request's refusal is not this one's.
        ExecError(ExecErrorCode.TARGET_NOT_FOUND, "Deployment web was not found"),
    ],
)
def test_of_is_none_for_anything_else(error: ExecError) -> None:
    assert InvalidRule.of(error, LIMITS) is None
    assert TargetRefusal.of(error, REQUEST) is None


def test_the_kit_names_the_same_rules() -> None:
    assert kt.InvalidRule is InvalidRule


def test_the_kit_holds_no_copy_of_the_wording() -> None:
    # The kit derives its answers from the table: no template's text may appear in its source.
    kit = sorted(Path(kt.__file__).parent.glob("*.py"))
    assert len(kit) > 1  # the package's every module
    source = "".join(path.read_text(encoding="utf-8") for path in kit)
    templates = [*_REQUEST_MESSAGES.values(), *(text for _, text in _TARGET_REFUSALS.values())]
    assert len(templates) == len(InvalidRule) + len(TargetRefusal)
    for template in templates:
        for fragment in re.split(r"\{\w+\}", template):
            if len(fragment.split()) >= 2:
                assert fragment not in source, fragment
