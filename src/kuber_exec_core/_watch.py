"""A sans-IO reflector: LIST one kind in one namespace, then WATCH it, keeping slim snapshots.

The reflector is client-go's ``Reflector`` without the I/O, the clock and the goroutines, in the
style of the REST plans (:mod:`._kube_api`) and of h11: it says which request to make, and is fed
the answers. It reads the API as those plans do, through their resources (paths and parsers:
``DEPLOYMENTS``, ``REPLICA_SETS``, ``PODS``), their LIST paging and their error for a failed
answer, so a cached snapshot is the one a REST read gives. One driver loop runs it::

    reflector = Reflector(PODS, "demo")
    while True:
        request = reflector.next_event()
        try:
            if isinstance(request, ApiGet):            # a LIST page
                reflector.list_received(await http_get(request))
                continue
            stream = await open_stream(request)        # a WatchRequest
            if stream.status != 200:
                reflector.watch_failed(ApiResponse(status=stream.status, body=await stream.read()))
                continue
            async with stream:                         # closed on every way out
                async for chunk in stream:
                    if not reflector.watch_data(chunk):  # it wants a relist: close
                        break
                else:
                    reflector.watch_ended()            # timed out or dropped: resume
        except ExecError:
            await backoff()                            # then follow next_event() again

(A connection error while reading a stream is ``watch_ended()`` too, then a backoff.)

Contract of the feeders: an ``ExecError`` (always ``EXEC_FAILED``) means "close what you were
reading, back off, then follow :meth:`Reflector.next_event` again": the reflector has already
moved to the request to retry (the same LIST page, the same WATCH, or a relist). The expected
transitions raise nothing: a watch that ends (``timeoutSeconds``, a dropped connection) resumes
from the last resourceVersion, and ``410 Gone`` (HTTP, or an ``ERROR`` event whose Status has
code 410) relists at once. Time is the driver's business: the core has no clock, so the backoff
between retries and the read timeouts live in the driver (the async layer's target cache).

Resource versions are opaque strings in Kubernetes. The reflector compares two of them only when
both are decimal integers, which is what etcd (and the sandbox) give; any other pair is treated
as "the later event wins", i.e. server order. With that comparison it never goes backwards: the
resume point only moves forward, an event older than the snapshot it would replace is dropped (a
replay), and a LIST older than what a watch already showed is refused.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic
from urllib.parse import urlencode

import attrs

from ._errors import ExecError, ExecErrorCode
from ._jsonlines import DEFAULT_MAX_WATCH_LINE_BYTES, JsonLinesDecoder
from ._kube_api import (
    DEFAULT_LIST_PAGE_SIZE,
    DEFAULT_MAX_LIST_PAGES,
    DEPLOYMENTS,
    PODS,
    REPLICA_SETS,
    ApiGet,
    ApiResponse,
    ApiStatus,
    ListPaging,
    ResourceKind,
    SnapshotT,
    api_error,
    http_failure,
)
from ._objects import load_json_object, parse_list, parse_object_meta

__all__ = [
    "DEPLOYMENTS",
    "PODS",
    "REPLICA_SETS",
    "Reflector",
    "ReflectorState",
    "ResourceKind",
    "WatchRequest",
    "compare_resource_versions",
]


@attrs.frozen(kw_only=True)
class WatchRequest:
    """A streaming GET the driver must open; its body goes to :meth:`Reflector.watch_data`.

    Each new watch is a new object: the one the driver opened stays the one it feeds until
    :meth:`Reflector.watch_data` returns ``False`` or the driver reports the end.
    """

    path: str
    query: tuple[tuple[str, str], ...]

    @property
    def resource_version(self) -> str:
        """Where the watch starts: events strictly after this resourceVersion."""
        return dict(self.query).get("resourceVersion", "")

    @property
    def target(self) -> str:
        """Path and query, URL-encoded, ready to append to the server's base URL."""
        return f"{self.path}?{urlencode(self.query)}"


class ReflectorState(enum.Enum):
    """What :meth:`Reflector.next_event` asks for."""

    #: A LIST page (:class:`~kuber_exec_core.ApiGet`): answer it with ``list_received``.
    LISTING = "listing"
    #: A :class:`WatchRequest`: open it and feed its stream (``watch_data``, then ``watch_ended``
    #: or ``watch_failed``).
    WATCHING = "watching"


def _decimal(version: str) -> int | None:
    # isascii: str.isdigit() also accepts "²" and other digits int() refuses or reads differently.
    return int(version) if version.isascii() and version.isdigit() else None


