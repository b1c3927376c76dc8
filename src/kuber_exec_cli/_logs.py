"""``kuber-exec logs``: print a container's log, following it with ``-f``.

kubectl's shape: ``-f``, ``--since 5m``, ``--tail 100``, ``--timestamps``, ``--previous``,
``--limit-bytes``. Bytes are written as they arrive, untouched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from kuber_exec_asyncio import (
    ContainerRequest,
    ExecError,
    ExecService,
    LogOptions,
    Workspace,
    stream_logs,
)

from ._arguments import UsageError
from ._cluster import open_backend
from ._pod_commands import PodTarget, new_parser
from ._streaming import LocalStreams

__all__ = ["LogsOptions", "parse_duration", "parse_logs", "run_logs"]

_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_EPILOG = """\
examples:
  kuber-exec logs --project team-a --workspace-uid 7d3c0b52 web
  kuber-exec logs --project team-a --workspace-uid 7d3c0b52 -f --tail 100 --since 10m web
"""


def parse_duration(text: str) -> int:
    """``90``, ``45s``, ``5m``, ``1h30m`` as seconds (at least 1).

    Raises:
        ValueError: not such a duration.
    """
    if text.isdigit():
        seconds = int(text)
    else:
        match = _DURATION.fullmatch(text)
        if match is None or not any(match.groups()):
            raise ValueError(text)
        hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds < 1:
        raise ValueError(text)
    return seconds


@attrs.frozen(kw_only=True)
class LogsOptions:
    """What ``kuber-exec logs`` was asked to do."""

    target: PodTarget
    log: LogOptions


def parse_logs(args: Sequence[str], remote: Sequence[str] | None) -> LogsOptions:
    """Parse ``logs``'s arguments (``UsageError`` for a mistake)."""
    parser = new_parser(
        "logs", description="Print the log of a workspace Deployment's container.", epilog=_EPILOG
    )
    reading = parser.add_argument_group("what to read")
    reading.add_argument("-f", "--follow", action="store_true", help="keep streaming new output")
    reading.add_argument("--since", metavar="DURATION", help="only the last 5s, 2m, 1h30m ...")
    reading.add_argument("--tail", metavar="N", type=int, help="only the last N lines")
    reading.add_argument("--timestamps", action="store_true", help="prefix each line's time")
    reading.add_argument("-p", "--previous", action="store_true", help="the previous instance")
    reading.add_argument("--limit-bytes", metavar="N", type=int, help="stop after N bytes")
    namespace = parser.parse_args(args)
    if remote is not None:
        raise UsageError(parser, "logs takes no command")
    try:
        since = None if namespace.since is None else parse_duration(namespace.since)
    except ValueError:
        raise UsageError(
            parser, f"--since {namespace.since}: not a duration (5s, 2m, 1h)"
        ) from None
    try:
        log = LogOptions(
            follow=namespace.follow,
            since_seconds=since,
            tail_lines=None if namespace.tail is None or namespace.tail < 0 else namespace.tail,
            previous=namespace.previous,
            timestamps=namespace.timestamps,
            limit_bytes=namespace.limit_bytes,
        )
    except ExecError as error:
        raise UsageError(parser, error.message) from None
    return LogsOptions(target=PodTarget.of(parser, namespace), log=log)


async def run_logs(options: LogsOptions, streams: LocalStreams) -> int:
    """Write the log to stdout as it comes; 0 once it ends."""
    target = options.target
    request = ContainerRequest(
        workspace=Workspace(project=target.project, uid=target.workspace_uid),
        deployment=target.deployment,
        container=target.container,
    )
    async with open_backend(target) as backend:
        service = ExecService(backend)
        async with stream_logs(service, request, options.log) as log:
            async for chunk in log:
                streams.stdout.write(chunk)
                streams.stdout.flush()
    return 0
