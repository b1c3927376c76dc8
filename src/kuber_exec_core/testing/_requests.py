"""Exec requests: valid workspaces, limits and requests, and requests that break exactly one
validation rule, with the rule."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
from hypothesis import strategies as st

from .._limits import ExecLimits
from .._request import ExecRequest, Workspace
from .._rules import InvalidRule
from ._names import dns_labels, dns_subdomains

# JavaScript's String.prototype.trim() whitespace: what the seed treats as a blank uid.
_JS_BLANKS = "\t\n\v\f\r \u00a0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def _utf16_length(text: str) -> int:
    return sum(2 if ord(char) > 0xFFFF else 1 for char in text)


def workspace_uids() -> st.SearchStrategy[str]:
    """Valid workspace uids: 1..256 UTF-16 code units, not blank under JavaScript's ``trim()``.

    Mostly UUID-like ASCII, sometimes arbitrary Unicode text (surrounding blanks included)."""
    uuid_like = st.uuids().map(str)
    arbitrary = st.text(min_size=1, max_size=80).filter(
        lambda uid: bool(uid.strip(_JS_BLANKS)) and _utf16_length(uid) <= 256
    )
    return uuid_like | arbitrary


def workspaces() -> st.SearchStrategy[Workspace]:
    """Valid :class:`Workspace` values (a DNS-label project and a valid uid)."""
    return st.builds(Workspace, project=dns_labels(), uid=workspace_uids())


# -- limits and requests ---------------------------------------------------------------------------


@st.composite
def exec_limits(draw: st.DrawFn) -> ExecLimits:
    """Valid :class:`ExecLimits`: each value positive (sometimes the default, sometimes small),
    the default output cap never above the maximum."""
    defaults = ExecLimits()

    def value(default: int, upper: int) -> int:
        return draw(st.just(default) | st.integers(min_value=1, max_value=upper))

    max_cap = value(defaults.max_output_cap_bytes, 4 * 1024 * 1024)
    default_cap = draw(
        st.just(max_cap) | st.integers(min_value=1, max_value=max_cap),
    )
    return ExecLimits(
        max_command_arguments=value(defaults.max_command_arguments, 200),
        max_command_bytes=value(defaults.max_command_bytes, 64 * 1024),
        max_argument_bytes=value(defaults.max_argument_bytes, 16 * 1024),
        max_output_cap_bytes=max_cap,
        default_output_cap_bytes=default_cap,
        interactive_queue_capacity=value(defaults.interactive_queue_capacity, 1024),
        max_stdin_frame_bytes=value(defaults.max_stdin_frame_bytes, 256 * 1024),
    )


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def command_arguments(*, max_bytes: int = 8 * 1024) -> st.SearchStrategy[str]:
    """One valid argv element: text without NUL and without lone surrogates, at most
    ``max_bytes`` UTF-8 bytes (sometimes exactly ``max_bytes``)."""
    short = st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="\0"),
        max_size=min(max_bytes, 40),
    ).filter(lambda arg: _utf8_size(arg) <= max_bytes)
    exact = st.sampled_from("a-é€😀 ").map(lambda char: char * (max_bytes // _utf8_size(char)))
    return short | exact


@st.composite
def commands(draw: st.DrawFn, limits: ExecLimits | None = None) -> tuple[str, ...]:
    """A valid argv under ``limits`` (default :class:`ExecLimits`): 1..max arguments, each and all
    of them within the byte limits."""
    limits = limits or ExecLimits()
    count = draw(st.integers(min_value=1, max_value=min(limits.max_command_arguments, 8)))
    budget = limits.max_command_bytes
    arguments: list[str] = []
    for _ in range(count):
        allowed = min(limits.max_argument_bytes, budget)
        argument = draw(command_arguments(max_bytes=allowed))
        budget -= _utf8_size(argument)
        arguments.append(argument)
    return tuple(arguments)


@st.composite
def valid_exec_requests(draw: st.DrawFn, limits: ExecLimits | None = None) -> ExecRequest:
    """Requests that pass validation under ``limits`` (default :class:`ExecLimits`), with and
    without an explicit container."""
    return ExecRequest(
        workspace=draw(workspaces()),
        deployment=draw(dns_subdomains()),
        command=draw(commands(limits)),
        container=draw(st.none() | dns_labels()),
    )


@attrs.frozen(kw_only=True)
class InvalidExecRequest:
    """A request that breaks exactly one rule (:class:`~kuber_exec_core.validation.InvalidRule`,
    also importable from here) under ``limits``: validation must raise ``rule.error(limits)``.

    Assert the code and the rule (``InvalidRule.of(error, limits) is bad.rule``), not the text.
    """

    request: ExecRequest
    rule: InvalidRule
    limits: ExecLimits

    @property
    def message(self) -> str:
        """The ``EXEC_INVALID`` message the request gets, from the library's table."""
        return self.rule.message(self.limits)


_BAD_LABELS = [
    "",
    "A",
    "Web",
    "-web",
    "web-",
    "web_1",
    "web.1",
    "web 1",
    "web\n",
    "wéb",
    "a" * 64,
]
_BAD_SUBDOMAINS = ["", "Web", "-web", "web-", "web..x", ".web", "web.", "web_1", "web\n", "a" * 254]