def compare_resource_versions(left: str, right: str) -> int | None:
    """``-1``/``0``/``1`` when both are decimal integers (etcd's revisions), else ``None``.

    Kubernetes documents resourceVersions as opaque; only equality is promised. The integers are
    an etcd fact every real cluster and the sandbox share, and ``None`` (no order) makes the
    reflector trust server order instead.
    """
    a, b = _decimal(left), _decimal(right)
    if a is None or b is None:
        return None
    return (a > b) - (a < b)


class Reflector(Generic[SnapshotT]):
    """The LIST-then-WATCH mirror of one ``kind`` in one ``namespace``.

    ``items`` holds the slim snapshot of every object (by name) as of ``resource_version``.
    ``synced`` is ``False`` until the first LIST completes, and again after the reflector had to
    drop an event it could not read (until the relist it triggers completes); a dropped watch or
    a ``410 Gone`` keeps it ``True``: the snapshot is then as fresh as with a live watch, minus
    the time to reconnect or relist.

    Raises (constructor):
        ExecError: ``EXEC_INVALID`` for a non-positive page size, page limit, line limit or
            watch timeout.
    """

    def __init__(
        self,
        kind: ResourceKind[SnapshotT],
        namespace: str,
        *,
        page_size: int = DEFAULT_LIST_PAGE_SIZE,
        max_pages: int = DEFAULT_MAX_LIST_PAGES,
        watch_timeout_seconds: int | None = None,
        max_line_bytes: int = DEFAULT_MAX_WATCH_LINE_BYTES,
    ) -> None:
        for value, name in (
            (page_size, "page_size"),
            (max_pages, "max_pages"),
            (
                1 if watch_timeout_seconds is None else watch_timeout_seconds,
                "watch_timeout_seconds",
            ),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ExecError(ExecErrorCode.INVALID, f"{name} must be a positive integer")
        self.kind = kind
        self.namespace = namespace
        self._path = kind.collection_path(namespace)
        # No resourceVersion: a quorum read of the latest state (a cached "0" read could be
        # older than what this reflector already saw).
        self._paging = ListPaging(self._path, page_size=page_size, max_pages=max_pages)
        self._timeout = watch_timeout_seconds
        self._decoder = JsonLinesDecoder(max_line_bytes)
        self._items: dict[str, SnapshotT] = {}
        # The resourceVersion of each snapshot, to drop replays ("" when the server gave none).
        self._versions: dict[str, str] = {}
        self._resource_version: str | None = None
        self._synced = False
        self._lists_completed = 0
        self._changes = 0
        # The LIST in progress: its pages accumulate here and replace the snapshot at the end,
        # so a half-read relist never shows (client-go's Replace).
        self._listed: dict[str, SnapshotT] = {}
        self._listed_versions: dict[str, str] = {}
        self._list_version: str | None = None
        self._state = ReflectorState.LISTING
        self._request: ApiGet | WatchRequest = self._paging.request()

    # -- what the driver reads ---------------------------------------------------------------------

    @property
    def state(self) -> ReflectorState:
        """Whether :meth:`next_event` is a LIST page or a WATCH."""
        return self._state

    @property
    def synced(self) -> bool:
        """Whether ``items`` may answer queries (see the class docstring)."""
        return self._synced

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (LIST, event or bookmark); ``None`` before any LIST."""
        return self._resource_version

    @property
    def changes(self) -> int:
        """A count that moves whenever ``items`` or ``synced`` changes (and at no other time):
        an answer derived from them stays true while it is the same."""
        return self._changes

    @property
    def lists_completed(self) -> int:
        """How many LISTs completed: a driver can rate-limit relists with it."""
        return self._lists_completed

    @property
    def items(self) -> Mapping[str, SnapshotT]:
        """The snapshots by name: a read-only view that follows later events and relists."""
        return MappingProxyType(self._items)

    def next_event(self) -> ApiGet | WatchRequest:
        """The request to perform now; the same object until the reflector moves on."""
        return self._request

    # -- LIST --------------------------------------------------------------------------------------

    def list_received(self, response: ApiResponse) -> None:
        """Feed the answer to the LIST page :meth:`next_event` gave.

        Raises:
            ExecError: ``EXEC_FAILED`` for a non-2xx answer (retry the same page), a malformed
                page, endless paging, or a LIST older than the resume point (these three restart
                the LIST from its first page).
        """
        request = self._request
        if self._state is not ReflectorState.LISTING or not isinstance(request, ApiGet):
            raise ExecError(ExecErrorCode.FAILED, "a LIST response arrived that was not asked for")
        if response.status == 410 and self._paging.continuing:
            # The continue token outlived its snapshot (etcd compacted it): only a fresh LIST
            # can go on. Without a token the same request would fail again: that one raises.
            self._restart_list()
            return
        if not 200 <= response.status < 300:
            raise api_error(request, response)
        try:
            more = self._read_page(response.body)
        except ExecError:
            self._restart_list()
            raise
        if more:
            self._request = self._paging.request()
        else:
            self._finish_list()

    def _read_page(self, body: bytes) -> bool:
        kind = f"{self.kind.kind}List"
        page = parse_list(load_json_object(body, kind), kind)
        version = page.resource_version
        if not version:
            raise self._malformed(kind, "has no metadata.resourceVersion")
        if self._list_version is None:
            # Every page of one LIST is the same snapshot: the first page says which.
            self._list_version = version
        for item in page.items:
            name, snapshot, item_version = self._parse_object(item)
            self._listed[name] = snapshot
            self._listed_versions[name] = item_version
        return self._paging.page_received(page.continue_token)

    def _finish_list(self) -> None:
        version = self._list_version
        assert version is not None  # _read_page set it or raised
        if self._resource_version is not None:
            order = compare_resource_versions(version, self._resource_version)
            if order is not None and order < 0:
                # A LIST without resourceVersion is a quorum read, never older than what a watch
                # showed: an older one means the server's history was reset (an etcd restore).
                # Accepting it would go back in time; the driver can start a new reflector.
                self._restart_list()
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Kubernetes API LIST {self._path} answered resourceVersion {version}, "
                    f"older than {self._resource_version} already seen",
                )
        # In place, so that a view of ``items`` taken earlier shows the new snapshot too.
        self._items.clear()
        self._items.update(self._listed)
        self._versions = self._listed_versions
        self._resource_version = version
        self._synced = True
        self._changes += 1
        self._lists_completed += 1
        self._restart_list()
        self._start_watch()

    def _restart_list(self) -> None:
        self._listed, self._listed_versions = {}, {}
        self._list_version = None
        self._paging.restart()
        if self._state is ReflectorState.LISTING:
            self._request = self._paging.request()

    def relist(self) -> None:
        """Start a fresh LIST now (the snapshot keeps answering until it completes)."""
        self._decoder.reset()
        self._state = ReflectorState.LISTING
        self._restart_list()

    # -- WATCH -------------------------------------------------------------------------------------

    def _start_watch(self) -> None:
        assert self._resource_version is not None
        self._decoder.reset()
        self._state = ReflectorState.WATCHING
        query = [
            ("watch", "1"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self._resource_version),
        ]
        if self._timeout is not None:
            query.append(("timeoutSeconds", str(self._timeout)))
        self._request = WatchRequest(path=self._path, query=tuple(query))

    def _expect_watch(self, what: str) -> WatchRequest:
        request = self._request
        if self._state is not ReflectorState.WATCHING or not isinstance(request, WatchRequest):
            raise ExecError(ExecErrorCode.FAILED, f"{what} arrived while no watch was asked for")
        return request

    def watch_data(self, data: bytes) -> bool:
        """Feed bytes of the open watch's body; ``False`` means "close it, follow next_event()".

        Events may be split anywhere across calls and several may come in one. Each complete
        event is applied in order; after an ``ERROR`` 410 the rest of the read is dropped.

        Raises:
            ExecError: ``EXEC_FAILED`` for a malformed or too long event (the reflector relists
                and is unsynced until that LIST completes) or an ``ERROR`` event other than 410
                (the reflector resumes from its last resourceVersion).
        """
        self._expect_watch("watch data")
        try:
            lines = self._decoder.feed(data)
        except ExecError:
            self._lose_events()
            raise
        # all() stops at the first False: the rest of the read belongs to a closed watch.
        return all(self._apply_line(line) for line in lines)

    def watch_ended(self) -> None:
        """The watch stream ended (cleanly, by timeout, or dropped): resume from the last version.

        An unfinished event at the end is dropped: the resumed watch sends it again, as it only
        sends events after the last one applied.
        """
        self._expect_watch("the end of a watch")
        self._start_watch()

    def watch_failed(self, response: ApiResponse) -> None:
        """The WATCH was answered with a non-2xx status instead of a stream.

        ``410 Gone`` (the resume point was compacted) relists at once.

        Raises:
            ExecError: ``EXEC_FAILED`` for any other status; the next request is the same watch.
        """
        self._expect_watch("a watch failure")
        if response.status == 410:
            self.relist()
            return
        self._start_watch()
        raise http_failure(f"Kubernetes API WATCH {self._path}", response)

    def _apply_line(self, line: bytes) -> bool:
        try:
            kind, value = self._read_event(line)
            if kind != "ERROR":
                self._apply_event(kind, value)
                return True
        except ExecError:
            # An event we could not read is an event we did not apply: only a LIST can repair it.
            self._lose_events()
            raise
        return self._watch_error(value)

    def _read_event(self, line: bytes) -> tuple[str, dict[str, Any]]:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            raise self._bad_event("is not JSON") from None
        if not isinstance(event, dict):
            raise self._bad_event("is not an object")
        kind, value = event.get("type"), event.get("object")
        if not isinstance(kind, str) or not isinstance(value, dict):
            raise self._bad_event("has no type or no object")
        return kind, value

    def _apply_event(self, kind: str, value: dict[str, Any]) -> None:
        match kind:
            case "ADDED" | "MODIFIED":
                self._upsert(*self._parse_object(value))
            case "DELETED":
                metadata = parse_object_meta(value, self.kind.kind)
                if not metadata.name:
                    raise self._bad_event("deletes an object without metadata.name")
                self._delete(metadata.name, metadata.uid, metadata.resource_version)
            case "BOOKMARK":
                bookmark = parse_object_meta(value, self.kind.kind).resource_version
                if not bookmark:
                    raise self._bad_event("is a bookmark without metadata.resourceVersion")
                self._advance(bookmark)
            case _:
                raise self._bad_event(f"has the unknown type {kind[:40]!r}")

    def _watch_error(self, value: Mapping[str, Any]) -> bool:
        status = ApiStatus.from_value(value)
        if status.code == 410 or status.reason in ("Expired", "Gone"):
            self.relist()
            return False
        detail = f": {status.message}" if status.message else ""
        self._start_watch()
        raise ExecError(
            ExecErrorCode.FAILED,
            f"Kubernetes API WATCH {self._path} failed with status "
            f"{'?' if status.code is None else status.code}{detail}",
            status_reason=status.reason,
            status_code=status.code,
        )

    # -- applying ----------------------------------------------------------------------------------

    def _parse_object(self, value: object) -> tuple[str, SnapshotT, str]:
        snapshot = self.kind.parse(value)
        if not snapshot.name:
            raise self._malformed(self.kind.kind, "has no metadata.name")
        return snapshot.name, snapshot, parse_object_meta(value, self.kind.kind).resource_version

    def _advance(self, version: str) -> None:
        if not version:
            return
        current = self._resource_version
        order = None if current is None else compare_resource_versions(version, current)
        if order is None or order > 0:
            self._resource_version = version

    def _upsert(self, name: str, snapshot: SnapshotT, version: str) -> None:
        stored = self._versions.get(name)
        if stored is not None:
            order = compare_resource_versions(version, stored)
            if order is not None and order <= 0:
                return  # A replay of what the snapshot already shows, or older.
        self._items[name] = snapshot
        self._versions[name] = version
        self._changes += 1
        self._advance(version)

    def _delete(self, name: str, uid: str, version: str) -> None:
        self._advance(version)
        current = self._items.get(name)
        if current is None:
            return  # Deleted before we saw it, or already gone through a relist.
        order = compare_resource_versions(version, self._versions.get(name, ""))
        if order is not None:
            if order < 0:
                return  # The delete of an older incarnation, arriving after the new one.
        elif uid and current.uid and uid != current.uid:
            return  # Without an order, the uid says it was another incarnation.
        del self._items[name]
        del self._versions[name]
        self._changes += 1

    def _lose_events(self) -> None:
        self._synced = False
        self._changes += 1
        self.relist()

    def _bad_event(self, problem: str) -> ExecError:
        return ExecError(
            ExecErrorCode.FAILED,
            f"The Kubernetes API sent a malformed watch event for {self._path}: the event "
            f"{problem}",
        )

    def _malformed(self, kind: str, problem: str) -> ExecError:
        return ExecError(
            ExecErrorCode.FAILED, f"The Kubernetes API returned a malformed {kind}: it {problem}"
        )
