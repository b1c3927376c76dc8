"""The Kubernetes REST reads a real backend performs, as sans-IO plans.

Each plan yields :class:`ApiGet` requests, is fed :class:`ApiResponse` answers, and finally holds
its result. ``DeploymentLookup`` reads one Deployment; ``PodListing`` lists pods by selector (with
``continue`` paging) and then reads each ReplicaSet a candidate pod names as its controller, so
that a pod's owning Deployment is known through the controller chain, never through labels.

The watch cache's reflectors (:mod:`._watch`) read the same API: this module is the one place for
what both need: the resources (:class:`ResourceKind`: paths and parsers), LIST paging
(:class:`ListPaging`) and the error of a non-2xx answer (:func:`http_failure`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import urlencode

import attrs

from ._errors import ExecError, ExecErrorCode
from ._objects import (
    Deployment,
    Pod,
    PodRecord,
    ReplicaSet,
    load_json_object,
    parse_deployment,
    parse_pod,
    parse_pod_list,
    parse_replica_set,
    resolve_pod_owners,
)
from ._quoting import quote_value
from ._selector import LabelSelector

__all__ = [
    "DEFAULT_LIST_PAGE_SIZE",
    "DEFAULT_MAX_LIST_PAGES",
    "DEPLOYMENTS",
    "PODS",
    "REPLICA_SETS",
    "ApiGet",
    "ApiPlan",
    "ApiResponse",
    "ApiStatus",
    "DeploymentLookup",
    "ListPaging",
    "PodListing",
    "ResourceKind",
    "SnapshotT",
    "api_error",
    "exec_upgrade_error",
    "http_failure",
]

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")

#: Objects per LIST page: client-go's default.
DEFAULT_LIST_PAGE_SIZE = 500
#: Pages before a LIST is refused as endless: 100,000 objects of one kind in one namespace, far
#: more pods than any Deployment's selector matches.
DEFAULT_MAX_LIST_PAGES = 200


class _Snapshot(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...


#: A snapshot type: anything with a name and a uid.
SnapshotT = TypeVar("SnapshotT", bound=_Snapshot)


def _segment(value: str) -> str:
    # Names are validated DNS names; quoting anyway keeps any path injection impossible.
    return quote_value(value)


@attrs.frozen(kw_only=True)
class ResourceKind(Generic[SnapshotT]):
    """One namespaced resource: its paths, and the parser of its snapshot.

    The REST plans and the watch cache's reflectors read a kind through the same object, so both
    build the same paths and parse the same snapshots.
    """

    #: The API group's path prefix: ``/api/v1`` or ``/apis/apps/v1``.
    api_prefix: str
    #: The plural resource name in URLs.
    resource: str
    #: The object kind, for messages (``Pod``).
    kind: str
    parse: Callable[[object], SnapshotT] = attrs.field(eq=False, repr=False)

    def collection_path(self, namespace: str) -> str:
        """The LIST/WATCH path of this resource in ``namespace``."""
        return f"{self.api_prefix}/namespaces/{_segment(namespace)}/{self.resource}"

    def object_path(self, namespace: str, name: str) -> str:
        """The GET path of the object ``name`` in ``namespace``."""
        return f"{self.collection_path(namespace)}/{_segment(name)}"


DEPLOYMENTS: ResourceKind[Deployment] = ResourceKind(
    api_prefix="/apis/apps/v1", resource="deployments", kind="Deployment", parse=parse_deployment
)
REPLICA_SETS: ResourceKind[ReplicaSet] = ResourceKind(
    api_prefix="/apis/apps/v1", resource="replicasets", kind="ReplicaSet", parse=parse_replica_set
)
PODS: ResourceKind[PodRecord] = ResourceKind(
    api_prefix="/api/v1", resource="pods", kind="Pod", parse=parse_pod
)


@attrs.frozen(kw_only=True)
class ApiGet:
    """A GET the driver must perform against the API server."""

    path: str
    query: tuple[tuple[str, str], ...] = ()

    @property
    def target(self) -> str:
        """Path and query, URL-encoded, ready to append to the server's base URL."""
        return f"{self.path}?{urlencode(self.query)}" if self.query else self.path


@attrs.frozen(kw_only=True, repr=False)
class ApiResponse:
    """The answer to an :class:`ApiGet`: HTTP status and raw body."""

    status: int
    body: bytes

    def __repr__(self) -> str:
        return f"ApiResponse(status={self.status}, body=<{len(self.body)} bytes>)"


class ApiPlan(Protocol[T_co]):
    """A REST plan: ``next_event()`` until it returns ``None``, then ``result()``."""

    def next_event(self) -> ApiGet | None: ...

    def response_received(self, response: ApiResponse) -> None: ...

    def result(self) -> T_co: ...


