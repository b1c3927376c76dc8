"""The exec upgrade request's path and query (docs/protocol.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import quote

import attrs

from ._errors import ExecError, ExecErrorCode
from ._kube_api import PODS
from ._target import ResolvedTarget

__all__ = [
    "ExecQuery",
    "ExecStreams",
    "exec_path",
    "parse_exec_flag",
    "parse_exec_query",
    "quote_once",
    "quote_value",
]

# What ``quote(value, safe="")`` leaves as it is: RFC 3986's unreserved characters.
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
# Every other ASCII character to its percent-encoding, for ``str.translate``: one C loop over
# the value instead of a Python call per byte (the supervised prologue is ~400 characters, and
# ``quote`` took a measurable share of a short exec's CPU).
_ASCII_QUOTED = {code: f"%{code:02X}" for code in range(128) if chr(code) not in _UNRESERVED}


# A value made only of unreserved characters is its own encoding (most argv elements).
_UNRESERVED_TEXT = re.compile(r"[A-Za-z0-9_.~-]*")
# Constant arguments sent with many execs (the supervised prologue and the cleanup script, a few
# hundred characters each), encoded once: ``str.translate`` with multi-character replacements
# costs about 0.1 us per character, which for the prologue was ~45 us of every exec.
_QUOTED_ONCE: dict[str, str] = {}


def quote_once(value: str) -> None:
    """Encode the constant ``value`` now; :func:`quote_value` then returns it without work.

    For the core's own scripts only (a handful of module constants): never for a caller's
    arguments, which must not outlive their exec in memory.
    """
    _QUOTED_ONCE[value] = quote_value(value)


def quote_value(value: str) -> str:
    """``value`` percent-encoded as a query component: exactly ``urllib.parse.quote(value,
    safe="")`` (UTF-8 for non-ASCII), computed faster for ASCII text."""
    quoted = _QUOTED_ONCE.get(value)
    if quoted is not None:
        return quoted
    if value.isascii():
        if _UNRESERVED_TEXT.fullmatch(value):
            return value
        return value.translate(_ASCII_QUOTED)
    return quote(value, safe="")


@attrs.frozen(kw_only=True)
class ExecStreams:
    """Which streams an exec asks for. With ``tty`` the server merges stderr into stdout."""

    stdin: bool = False
    stdout: bool = True
    stderr: bool = True
    tty: bool = False


def exec_path(target: ResolvedTarget, command: Sequence[str], streams: ExecStreams) -> str:
    """``/api/v1/namespaces/{ns}/pods/{pod}/exec?...`` for ``command`` in ``target``.

    One ``command=`` per argv element (never a shell string); every value is percent-encoded, so
    no field can add a parameter or a path segment. False flags are omitted rather than sent
    (the server reads any present value, even an empty one, as true). With a TTY stderr is not
    requested: the server would force it off anyway.
    """
    query: list[tuple[str, str]] = [("command", argument) for argument in command]
    query.append(("container", target.container))
    stderr = streams.stderr and not streams.tty
    for name, enabled in (
        ("stdin", streams.stdin),
        ("stdout", streams.stdout),
        ("stderr", stderr),
        ("tty", streams.tty),
    ):
        if enabled:
            query.append((name, "true"))
    path = PODS.object_path(target.namespace, target.pod)
    encoded = "&".join(f"{name}={quote_value(value)}" for name, value in query)
    return f"{path}/exec?{encoded}"


def parse_exec_flag(values: Sequence[str]) -> bool:
    """Server side: one boolean query parameter as the API server reads it (docs/protocol.md).

    Absent is false; otherwise only the first value counts, and it is false when it is ``0`` or
    ``false`` in any letter case (apimachinery's ``Convert_Slice_string_To_bool`` uses
    ``strings.EqualFold``; the official Python client sends ``False``). Any other value, including
    the empty string, is true.
    """
    if not values:
        return False
    first = values[0]
    return not (first == "0" or first.lower() == "false")


@attrs.frozen(kw_only=True)
class ExecQuery:
    """Server side: what an exec (or attach) upgrade request asks for."""

    command: tuple[str, ...]
    container: str | None
    streams: ExecStreams


def parse_exec_query(pairs: Iterable[tuple[str, str]]) -> ExecQuery:
    """Server side: read an exec request's decoded query pairs (docs/protocol.md).

    One ``command`` per argv element, in order; ``container`` (first value, empty means not
    given); the four flags per :func:`parse_exec_flag`. With ``tty`` the server forces stderr off,
    as the kubelet does.

    Raises:
        ExecError: ``EXEC_INVALID`` when none of stdin, stdout and stderr is requested (the
            kubelet's "you must specify at least 1 of stdin, stdout, stderr").
    """
    values: dict[str, list[str]] = {}
    for key, value in pairs:
        values.setdefault(key, []).append(value)
    containers = values.get("container", [])
    tty = parse_exec_flag(values.get("tty", []))
    streams = ExecStreams(
        stdin=parse_exec_flag(values.get("stdin", [])),
        stdout=parse_exec_flag(values.get("stdout", [])),
        stderr=parse_exec_flag(values.get("stderr", [])) and not tty,
        tty=tty,
    )
    if not (streams.stdin or streams.stdout or parse_exec_flag(values.get("stderr", []))):
        raise ExecError(
            ExecErrorCode.INVALID, "you must specify at least 1 of stdin, stdout, stderr"
        )
    return ExecQuery(
        command=tuple(values.get("command", [])),
        container=containers[0] if containers and containers[0] else None,
        streams=streams,
    )
