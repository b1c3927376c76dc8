"""The paths of a pod and of its exec and attach upgrades, with their queries
(docs/protocol.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from ._errors import ExecError, ExecErrorCode
from ._kube_api import PODS
from ._quoting import quote_value
from ._target import ResolvedTarget

__all__ = [
    "ExecQuery",
    "ExecStreams",
    "attach_path",
    "exec_path",
    "parse_exec_flag",
    "parse_exec_query",
    "pod_path",
    "quote_value",
]


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


def pod_path(namespace: str, pod: str) -> str:
    """``/api/v1/namespaces/{ns}/pods/{pod}`` (each segment percent-encoded)."""
    return PODS.object_path(namespace, pod)


def attach_path(target: ResolvedTarget, streams: ExecStreams) -> str:
    """``/api/v1/namespaces/{ns}/pods/{pod}/attach?...``: exec's query without ``command``
    (False flags omitted; with a TTY stderr is not asked for)."""
    query = [("container", target.container)]
    for name, enabled in (
        ("stdin", streams.stdin),
        ("stdout", streams.stdout),
        ("stderr", streams.stderr and not streams.tty),
        ("tty", streams.tty),
    ):
        if enabled:
            query.append((name, "true"))
    encoded = "&".join(f"{name}={quote_value(value)}" for name, value in query)
    return f"{PODS.object_path(target.namespace, target.pod)}/attach?{encoded}"
