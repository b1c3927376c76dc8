"""Watches: ``?watch=1`` on a namespace's Pods, Deployments or ReplicaSets, as a JSON-lines stream.

The API server's shape: ``200`` with a chunked body that stays open, one ``{"type": ...,
"object": ...}`` line per event: ``ADDED``/``MODIFIED``/``DELETED`` for each change after the
requested ``resourceVersion`` (every current object as ``ADDED`` first when none, or ``0``, is
given), ``BOOKMARK`` every ``bookmark_interval`` seconds when ``allowWatchBookmarks=true``
(carrying only ``metadata.resourceVersion``), and, after a
:meth:`~kuber_exec_sandbox.Cluster.compact`, an ``ERROR`` event whose Status has code ``410``,
which ends the stream. A watch from a resourceVersion older than the history is answered
``410 Gone`` (reason ``Expired``) at once, and so is any watch while
``cluster.faults.answer_watches_gone`` has requests armed. ``timeoutSeconds`` ends the stream
cleanly; :meth:`~kuber_exec_sandbox.Cluster.drop_watches` drops it without ending the body.

Waiting is on the server's trio loop: a :class:`WatchHub` is woken by every
:meth:`~kuber_exec_sandbox.Cluster.touch` (from whichever thread touched, through the trio token),
then each watch re-renders its namespace under the model's lock and sends what changed.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from . import _render
from ._cluster import Cluster
from ._journal import Journal, WatchEvent, journal_of
from ._rest import RestResponse, collection_route, is_watch, status_response

__all__ = ["DEFAULT_BOOKMARK_INTERVAL", "WatchHub", "WatchPlan", "plan_watch"]

#: Seconds between bookmarks (the API server sends one about every minute; tests want them soon).
DEFAULT_BOOKMARK_INTERVAL = 1.0
_KINDS = {"pods": ("Pod", "v1"), "deployments": ("Deployment", "apps/v1")}
_KINDS["replicasets"] = ("ReplicaSet", "apps/v1")


class WatchHub:
    """Wakes every open watch of one server; :meth:`wake` runs on the server's trio loop."""

    def __init__(self) -> None:
        self._event = trio.Event()
        #: Watches being streamed now (the connection handler counts them).
        self.open = 0

    @property
    def event(self) -> trio.Event:
        """Set by the next :meth:`wake`: take it *before* looking at the model, then wait."""
        return self._event

    def wake(self) -> None:
        """Wake every watch waiting now (call on the trio loop)."""
        self._event.set()
        self._event = trio.Event()

    def waker(self, token: trio.lowlevel.TrioToken) -> Callable[[], None]:
        """A listener for :meth:`Cluster.add_listener`: wakes the hub from any thread."""

        def wake_soon() -> None:
            # RunFinishedError: the server has stopped, nobody is waiting.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self.wake)

        return wake_soon


def _line(kind: str, value: object) -> bytes:
    return json.dumps({"type": kind, "object": value}, separators=(",", ":")).encode() + b"\n"


def _expired(version: int, oldest: int) -> dict[str, object]:
    return _render.status_error(410, "Expired", f"too old resource version: {version} ({oldest})")


