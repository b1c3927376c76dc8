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
import math
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import anyio

from kuber_exec_core import Deployment, ExecError, ExecErrorCode, LabelSelector, Pod
from kuber_exec_core.kube import ApiGet, ApiPlan, ApiResponse, DeploymentLookup, PodListing
from kuber_exec_core.transport import describe_error

from .._groups import single_exception
from .._identity import impersonation_headers
from ._config import ClusterConfig
from ._http import HttpClient, HttpError, StreamedResponse

__all__ = ["MAX_CONCURRENT_REQUESTS", "USER_AGENT", "RestClient", "Streamed", "open_http_client"]

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
        content: bytes | None = None,
        content_type: str = "application/json",
    ) -> ApiResponse:
        """One request (``json``: its body, if any), retried once after a ``401`` that fresh
        credentials may cure. ``impersonate=False`` sends it as the service even inside an exec
        acting for a user. ``queued=False`` skips the queue of ``max_concurrent_requests``
        (for a replica's heartbeat, which must not wait behind a crowd's requests). Transport
        failures become ``EXEC_FAILED`` naming ``shown`` (default: ``target``), never the query
        nor a header. ``content`` is a body already encoded, sent as ``content_type`` (a PATCH's
        patch type).
        """
        identity = impersonation_headers() if impersonate else []
        for attempt in (1, 2):
            generation = self._config.credentials_generation
            try:
                async with self._slots if queued else contextlib.nullcontext():
                    headers = await self.auth_headers() + identity
                    body = content
                    if json is not None and content is None:
                        body = json_module.dumps(json).encode()
                    if body is not None:
                        headers.append(("Content-Type", content_type))
                    status, answer = await self._http.request(
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
        return ApiResponse(status=status, body=answer)

    @contextlib.asynccontextmanager
    async def stream(self, target: str, *, shown: str) -> AsyncIterator[Streamed]:
        """A streamed GET of ``target`` (no read timeout: a followed log or a watch may be
        quiet for long), outside the queue of ``max_concurrent_requests`` (it lasts), retried
        once after a ``401``. The body is read by a task into a buffer of one chunk (memory
        stays bounded, and a slow reader slows the connection); leaving the block cancels it
        and closes the connection.

        Raises:
            ExecError: ``EXEC_FAILED`` when no answer came (naming ``shown``).
        """
        identity = impersonation_headers()
        for attempt in (1, 2):
            generation = self._config.credentials_generation
            headers = await self.auth_headers() + identity
            try:
                async with self._http.stream(
                    "GET", target, headers=headers, read_timeout=math.inf
                ) as response:
                    if (
                        response.status == 401
                        and attempt == 1
                        and await self.refresh_after_unauthorized(generation)
                    ):
                        continue
                    if response.status != 200:
                        try:
                            body = await response.aread()
                        except HttpError:
                            body = b""
                        yield Streamed(response.status, body[: Streamed.ERROR_BYTES])
                        return
                    answer = Streamed(200, b"", streaming=True)
                    with single_exception():
                        async with anyio.create_task_group() as tasks:
                            tasks.start_soon(answer.pump, response, shown)
                            try:
                                yield answer
                            finally:
                                tasks.cancel_scope.cancel()
                    return
            except HttpError as error:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Kubernetes API GET {shown} failed: {describe_error(error)}",
                ) from None


class Streamed:
    """A streamed answer (:meth:`RestClient.stream`): ``status``, ``error_body``, and for a
    200 the body as it arrives (``chunks()``).

    The reader task (:meth:`pump`) appends to a buffer of at most ``BUFFER_BYTES`` (it waits
    while it is full) and the consumer takes all that is there at once: an API server sends a
    followed log a line per HTTP chunk, and handing each one over by itself (two task switches
    per hundred bytes) made a 100 MB log cost minutes of CPU.
    """

    ERROR_BYTES = 64 * 1024
    BUFFER_BYTES = 1024 * 1024

    def __init__(self, status: int, error_body: bytes, *, streaming: bool = False) -> None:
        self.status = status
        self.error_body = error_body
        self._buffer = bytearray()
        self._ended = not streaming
        self._failure: ExecError | None = None
        # Set when data (or the end) arrives, and when room does; made anew for each wait.
        self._arrived: anyio.Event | None = None
        self._room: anyio.Event | None = None

    async def pump(self, response: StreamedResponse, shown: str) -> None:
        """The reader task: the body into the buffer until it ends (or fails)."""
        try:
            async for chunk in response.chunks():
                while len(self._buffer) >= self.BUFFER_BYTES:
                    self._room = anyio.Event()
                    await self._room.wait()
                self._buffer += chunk
                if self._arrived is not None:
                    self._arrived.set()
        except HttpError as error:
            self._failure = ExecError(
                ExecErrorCode.FAILED,
                f"Kubernetes API GET {shown} broke off: {describe_error(error)}",
            )
        finally:
            self._ended = True
            if self._arrived is not None:
                self._arrived.set()

    def chunks(self) -> Streamed:
        """The body as it comes (``EXEC_FAILED`` when the connection breaks off)."""
        return self

    def __aiter__(self) -> Streamed:
        return self

    async def __anext__(self) -> bytes:
        while not self._buffer:
            if self._ended:
                if self._failure is not None:
                    raise self._failure
                raise StopAsyncIteration
            self._arrived = anyio.Event()
            await self._arrived.wait()
        data = bytes(self._buffer)
        self._buffer.clear()
        if self._room is not None:
            self._room.set()
        return data
