"""REST calls over the backend's HTTP/1.1 client (:mod:`._http`, on trio and asyncio alike): the
core's API plans, and the JSON writes of the platform features (access reviews, Leases).

Every request carries fresh credentials and, inside an exec acting for a user, that user's
impersonation headers (:mod:`kuber_exec_anyio._identity`; the Lease calls opt out: they are
the service's own).
A ``401`` answer means the credentials went stale before their expiry said so (a revoked or
rotated token): they are reloaded once (:meth:`ClusterConfig.refresh_credentials`, shared by
concurrent requests) and the request is sent once more; a second ``401`` is the answer.
"""

from __future__ import annotations

import contextlib
import json as json_module
from collections.abc import Sequence
from typing import TypeVar

import anyio

from kuber_exec_core import Deployment, ExecError, ExecErrorCode, LabelSelector, Pod
from kuber_exec_core.kube import ApiGet, ApiPlan, ApiResponse, DeploymentLookup, PodListing
from kuber_exec_core.transport import describe_error

from .._identity import impersonation_headers
from ._config import ClusterConfig
from ._http import HttpClient, HttpError

__all__ = ["MAX_CONCURRENT_REQUESTS", "USER_AGENT", "RestClient", "open_http_client"]

#: What the API server's audit log sees as the client.
USER_AGENT = "kuber-exec"

T = TypeVar("T")

#: REST requests in flight at once per backend, and the HTTP connections kept for them. More
#: callers wait their turn in a FIFO queue, without a deadline. Four: a burst is no slower on
#: loopback, and the API server sees a handful of connections per replica, not one per caller
#: (client-go's own default is 5 requests per second). Raise it for a distant API server.
MAX_CONCURRENT_REQUESTS = 4


def open_http_client(
    config: ClusterConfig,
    *,
    timeout: float,
    read_timeout: float | None = None,
    keepalive_connections: int | None,
) -> HttpClient:
    """The HTTP client for ``config``'s API server; the caller closes it (``aclose``).

    The one place the library's HTTP clients are configured (the backend's REST reads and the
    watch cache's streams): ``config``'s server and TLS context (verified by default; the
    kubeconfig's CA and client certificate), JSON, no redirects followed, and nothing from the
    environment (no proxy variables, no ``.netrc``, no ``SSL_CERT_FILE``; the kubeconfig alone
    says how to reach the server, as for the exec WebSocket). It never limits how many
    connections are open (long-lived requests such as watches must not starve the reads); it
    keeps ``keepalive_connections`` of them idle for reuse (``None``: all).
    """
    return HttpClient(
        config.server,
        config.ssl_context,
        timeout=timeout,
        read_timeout=read_timeout,
        keepalive_connections=keepalive_connections,
        headers=[("Accept", "application/json"), ("User-Agent", USER_AGENT)],
    )


class RestClient:
    """Performs the core's ``ApiGet`` requests, and JSON writes, with a pooled HTTP client."""

    def __init__(
        self,
        config: ClusterConfig,
        http: HttpClient,
        *,
        max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    ) -> None:
        self._config = config
        self._http = http
        self._slots = anyio.CapacityLimiter(max_concurrent_requests)

    async def auth_headers(self) -> list[tuple[str, str]]:
        """Fresh auth headers, computed in a worker thread (a refresh may run a plugin)."""
        if not self._config.has_credentials:
            return []  # Nothing to refresh: no thread hop.
        if not self._config.auth_headers_may_block:
            return self._config.auth_headers()  # Read from memory: no thread hop either.
        return await anyio.to_thread.run_sync(self._config.auth_headers)

    async def refresh_after_unauthorized(self, seen_generation: int) -> bool:
        """After a ``401`` to a request sent with credentials of ``seen_generation``: reload them
        (in a worker thread; once, whoever asks) and say whether to send it again."""
        return await anyio.to_thread.run_sync(self._config.refresh_credentials, seen_generation)

    async def run(self, plan: ApiPlan[T]) -> T:
        """Perform ``plan``'s requests in order and return its result."""
        while (request := plan.next_event()) is not None:
            plan.response_received(await self.get(request))
        return plan.result()

    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        """GET the Deployment (``None`` on 404)."""
        return await self.run(DeploymentLookup(namespace, name))

    async def list_pods(self, namespace: str, selector: LabelSelector) -> Sequence[Pod]:
        """LIST pods by selector, owners resolved through their ReplicaSets."""
        return await self.run(PodListing(namespace, selector))

    async def get(self, request: ApiGet) -> ApiResponse:
        """One GET; transport failures become ``EXEC_FAILED`` (never an HTTP client error)."""
        return await self.send("GET", request.target, shown=request.path)

    async def send(
        self,
        method: str,
        target: str,
        json: object = None,
        *,
        impersonate: bool = True,
        shown: str | None = None,
        queued: bool = True,
    ) -> ApiResponse:
        """One request (``json``: its body, if any), retried once after a ``401`` that fresh
        credentials may cure. ``impersonate=False`` sends it as the service even inside an exec
        acting for a user. ``queued=False`` skips the queue of ``max_concurrent_requests``
        (for a replica's heartbeat, which must not wait behind a crowd's requests). Transport
        failures become ``EXEC_FAILED`` naming ``shown`` (default: ``target``), never the query
        nor a header.
        """
        identity = impersonation_headers() if impersonate else []
        for attempt in (1, 2):
            generation = self._config.credentials_generation
            try:
                async with self._slots if queued else contextlib.nullcontext():
                    headers = await self.auth_headers() + identity
                    body = None
                    if json is not None:
                        body = json_module.dumps(json).encode()
                        headers.append(("Content-Type", "application/json"))
                    status, content = await self._http.request(
                        method, target, headers=headers, body=body
                    )
            except HttpError as error:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Kubernetes API {method} {shown or target} failed: {describe_error(error)}",
                ) from None
            if status == 401 and attempt == 1 and await self.refresh_after_unauthorized(generation):
                continue
            break
        return ApiResponse(status=status, body=content)