@attrs.define
class WatchPlan:
    """An accepted watch, ready to stream (see :meth:`run`)."""

    cluster: Cluster
    resource: str
    namespace: str
    bookmarks: bool
    timeout: float | None
    _cursor: int
    _initial: list[bytes]
    _epoch: int
    _drops: int
    #: ``fieldSelector=metadata.name=...``: only this object's events.
    only_name: str | None = None

    async def run(
        self, hub: WatchHub, send: Callable[[bytes], Awaitable[None]], bookmark_interval: float
    ) -> bool:
        """Stream events through ``send`` until the timeout (``True``: end the body cleanly), a
        compaction (an ``ERROR`` 410 event, then ``True``) or a drop (``False``: close the
        connection without ending the body). Cancellation (the server stopping) ends it too."""
        for line in self._initial:
            await send(line)
        self._initial = []
        now = trio.current_time()
        deadline = math.inf if self.timeout is None else now + self.timeout
        next_bookmark = now + bookmark_interval if self.bookmarks else math.inf
        kind, api_version = _KINDS[self.resource]
        while True:
            woken = hub.event
            with self.cluster.lock:
                journal = journal_of(self.cluster)
                journal.refresh()
                if self.cluster.watch_drops != self._drops:
                    return False
                compacted = journal.epoch != self._epoch
                if compacted:
                    expired = _expired(journal.oldest_valid - 1, journal.oldest_valid)
                    lines = [_line("ERROR", expired)]
                else:
                    lines = [_line(e.type, e.object) for e in self._new_events(journal)]
                version = self.cluster.resource_version
            for line in lines:
                await send(line)
            if compacted:
                return True
            now = trio.current_time()
            if now >= next_bookmark:
                bookmark = {
                    "kind": kind,
                    "apiVersion": api_version,
                    "metadata": {"resourceVersion": str(version)},
                }
                await send(_line("BOOKMARK", bookmark))
                next_bookmark = now + bookmark_interval
            if now >= deadline:
                return True
            with trio.move_on_at(min(deadline, next_bookmark)):
                await woken.wait()

    def _new_events(self, journal: Journal) -> list[WatchEvent]:
        events = [
            event
            for event in journal.events(self._cursor)
            if event.resource == self.resource
            and event.namespace == self.namespace
            and (self.only_name is None or _name_of(event.object) == self.only_name)
        ]
        self._cursor = journal.end
        return events


def _name_of(value: object) -> object:
    metadata = value.get("metadata") if isinstance(value, dict) else None
    return metadata.get("name") if isinstance(metadata, dict) else None


def _number(text: str | None, name: str) -> int | RestResponse | None:
    if text is None or text == "":
        return None
    if not text.isascii() or not text.isdigit():
        return status_response(400, "BadRequest", f"{name}: Invalid value: {text!r}")
    return int(text)


def plan_watch(
    cluster: Cluster, method: str, path: str, query: Sequence[tuple[str, str]]
) -> WatchPlan | RestResponse | None:
    """The watch ``path``/``query`` asks for, the error answer to it, or ``None`` (not a watch
    of a namespaced collection: answer it over REST)."""
    route = collection_route(path)
    if route is None or route[2] is not None or not is_watch(query) or method != "GET":
        return None
    resource, namespace, _ = route
    values = dict(query)
    field = values.get("fieldSelector") or ""
    only_name = field.removeprefix("metadata.name=") if field.startswith("metadata.name=") else None
    if values.get("labelSelector") or (field and (only_name is None or "," in field)):
        return status_response(
            400,
            "BadRequest",
            "the kuber-exec sandbox filters watches only by fieldSelector=metadata.name=NAME",
        )
    version = _number(values.get("resourceVersion"), "resourceVersion")
    timeout = _number(values.get("timeoutSeconds"), "timeoutSeconds")
    if isinstance(version, RestResponse):
        return version
    if isinstance(timeout, RestResponse):
        return timeout
    with cluster.lock:
        journal = journal_of(cluster)
        journal.watched(namespace)
        journal.refresh()
        if cluster.faults.take_gone_watch():
            expired = _expired(version or 0, journal.oldest_valid)
            return RestResponse(410, json.dumps(expired).encode())
        initial: list[bytes] = []
        if version is None or version == 0:
            # "Any version": the current state as ADDED events, then changes from there.
            initial = [
                _line("ADDED", item)
                for item in journal.items(resource, namespace)
                if only_name is None or _name_of(item) == only_name
            ]
            cursor = journal.end
        else:
            after = journal.cursor_after(version)
            if after is None:
                expired = _expired(version, journal.oldest_valid)
                return RestResponse(410, json.dumps(expired).encode())
            cursor = after
        return WatchPlan(
            cluster=cluster,
            resource=resource,
            namespace=namespace,
            bookmarks=values.get("allowWatchBookmarks") == "true",
            timeout=float(timeout) if timeout else None,  # 0 is "the server's default": none
            cursor=cursor,
            initial=initial,
            epoch=journal.epoch,
            drops=cluster.watch_drops,
            only_name=only_name,
        )
