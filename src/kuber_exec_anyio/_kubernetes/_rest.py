"""REST calls over httpx (which runs on trio and asyncio alike): the core's API plans, and the
JSON writes of the platform features (access reviews, Leases).

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
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import anyio
import anyio.abc
import httpx

from kuber_exec_core import Deployment, ExecError, ExecErrorCode, LabelSelector, Pod
from kuber_exec_core.kube import ApiGet, ApiPlan, ApiResponse, DeploymentLookup, PodListing
from kuber_exec_core.transport import describe_error

from .._groups import single_exception
from .._identity import impersonation_headers
from ._config import ClusterConfig

__all__ = ["MAX_CONCURRENT_REQUESTS", "RestClient", "Streamed", "open_http_client"]

T = TypeVar("T")

#: REST requests in flight at once per backend, and the HTTP connections kept for them. More
#: callers wait their turn in a FIFO queue, without a deadline: httpx's own pool would fail them
#: with ``PoolTimeout``, and its scheduling costs more per waiting request the more there are.
#: Four: httpcore checks every pooled connection on every request, so CPU per request grows with
#: the pool (on asyncio, 32 connections cost ~1.7x the CPU per resolution of one); with four it
#: stays flat from 1 to 1,000 callers, and a burst is no slower on loopback. client-go's own
#: default is 5 requests per second. Raise it for a distant API server.
MAX_CONCURRENT_REQUESTS = 4


def open_http_client(
    config: ClusterConfig, *, timeout: httpx.Timeout | float, keepalive_connections: int | None
) -> httpx.AsyncClient:
    """The httpx client for ``config``'s API server; the caller closes it.

    The one place the library's HTTP clients are configured (the backend's REST reads and the
    watch cache's streams): ``config``'s server and TLS context (verified by default; the
    kubeconfig's CA and client certificate), JSON, no redirects, and nothing from the environment
    (``trust_env=False``: no proxy variables, no ``.netrc``, no ``SSL_CERT_FILE``; the kubeconfig
    alone says how to reach the server, as for the exec WebSocket). It never limits how many
    connections are open (long-lived requests such as watches must not starve the reads); it
    keeps ``keepalive_connections`` of them idle for reuse (``None``: all). A request cancelled
    during its TLS handshake closes its socket (:mod:`._http_network`; httpcore alone leaves it
    to the garbage collector).
    """
    # Imported here, as httpx imports httpcore: httpcore imports trio whenever it is installed,
    # and an asyncio application (the browser terminal) must not load trio by importing us.
    from ._http_network import install_cancel_safe_tls

    transport = httpx.AsyncHTTPTransport(
        verify=config.ssl_context if config.ssl_context is not None else True,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=keepalive_connections),
        trust_env=False,
    )
    install_cancel_safe_tls(transport)
    return httpx.AsyncClient(
        base_url=config.server,
        transport=transport,
        timeout=timeout,
        headers={"Accept": "application/json"},
        follow_redirects=False,
        trust_env=False,
    )


class RestClient:
    """Performs the core's ``ApiGet`` requests with a pooled ``httpx.AsyncClient``."""

    def __init__(
        self,
        config: ClusterConfig,
        http: httpx.AsyncClient,
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
        """One GET; transport failures become ``EXEC_FAILED`` (never an httpx exception)."""
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
                    request = self._http.build_request(method, target, headers=headers)
                    if json is not None or content is not None:
                        data = json_module.dumps(json).encode() if content is None else content
                        request.headers["Content-Type"] = content_type
                        request.headers["Content-Length"] = str(len(data))
                        request.stream = _Body(data)
                    response = await self._http.send(request)
            except httpx.HTTPError as error:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Kubernetes API {method} {shown or target} failed: {describe_error(error)}",
                ) from None
            if (
                response.status_code == 401
                and attempt == 1
                and await self.refresh_after_unauthorized(generation)
            ):
                continue
            break
        return ApiResponse(status=response.status_code, body=response.content)

    @contextlib.asynccontextmanager
    async def stream(self, target: str, *, shown: str) -> AsyncIterator[Streamed]:
        """A streamed GET of ``target`` (no read timeout: a followed log or a watch may be
        quiet for long), outside the queue of ``max_concurrent_requests`` (it lasts), retried
        once after a ``401``. The body is read by a task into a buffer of one chunk (memory
        stays bounded, and a slow reader slows the connection); leaving the block cancels it
        (which closes httpx's chain of async generators, where an abandoned iteration would
        leave them to the garbage collector) and closes the connection.

        Raises:
            ExecError: ``EXEC_FAILED`` when no answer came (naming ``shown``).
        """
        identity = impersonation_headers()
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        for attempt in (1, 2):
            generation = self._config.credentials_generation
            headers = await self.auth_headers() + identity
            request = self._http.build_request("GET", target, headers=headers, timeout=timeout)
            try:
                response = await self._http.send(request, stream=True)
            except httpx.HTTPError as error:
                raise ExecError(
                    ExecErrorCode.FAILED,
                    f"Kubernetes API GET {shown} failed: {describe_error(error)}",
                ) from None
            try:
                if (
                    response.status_code == 401
                    and attempt == 1
                    and await self.refresh_after_unauthorized(generation)
                ):
                    continue
                if response.status_code != 200:
                    try:
                        body = await response.aread()
                    except httpx.HTTPError:
                        body = b""
                    yield Streamed(response.status_code, body[: Streamed.ERROR_BYTES])
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
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()


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

    async def pump(self, response: httpx.Response, shown: str) -> None:
        """The reader task: the body into the buffer until it ends (or fails)."""
        try:
            async for chunk in response.aiter_raw():
                while len(self._buffer) >= self.BUFFER_BYTES:
                    self._room = anyio.Event()
                    await self._room.wait()
                self._buffer += chunk
                if self._arrived is not None:
                    self._arrived.set()
        except httpx.HTTPError as error:
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


class _Body(httpx.AsyncByteStream):
    """A request body sent in one piece. httpx's own body stream is an async generator: when a
    connection breaks while the body is being sent, it is left unfinished and trio warns when
    the garbage collector finalizes it (a ResourceWarning in every failed write). This one's
    iterator is a plain object, with nothing to finalize."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _Once(self._data)


class _Once:
    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> _Once:
        return self

    async def __anext__(self) -> bytes:
        data, self._data = self._data, None
        if data is None:
            raise StopAsyncIteration
        return data
