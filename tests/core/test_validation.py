"""The seed's ``limitsFrom``, ``validateInput`` and ``outputCap``, branch by branch.

The property tests compare validation with an oracle written here from the seed's text (rules
spelled out as code, not the core's regexes), and with ``kuber_exec_core.testing``'s one-rule
invalid requests.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuber_exec_core import ExecError, ExecErrorCode, ExecLimits, ExecRequest, StreamName, Workspace
from kuber_exec_core import testing as kt
from kuber_exec_core.limits import (
    DEFAULT_INTERACTIVE_QUEUE_CAPACITY,
    DEFAULT_MAX_ARGUMENT_BYTES,
    DEFAULT_MAX_COMMAND_ARGUMENTS,
    DEFAULT_MAX_COMMAND_BYTES,
    DEFAULT_MAX_STDIN_FRAME_BYTES,
    DEFAULT_OUTPUT_CAP_BYTES,
)
from kuber_exec_core.validation import (
    InvalidRule,
    validate_output_cap,
    validate_queue_capacity,
    validate_request,
)

LIMITS = ExecLimits()
WS = Workspace(project="team-a", uid="0b6c3c1e-uid")


def request(**changes: Any) -> ExecRequest:
    base = ExecRequest(workspace=WS, deployment="web", command=("echo", "hi"))
    return attrs.evolve(base, **changes)


def invalid(message: str) -> tuple[ExecErrorCode, str]:
    return (ExecErrorCode.INVALID, message)


# -- limitsFrom ---------------------------------------------------------------------------------


def test_limits_defaults_are_the_seeds() -> None:
    limits = ExecLimits()
    assert limits.max_command_arguments == DEFAULT_MAX_COMMAND_ARGUMENTS == 64
    assert limits.max_command_bytes == DEFAULT_MAX_COMMAND_BYTES == 32 * 1024
    assert limits.max_argument_bytes == DEFAULT_MAX_ARGUMENT_BYTES == 8 * 1024
    assert limits.max_output_cap_bytes == DEFAULT_OUTPUT_CAP_BYTES == 1024 * 1024
    assert limits.default_output_cap_bytes == DEFAULT_OUTPUT_CAP_BYTES
    assert limits.interactive_queue_capacity == DEFAULT_INTERACTIVE_QUEUE_CAPACITY == 128
    assert limits.max_stdin_frame_bytes == DEFAULT_MAX_STDIN_FRAME_BYTES == 64 * 1024


LIMIT_FIELDS = [field.name for field in attrs.fields(ExecLimits)]


@pytest.mark.parametrize("field", LIMIT_FIELDS)
@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, 2.0, "8", None])
def test_limits_reject_non_positive_ints(field: str, value: object) -> None:
    kwargs: dict[str, Any] = {field: value}
    if field == "default_output_cap_bytes":
        kwargs["max_output_cap_bytes"] = 10**9
    with pytest.raises(ExecError) as caught:
        ExecLimits(**kwargs)
    assert (caught.value.code, caught.value.message) == invalid(
        f"{field} must be a positive integer"
    )


@pytest.mark.parametrize("field", LIMIT_FIELDS)
def test_limits_accept_one(field: str) -> None:
    kwargs: dict[str, Any] = {field: 1}
    if field == "max_output_cap_bytes":
        kwargs["default_output_cap_bytes"] = 1
    assert getattr(ExecLimits(**kwargs), field) == 1


def test_limits_checked_in_the_seeds_order() -> None:
    # limitsFrom reports the first bad field in declaration order.
    with pytest.raises(ExecError, match="max_command_arguments"):
        ExecLimits(max_command_arguments=0, max_stdin_frame_bytes=0)
    with pytest.raises(ExecError, match="max_argument_bytes"):
        ExecLimits(max_argument_bytes=0, interactive_queue_capacity=0)


def test_default_cap_cannot_exceed_max_cap() -> None:
    with pytest.raises(ExecError) as caught:
        ExecLimits(max_output_cap_bytes=10, default_output_cap_bytes=11)
    assert (caught.value.code, caught.value.message) == invalid(
        "default_output_cap_bytes cannot exceed max_output_cap_bytes"
    )
    assert ExecLimits(max_output_cap_bytes=10, default_output_cap_bytes=10)


# -- validateInput, branch by branch ------------------------------------------------------------

LABEL_MSG = "must be a valid lowercase DNS name of at most 63 characters"
PROJECT = f"Workspace project {LABEL_MSG}"
CONTAINER = f"Container name {LABEL_MSG}"
DEPLOYMENT = "Deployment name must be a valid lowercase DNS name of at most 253 characters"
UID = "Workspace UID must be between 1 and 256 characters"
NUL = "Command arguments must be strings without null bytes"

CASES: list[tuple[str, ExecRequest, str | None]] = [
    ("valid", request(), None),
    ("valid with container", request(container="app"), None),
    ("project empty", request(workspace=Workspace(project="", uid="u")), PROJECT),
    ("project 63", request(workspace=Workspace(project="a" * 63, uid="u")), None),
    ("project 64", request(workspace=Workspace(project="a" * 64, uid="u")), PROJECT),
    ("project upper", request(workspace=Workspace(project="Team", uid="u")), PROJECT),
    ("project dot", request(workspace=Workspace(project="a.b", uid="u")), PROJECT),
    ("project leading dash", request(workspace=Workspace(project="-a", uid="u")), PROJECT),
    ("project trailing dash", request(workspace=Workspace(project="a-", uid="u")), PROJECT),
    ("project newline", request(workspace=Workspace(project="a\n", uid="u")), PROJECT),
    ("project not str", request(workspace=Workspace(project=7, uid="u")), PROJECT),  # type: ignore[arg-type]
    ("workspace not Workspace", request(workspace=None), "Workspace is required"),
    ("uid empty", request(workspace=Workspace(project="p", uid="")), UID),
    ("uid blank", request(workspace=Workspace(project="p", uid=" \t\n")), UID),
    ("uid ideographic space", request(workspace=Workspace(project="p", uid="\u3000")), UID),
    ("uid BOM", request(workspace=Workspace(project="p", uid="\ufeff")), UID),
    # U+001C is whitespace to Python's str.strip() but not to JavaScript's trim().
    ("uid FS char", request(workspace=Workspace(project="p", uid="\x1c")), None),
    ("uid 256", request(workspace=Workspace(project="p", uid="u" * 256)), None),
    ("uid 257", request(workspace=Workspace(project="p", uid="u" * 257)), UID),
    # The seed counts UTF-16 code units: 128 astral characters are 256 units, 129 are 258.
    ("uid 128 astral", request(workspace=Workspace(project="p", uid="😀" * 128)), None),
    ("uid 129 astral", request(workspace=Workspace(project="p", uid="😀" * 129)), UID),
    ("uid not str", request(workspace=Workspace(project="p", uid=None)), UID),  # type: ignore[arg-type]
    ("deployment empty", request(deployment=""), DEPLOYMENT),
    ("deployment dotted", request(deployment="web.v1.app"), None),
    ("deployment 253", request(deployment=".".join(["a" * 63] * 4)[:253]), None),
    ("deployment 254", request(deployment="a" * 254), DEPLOYMENT),
    ("deployment long label", request(deployment="a" * 100), None),
    ("deployment double dot", request(deployment="a..b"), DEPLOYMENT),
    ("deployment trailing dot", request(deployment="a."), DEPLOYMENT),
    ("deployment upper", request(deployment="Web"), DEPLOYMENT),
    ("deployment slash", request(deployment="web/x"), DEPLOYMENT),
    ("deployment newline", request(deployment="web\n"), DEPLOYMENT),
    ("container empty", request(container=""), CONTAINER),
    ("container dotted", request(container="a.b"), CONTAINER),
    ("container 64", request(container="a" * 64), CONTAINER),
    ("command empty tuple", request(command=()), "Command is required"),
    ("command empty list", request(command=[]), "Command is required"),
    ("command str", request(command="ls"), "Command is required"),
    ("command None", request(command=None), "Command is required"),
    ("64 arguments", request(command=["a"] * 64), None),
    ("65 arguments", request(command=["a"] * 65), "Command cannot contain more than 64 arguments"),
    ("empty argument", request(command=[""]), None),
    ("NUL", request(command=["echo", "a\0b"]), NUL),
    ("bytes argument", request(command=["echo", b"x"]), NUL),
    ("int argument", request(command=[1]), NUL),
    ("lone surrogate", request(command=["\ud800"]), "Command arguments must be valid Unicode text"),
    ("argument 8192", request(command=["x" * 8192]), None),
    ("argument 8193", request(command=["x" * 8193]), "Command argument exceeds 8192 bytes"),
    # bytes, not characters: 2731 × "€" (3 bytes) is 8193 bytes.
    ("argument 8193 bytes", request(command=["€" * 2731]), "Command argument exceeds 8192 bytes"),
    ("command 32768", request(command=["x" * 8192] * 4), None),
    ("command 32769", request(command=["x" * 8192] * 4 + ["y"]), "Command exceeds 32768 bytes"),
    # Order: count before any argument; each argument's own checks before the total.
    (
        "count before NUL",
        request(command=["\0"] * 65),
        "Command cannot contain more than 64 arguments",
    ),
    ("NUL before size", request(command=["\0" + "x" * 9000]), NUL),
    (
        "first bad argument wins",
        request(command=["x" * 9000, "\0"]),
        "Command argument exceeds 8192 bytes",
    ),
    # Order across fields: project, uid, deployment, container, command.
    (
        "project before uid",
        request(workspace=Workspace(project="", uid=""), deployment=""),
        PROJECT,
    ),
    (
        "uid before deployment",
        request(workspace=Workspace(project="p", uid=""), deployment=""),
        UID,
    ),
    ("deployment before container", request(deployment="", container=""), DEPLOYMENT),
    ("container before command", request(container="", command=()), CONTAINER),
]


@pytest.mark.parametrize(("case", "req", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validate_request(case: str, req: ExecRequest, expected: str | None) -> None:
    if expected is None:
        validate_request(req, LIMITS)
        return
    with pytest.raises(ExecError) as caught:
        validate_request(req, LIMITS)
    assert (caught.value.code, caught.value.message) == invalid(expected)


def test_list_commands_are_frozen_into_tuples() -> None:
    argv = ["echo", "hi"]
    req = request(command=argv)
    argv.append("mutated")
    assert req.command == ("echo", "hi")
    assert hash(req) == hash(request(command=("echo", "hi")))


def test_custom_limits_in_messages() -> None:
    limits = ExecLimits(max_command_arguments=2, max_command_bytes=5, max_argument_bytes=3)
    cases = [
        (["a", "b", "c"], "Command cannot contain more than 2 arguments"),
        (["abcd"], "Command argument exceeds 3 bytes"),
        (["abc", "abc"], "Command exceeds 5 bytes"),
    ]
    for command, message in cases:
        with pytest.raises(ExecError) as caught:
            validate_request(request(command=command), limits)
        assert caught.value.message == message
    validate_request(request(command=["abc", "ab"]), limits)


# -- outputCap --------------------------------------------------------------------------------

CAP_CASES: list[tuple[object, int | None, str | None]] = [
    (None, DEFAULT_OUTPUT_CAP_BYTES, None),
    (1, 1, None),
    (DEFAULT_OUTPUT_CAP_BYTES, DEFAULT_OUTPUT_CAP_BYTES, None),
    (DEFAULT_OUTPUT_CAP_BYTES + 1, None, "CapBytes must be between 1 and 1048576"),
    (0, None, "CapBytes must be between 1 and 1048576"),
    (-5, None, "CapBytes must be between 1 and 1048576"),
    (True, None, "CapBytes must be between 1 and 1048576"),
    (1.0, None, "CapBytes must be between 1 and 1048576"),
    ("10", None, "CapBytes must be between 1 and 1048576"),
]


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
@pytest.mark.parametrize(("value", "cap", "message"), CAP_CASES)
def test_output_cap(
    stream: StreamName, value: object, cap: int | None, message: str | None
) -> None:
    if message is None:
        assert validate_output_cap(value, stream, LIMITS) == cap  # type: ignore[arg-type]
        return
    with pytest.raises(ExecError) as caught:
        validate_output_cap(value, stream, LIMITS)  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.message) == invalid(f"{stream}{message}")


def test_output_cap_default_comes_from_limits() -> None:
    limits = ExecLimits(max_output_cap_bytes=100, default_output_cap_bytes=7)
    assert validate_output_cap(None, "stdout", limits) == 7
    assert validate_output_cap(100, "stderr", limits) == 100
    with pytest.raises(ExecError, match="stderrCapBytes must be between 1 and 100"):
        validate_output_cap(101, "stderr", limits)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, 128), (1, 1), (5000, 5000), (0, None), (-1, None), (True, None)]
)
def test_queue_capacity(value: int | None, expected: int | None) -> None:
    # The seed threw a plain Error here; the issue makes it EXEC_INVALID.
    if expected is not None:
        assert validate_queue_capacity(value, LIMITS) == expected
        return
    with pytest.raises(ExecError) as caught:
        validate_queue_capacity(value, LIMITS)
    assert (caught.value.code, caught.value.message) == invalid(
        "queueCapacity must be a positive integer"
    )


# -- an independent oracle ----------------------------------------------------------------------

_ALNUM = set("abcdefghijklmnopqrstuvwxyz0123456789")


def _is_label(name: str) -> bool:
    # RFC 1123 label, lowercase, any length (the length rule is separate).
    return bool(name) and set(name) <= _ALNUM | {"-"} and name[0] in _ALNUM and name[-1] in _ALNUM


def _name_ok(value: object, max_length: int, dotted: bool) -> bool:
    if not isinstance(value, str) or not value or len(value) > max_length:
        return False
    return all(_is_label(part) for part in value.split(".")) if dotted else _is_label(value)


def _js_blank(char: str) -> bool:
    # ECMAScript WhiteSpace (TAB VT FF ZWNBSP and every Zs) and LineTerminator (LF CR LS PS).
    return char in "\t\v\f\ufeff\n\r\u2028\u2029" or unicodedata.category(char) == "Zs"


def oracle(req: ExecRequest, limits: ExecLimits) -> str | None:
    """The seed's validateInput, rule by rule, plus the Python-only workspace-type and
    lone-surrogate rules."""
    ws = req.workspace
    if not isinstance(ws, Workspace):
        return "Workspace is required"
    if not _name_ok(ws.project, 63, dotted=False):
        return PROJECT
    uid = ws.uid
    units = len(uid.encode("utf-16-le", "surrogatepass")) // 2 if isinstance(uid, str) else 0
    if not isinstance(uid, str) or all(_js_blank(c) for c in uid) or units > 256:
        return UID
    if not _name_ok(req.deployment, 253, dotted=True):
        return DEPLOYMENT
    if req.container is not None and not _name_ok(req.container, 63, dotted=False):
        return CONTAINER
    command = req.command
    if not isinstance(command, tuple) or not command:
        return "Command is required"
    if len(command) > limits.max_command_arguments:
        return f"Command cannot contain more than {limits.max_command_arguments} arguments"
    total = 0
    for argument in command:
        if not isinstance(argument, str) or "\x00" in argument:
            return NUL
        if any(0xD800 <= ord(c) <= 0xDFFF for c in argument):
            return "Command arguments must be valid Unicode text"
        size = sum(
            1 if ord(c) < 0x80 else 2 if ord(c) < 0x800 else 3 if ord(c) < 0x10000 else 4
            for c in argument
        )
        if size > limits.max_argument_bytes:
            return f"Command argument exceeds {limits.max_argument_bytes} bytes"
        total += size
    if total > limits.max_command_bytes:
        return f"Command exceeds {limits.max_command_bytes} bytes"
    return None


_odd_text = st.text(
    alphabet=st.sampled_from("abz09-._A \t\n\x00\x1c\u3000\ufeff\u2028é😀\ud800"), max_size=12
)
_names = kt.dns_labels() | kt.dns_subdomains() | _odd_text | st.sampled_from(["a" * 64, "a" * 254])
# Blank to JavaScript's trim() or not: U+001C and U+0085 are whitespace to Python only.
_blanks = st.text(alphabet=" \t\n\v\u3000\ufeff\u2028\xa0\u2007\x1c\x85", max_size=3)
_uids = (
    kt.workspace_uids() | _odd_text | _blanks | st.sampled_from(["u" * 257, "😀" * 129, "😀" * 128])
)
_arguments = _odd_text | st.sampled_from(["x" * 20, "€" * 7, "😀" * 5])
_small_limits = st.builds(
    ExecLimits,
    max_command_arguments=st.integers(1, 6),
    max_command_bytes=st.integers(1, 40),
    max_argument_bytes=st.integers(1, 25),
)


@given(
    project=_names,
    uid=_uids,
    deployment=_names,
    container=st.none() | _names,
    command=st.lists(_arguments, max_size=8).map(tuple),
    limits=_small_limits | kt.exec_limits(),
)
def test_validation_agrees_with_oracle(
    project: str,
    uid: str,
    deployment: str,
    container: str | None,
    command: tuple[str, ...],
    limits: ExecLimits,
) -> None:
    req = ExecRequest(
        workspace=Workspace(project=project, uid=uid),
        deployment=deployment,
        command=command,
        container=container,
    )
    expected = oracle(req, limits)
    if expected is None:
        validate_request(req, limits)
        return
    with pytest.raises(ExecError) as caught:
        validate_request(req, limits)
    assert (caught.value.code, caught.value.message) == invalid(expected)


@given(
    kt.exec_limits().flatmap(
        lambda limits: st.tuples(st.just(limits), kt.valid_exec_requests(limits))
    )
)
def test_valid_requests_pass(case: tuple[ExecLimits, ExecRequest]) -> None:
    limits, req = case
    assert oracle(req, limits) is None
    validate_request(req, limits)


@given(
    kt.exec_limits().flatmap(
        lambda limits: st.tuples(st.just(limits), kt.invalid_exec_requests(limits))
    )
)
def test_invalid_requests_fail_with_their_rule(
    case: tuple[ExecLimits, kt.InvalidExecRequest],
) -> None:
    limits, bad = case
    assert bad.limits == limits
    assert oracle(bad.request, limits) == bad.message
    with pytest.raises(ExecError) as caught:
        validate_request(bad.request, limits)
    assert (caught.value.code, caught.value.message) == invalid(bad.message)
    assert InvalidRule.of(caught.value, limits) is bad.rule


@pytest.mark.parametrize("rule", list(kt.InvalidRule))
@settings(max_examples=max(10, settings().max_examples // 8))
@given(data=st.data())
def test_every_invalid_rule_is_generated(rule: kt.InvalidRule, data: st.DataObject) -> None:
    bad = data.draw(kt.invalid_exec_requests(rules=[rule]))
    assert bad.rule is rule
    with pytest.raises(ExecError) as caught:
        validate_request(bad.request, LIMITS)
    assert InvalidRule.of(caught.value, LIMITS) is rule