@attrs.frozen(kw_only=True)
class ApiStatus:
    """What kuber-exec reads of a Kubernetes ``Status`` object: each field ``None`` when absent
    or not of its JSON type."""

    message: str | None = None
    reason: str | None = None
    code: int | None = None

    @classmethod
    def from_value(cls, value: object) -> ApiStatus:
        """The fields of a decoded JSON value (all ``None`` when it is not an object)."""
        if not isinstance(value, dict):
            return cls()
        message, reason, code = value.get("message"), value.get("reason"), value.get("code")
        return cls(
            message=message if isinstance(message, str) else None,
            reason=reason if isinstance(reason, str) else None,
            code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        )

    @classmethod
    def from_body(cls, body: bytes) -> ApiStatus:
        """The fields of a response body (all ``None`` when it is not a JSON object)."""
        try:
            value: Any = json.loads(body)
        except (ValueError, RecursionError):
            return cls()
        return cls.from_value(value)


def http_failure(action: str, response: ApiResponse) -> ExecError:
    """``EXEC_FAILED`` for a non-2xx ``response`` to ``action`` (``Kubernetes API GET /api/...``).

    The message is "``action`` failed with HTTP ``status``", then the ``Status`` message when the
    body is a Status that has one. The error carries ``http_status`` and the Status's ``reason``
    and ``code``: callers decide on those, never on the wording.
    """
    status = ApiStatus.from_body(response.body)
    detail = f": {status.message}" if status.message else ""
    return ExecError(
        ExecErrorCode.FAILED,
        f"{action} failed with HTTP {response.status}{detail}",
        http_status=response.status,
        status_reason=status.reason,
        status_code=status.code,
    )


def api_error(request: ApiGet, response: ApiResponse) -> ExecError:
    """``EXEC_FAILED`` for a non-2xx answer to ``request``, quoting the API's ``Status`` message if
    it sent one; ``http_status`` (and the Status's ``reason`` and ``code``) say what it was."""
    return http_failure(f"Kubernetes API GET {request.path}", response)


class _SingleGet(Generic[T]):
    def __init__(self, request: ApiGet) -> None:
        self._request: ApiGet | None = request
        self._sent = request
        self._result: T | None = None
        self._done = False

    def next_event(self) -> ApiGet | None:
        return self._request

    def response_received(self, response: ApiResponse) -> None:
        if self._request is None:
            raise ExecError(ExecErrorCode.FAILED, "an API response arrived that was not asked for")
        self._request = None
        self._result = self._parse(response)
        self._done = True

    def _parse(self, response: ApiResponse) -> T | None:
        raise NotImplementedError

    def result(self) -> T | None:
        if not self._done:
            raise ExecError(ExecErrorCode.FAILED, "the API plan has not finished")
        return self._result


class ListPaging:
    """The ``continue`` paging of one LIST of ``path``: the request for each page, and the check
    that ends a LIST that never finishes.

    ``query`` goes first in every page's query, then ``limit`` and the ``continue`` token.
    """

    # Slots: a watch cache holds one per reflector, three per namespace.
    __slots__ = ("_max_pages", "_page_size", "_pages", "_query", "_token", "path")

    def __init__(
        self,
        path: str,
        query: tuple[tuple[str, str], ...] = (),
        *,
        page_size: int = DEFAULT_LIST_PAGE_SIZE,
        max_pages: int = DEFAULT_MAX_LIST_PAGES,
    ) -> None:
        self.path = path
        self._query = query
        self._page_size = page_size
        self._max_pages = max_pages
        self._token: str | None = None
        self._pages = 0

    @property
    def continuing(self) -> bool:
        """Whether the next request carries a ``continue`` token (the LIST is past page one)."""
        return self._token is not None

    def request(self) -> ApiGet:
        """The GET of the next page."""
        query = (*self._query, ("limit", str(self._page_size)))
        if self._token is not None:
            query += (("continue", self._token),)
        return ApiGet(path=self.path, query=query)

    def page_received(self, token: str | None) -> bool:
        """Count a page that ended with ``token`` (``None``: the last); whether another follows.

        Raises:
            ExecError: ``EXEC_FAILED`` when the server repeats its token or ``max_pages`` pages
                did not finish the LIST (a server that never ends must not hang us).
        """
        self._pages += 1
        if token is not None and (token == self._token or self._pages >= self._max_pages):
            raise ExecError(
                ExecErrorCode.FAILED,
                f"Kubernetes API GET {self.path} did not finish paging after {self._pages} pages",
            )
        self._token = token
        return token is not None

    def restart(self) -> None:
        """Back to the first page."""
        self._token = None
        self._pages = 0


