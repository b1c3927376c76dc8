"""``GET .../pods/{name}/log``: a container's output, as the API server streams it.

Options (query): ``container`` (needed when the pod has several), ``follow`` (keep the body open
and stream new output until the process ends or the client goes), ``tailLines`` (only the last
N lines), ``sinceSeconds`` (only output written in the last N seconds), ``previous`` (the
previous instance's log: the sandbox never restarts a container, so always the API server's
400 for a container that has not restarted), ``timestamps`` (each line prefixed with its
RFC 3339 time and a space) and ``limitBytes``. Answers: 404 for a missing pod, 400 for a
container not in it or one still waiting to start, the body as ``text/plain`` otherwise.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Sequence

import attrs

from ._cluster import Cluster
from ._rest import RestResponse, status_response
from ._runtime import ContainerLog, ContainerRuntime, LogChunk

__all__ = ["LogPlan", "plan_log"]

Send = Callable[[bytes], Awaitable[None]]


def _lines(data: bytes) -> list[bytes]:
    """``data`` cut after each ``\n`` (only ``\n`` ends a line in a container's log)."""
    pieces = data.split(b"\n")
    lines = [piece + b"\n" for piece in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    return lines


def _tail(chunks: list[LogChunk], count: int) -> list[LogChunk]:
    """The chunks holding the last ``count`` lines (a line may span chunks; a last line without
    its ``\n`` counts), the first one cut where its line starts."""
    text = b"".join(c.data for c in chunks)
    position = len(text) - 1 if text.endswith(b"\n") else len(text)
    start = len(text) if count == 0 else None
    for _ in range(count):
        position = text.rfind(b"\n", 0, position)
        if position < 0:
            start = 0
            break
    if start is None:
        start = position + 1
    kept: list[LogChunk] = []
    offset = 0
    for chunk in chunks:
        end = offset + len(chunk.data)
        if end > start:
            cut = max(0, start - offset)
            kept.append(chunk if cut == 0 else attrs.evolve(chunk, data=chunk.data[cut:]))
        offset = end
    return kept


def _flag(query: Sequence[tuple[str, str]], name: str) -> bool:
    value = next((v for k, v in query if k == name), None)
    return value is not None and value.lower() not in ("0", "false")


def _integer(query: Sequence[tuple[str, str]], name: str) -> int | RestResponse | None:
    value = next((v for k, v in query if k == name), None)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        return status_response(400, "BadRequest", f'invalid value for {name}: "{value}"')
    if number < 0 or (name != "tailLines" and number == 0):
        return status_response(400, "BadRequest", f"{name}: Invalid value: {number}")
    return number


@attrs.define
class LogPlan:
    """An accepted log request: what to send, and whether to follow."""

    log: ContainerLog
    follow: bool
    tail_lines: int | None
    since: datetime.datetime | None
    timestamps: bool
    limit_bytes: int | None
    _sent: int = 0
    _line_start: bool = True

    def _render(self, chunk: LogChunk) -> bytes:
        if not self.timestamps:
            return chunk.data
        stamp = chunk.time.strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
        out = bytearray()
        for piece in _lines(chunk.data):
            if self._line_start:
                out += stamp + b" "
            out += piece
            self._line_start = piece.endswith(b"\n")
        return bytes(out)

    def _initial(self) -> tuple[list[LogChunk], int]:
        chunks = self.log.chunks()
        next_seq = self.log.next_seq
        if self.since is not None:
            chunks = [c for c in chunks if c.time >= self.since]
        if self.tail_lines is not None:
            chunks = _tail(chunks, self.tail_lines)
        return chunks, next_seq

    async def run(self, send: Send) -> None:
        """Send the log (and, following, what comes until the process ends)."""
        chunks, seq = self._initial()
        if not await self._send(send, chunks):
            return
        while self.follow and not (self.log.ended and seq >= self.log.next_seq):
            await self.log.wait_after(seq)
            fresh = self.log.chunks(seq)
            seq = self.log.next_seq
            if not await self._send(send, fresh):
                return

    async def _send(self, send: Send, chunks: list[LogChunk]) -> bool:
        for chunk in chunks:
            data = self._render(chunk)
            if self.limit_bytes is not None:
                room = self.limit_bytes - self._sent
                data = data[:room]
            if data:
                self._sent += len(data)
                await send(data)
            if self.limit_bytes is not None and self._sent >= self.limit_bytes:
                return False
        return True


def plan_log(
    cluster: Cluster,
    runtime: ContainerRuntime,
    namespace: str,
    pod_name: str,
    query: Sequence[tuple[str, str]],
) -> LogPlan | RestResponse:
    """The plan for a log request, or the answer that refuses it."""
    with cluster.lock:
        pod = cluster.pod(namespace, pod_name)
        if pod is None:
            return status_response(
                404, "NotFound", f'pods "{pod_name}" not found', {"name": pod_name, "kind": "pods"}
            )
        name = next((v for k, v in query if k == "container"), "") or None
        names = [c.name for c in pod.containers] + [c.name for c in pod.ephemeral]
        if name is None:
            if len(pod.containers) != 1:
                listed = " ".join(c.name for c in pod.containers)
                return status_response(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {pod.name}, "
                    f"choose one of: [{listed}]",
                )
            name = pod.containers[0].name
        if name not in names:
            return status_response(
                400, "BadRequest", f"container {name} is not valid for pod {pod.name}"
            )
        ephemeral = pod.ephemeral_container(name)
        restarted = (c := pod.container(name)) is not None and c.restart_count > 0
        if _flag(query, "previous") and not restarted:
            return status_response(
                400,
                "BadRequest",
                f'previous terminated container "{name}" in pod "{pod.name}" not found',
            )
        if ephemeral is not None and ephemeral.state == "waiting":
            return status_response(
                400,
                "BadRequest",
                f'container "{name}" in pod "{pod.name}" is waiting to start: {ephemeral.reason}',
            )
        running = runtime.container(pod, name)
    tail = _integer(query, "tailLines")
    since_seconds = _integer(query, "sinceSeconds")
    limit = _integer(query, "limitBytes")
    for value in (tail, since_seconds, limit):
        if isinstance(value, RestResponse):
            return value
    assert not isinstance(tail, RestResponse)
    assert not isinstance(since_seconds, RestResponse)
    assert not isinstance(limit, RestResponse)
    log = running.log if running is not None else _empty_log()
    since = (
        None
        if since_seconds is None
        else datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=since_seconds)
    )
    return LogPlan(
        log=log,
        follow=_flag(query, "follow"),
        tail_lines=tail,
        since=since,
        timestamps=_flag(query, "timestamps"),
        limit_bytes=limit,
    )


def _empty_log() -> ContainerLog:
    # A container with no process (no command in the sandbox): an empty log that has ended.
    log = ContainerLog()
    log.end()
    return log