def _bad_names(fixed: list[str], max_length: int, dotted: bool) -> st.SearchStrategy[str]:
    label = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
    pattern = re.compile(rf"{label}(?:\.{label})*" if dotted else label)
    arbitrary = st.text(max_size=20).filter(
        lambda name: pattern.fullmatch(name) is None or len(name) > max_length
    )
    return st.sampled_from(fixed) | arbitrary


def _argument_nul() -> st.SearchStrategy[object]:
    with_nul = st.tuples(st.text(max_size=5), st.text(max_size=5)).map(lambda p: f"{p[0]}\0{p[1]}")
    not_text = st.sampled_from([b"ls", 1, None, ["ls"]])
    return with_nul | not_text


def _feasible_rules(limits: ExecLimits) -> list[InvalidRule]:
    rules = [rule for rule in InvalidRule]
    if limits.max_command_arguments > 10_000:
        rules.remove(InvalidRule.ARGUMENT_COUNT)
    if limits.max_argument_bytes > 1024 * 1024:
        rules.remove(InvalidRule.ARGUMENT_BYTES)
    reachable = limits.max_command_arguments * limits.max_argument_bytes
    if reachable <= limits.max_command_bytes or limits.max_command_bytes > 1024 * 1024:
        rules.remove(InvalidRule.COMMAND_BYTES)
    return rules


@st.composite
def invalid_exec_requests(
    draw: st.DrawFn,
    limits: ExecLimits | None = None,
    rules: Sequence[InvalidRule] | None = None,
) -> InvalidExecRequest:
    """Requests that break exactly one rule (drawn from ``rules``, default all that ``limits``
    make possible), with the rule they break.

    Everything before the broken rule is valid, so that rule is the one validation must report.
    """
    limits = limits or ExecLimits()
    candidates = [rule for rule in (rules or list(InvalidRule)) if rule in _feasible_rules(limits)]
    rule = draw(st.sampled_from(candidates))
    request = draw(valid_exec_requests(limits))
    command: list[object] = list(request.command)
    changes: dict[str, Any] = {}
    match rule:
        case InvalidRule.WORKSPACE:
            not_a_workspace = [None, "team-a", ("team-a", "uid"), {"project": "a", "uid": "u"}]
            changes["workspace"] = draw(st.sampled_from(not_a_workspace))
        case InvalidRule.PROJECT:
            project = draw(_bad_names(_BAD_LABELS, 63, dotted=False))
            changes["workspace"] = attrs.evolve(request.workspace, project=project)
        case InvalidRule.WORKSPACE_UID:
            blank = st.text(alphabet=_JS_BLANKS, max_size=5)
            too_long = st.sampled_from(["u" * 257, "😀" * 129, "é" * 257])
            uid = draw(blank | too_long)
            changes["workspace"] = attrs.evolve(request.workspace, uid=uid)
        case InvalidRule.DEPLOYMENT:
            changes["deployment"] = draw(_bad_names(_BAD_SUBDOMAINS, 253, dotted=True))
        case InvalidRule.CONTAINER:
            changes["container"] = draw(_bad_names(_BAD_LABELS, 63, dotted=False))
        case InvalidRule.COMMAND_MISSING:
            changes["command"] = draw(st.sampled_from([(), [], "ls", None]))
        case InvalidRule.ARGUMENT_COUNT:
            extra = draw(st.integers(min_value=1, max_value=3))
            command = ["a"] * (limits.max_command_arguments + extra)
        case InvalidRule.ARGUMENT_NUL:
            command = _with_replaced(draw, command, draw(_argument_nul()), limits)
        case InvalidRule.ARGUMENT_UNICODE:
            lone = draw(st.sampled_from(["\ud800", "a\udfff", "\udc80b"]))
            command = _with_replaced(draw, command, lone, limits)
        case InvalidRule.ARGUMENT_BYTES:
            over = draw(st.integers(min_value=1, max_value=3))
            char = draw(st.sampled_from("xé€"))
            size = _utf8_size(char)
            argument = char * (limits.max_argument_bytes // size + over)
            command = _with_replaced(draw, command, argument, limits)
        case InvalidRule.COMMAND_BYTES:
            command = list(_over_budget(draw, limits))
    changes.setdefault("command", tuple(command))
    return InvalidExecRequest(request=attrs.evolve(request, **changes), rule=rule, limits=limits)


def _with_replaced(
    draw: st.DrawFn, command: list[object], argument: object, limits: ExecLimits
) -> list[object]:
    """``command`` with ``argument`` at some position, still within the argument count."""
    if len(command) >= limits.max_command_arguments:
        command = command[: limits.max_command_arguments - 1]
    index = draw(st.integers(min_value=0, max_value=len(command)))
    return [*command[:index], argument, *command[index:]]


def _over_budget(draw: st.DrawFn, limits: ExecLimits) -> tuple[str, ...]:
    """An argv whose every argument is within bounds but whose total is over the budget."""
    # Over the budget by 1 to 3 bytes, but never by more than the argument count can carry.
    reachable = limits.max_command_arguments * limits.max_argument_bytes
    excess = min(3, reachable - limits.max_command_bytes)
    target = limits.max_command_bytes + draw(st.integers(min_value=1, max_value=excess))
    arguments: list[str] = []
    while target > 0:
        size = min(limits.max_argument_bytes, target)
        arguments.append("c" * size)
        target -= size
    assert len(arguments) <= limits.max_command_arguments
    return tuple(draw(st.permutations(arguments)))