class DeploymentLookup(_SingleGet[Deployment]):
    """GET one ``apps/v1`` Deployment; the result is ``None`` on 404."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(ApiGet(path=DEPLOYMENTS.object_path(namespace, name)))

    def _parse(self, response: ApiResponse) -> Deployment | None:
        if response.status == 404:
            return None
        if not 200 <= response.status < 300:
            raise api_error(self._sent, response)
        return DEPLOYMENTS.parse(load_json_object(response.body, DEPLOYMENTS.kind))


class PodListing:
    """LIST pods by selector, then GET the ReplicaSets they name; the result is owner-resolved."""

    def __init__(self, namespace: str, selector: LabelSelector) -> None:
        self._namespace = namespace
        self._paging = ListPaging(
            PODS.collection_path(namespace), (("labelSelector", selector.to_query()),)
        )
        self._records: list[PodRecord] = []
        self._listing = True
        self._pending_replica_sets: list[str] = []
        self._replica_sets: dict[str, ReplicaSet] = {}
        self._current: ApiGet | None = self._paging.request()
        self._result: tuple[Pod, ...] | None = None

    def next_event(self) -> ApiGet | None:
        return self._current

    def response_received(self, response: ApiResponse) -> None:
        request = self._current
        if request is None:
            raise ExecError(ExecErrorCode.FAILED, "an API response arrived that was not asked for")
        if self._listing:
            self._pods_page(request, response)
        else:
            self._replica_set(request, response)
        self._advance()

    def _pods_page(self, request: ApiGet, response: ApiResponse) -> None:
        if not 200 <= response.status < 300:
            raise api_error(request, response)
        records, token = parse_pod_list(load_json_object(response.body, "PodList"))
        self._records.extend(records)
        if not self._paging.page_received(token):
            self._listing = False
            self._pending_replica_sets = sorted(
                {
                    record.controller.name
                    for record in self._records
                    # Only a running, live pod can be chosen or counted: skip the others' reads.
                    if record.phase == "Running"
                    and not record.deletion_timestamp
                    and record.controller is not None
                    and record.controller.kind == "ReplicaSet"
                    and record.controller.name
                }
            )

    def _replica_set(self, request: ApiGet, response: ApiResponse) -> None:
        if response.status == 404:
            return  # The ReplicaSet is gone: its pods have no owner we can prove.
        if not 200 <= response.status < 300:
            raise api_error(request, response)
        replica_set = REPLICA_SETS.parse(load_json_object(response.body, REPLICA_SETS.kind))
        if replica_set.name:
            self._replica_sets[replica_set.name] = replica_set

    def _advance(self) -> None:
        if self._listing:
            self._current = self._paging.request()
        elif self._pending_replica_sets:
            name = self._pending_replica_sets.pop(0)
            self._current = ApiGet(path=REPLICA_SETS.object_path(self._namespace, name))
        else:
            self._current = None
            self._result = resolve_pod_owners(self._records, self._replica_sets)

    def result(self) -> tuple[Pod, ...]:
        if self._result is None:
            raise ExecError(ExecErrorCode.FAILED, "the API plan has not finished")
        return self._result

    @property
    def replica_sets(self) -> Mapping[str, ReplicaSet]:
        """The ReplicaSets read so far, by name."""
        return self._replica_sets


def exec_upgrade_error(status: int, body: bytes, offered: tuple[str, ...]) -> ExecError:
    """The error for an exec upgrade the server refused with HTTP ``status``.

    A ``403`` with an empty body is the subprotocol mismatch (an RBAC 403 has a Status body); when
    only v5 was offered that means the server cannot close stdin, which ``execute(stdin=...)``
    needs. A ``403`` whose Status says ``Forbidden`` is the server's authorization refusing the
    requester (RBAC: a WebSocket exec needs ``get``, and since 1.35 ``create`` too, on
    ``pods/exec``): ``EXEC_TARGET_FORBIDDEN``, as the pre-flight reports the same denial, quoting
    the server's message (it names the user and the verb). Anything else is ``EXEC_FAILED``
    quoting the Status message, as for the REST reads. Every one of them carries ``http_status``
    (and, with a Status body, its ``reason`` and ``code``).
    """
    if status == 403 and not body.strip():
        if offered == ("v5.channel.k8s.io",):
            return ExecError(
                ExecErrorCode.INVALID,
                "Sending stdin to execute needs the v5.channel.k8s.io subprotocol (Kubernetes "
                "1.30+), which this server does not offer: older protocols cannot signal end of "
                "input",
                http_status=status,
            )
        return ExecError(
            ExecErrorCode.FAILED,
            f"The server supports none of the offered exec subprotocols: {', '.join(offered)}",
            http_status=status,
        )
    failure = http_failure("The exec upgrade", ApiResponse(status=status, body=body))
    if status == 403 and failure.status_reason == "Forbidden":
        message = failure.message
        if message.rstrip().endswith("forbidden:"):
            # The authorization filter's denial names user and verb ("User ... cannot get
            # resource ..."); the exec handler's own `create` check of 1.35+ names nothing
            # (observed on 1.37: 'pods "x" is forbidden: '), so say what it means.
            message = (
                f"{message.rstrip(': ')} (the server gave no reason: Kubernetes 1.35 and later "
                "refuse a WebSocket exec this way when the user may 'get' pods/exec but not "
                "'create' it, which they also require)"
            )
        return ExecError(
            ExecErrorCode.TARGET_FORBIDDEN,
            message,
            http_status=status,
            status_reason=failure.status_reason,
            status_code=failure.status_code,
        )
    return failure
