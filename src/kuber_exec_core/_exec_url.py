"""The exec upgrade request's path and query (protocol.md §2)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote, urlencode

import attrs

from ._target import ResolvedTarget

__all__ = ["ExecStreams", "exec_path"]


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
    namespace = quote(target.namespace, safe="")
    pod = quote(target.pod, safe="")
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/exec?{urlencode(query, quote_via=quote)}"
