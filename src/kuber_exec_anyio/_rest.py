"""REST reads for the core's API plans, over httpx (which runs on trio and asyncio alike)."""

from __future__ import annotations

from typing import TypeVar

import anyio
import httpx

from kuber_exec_core import ExecError, ExecErrorCode
from kuber_exec_core.kube import ApiGet, ApiPlan, ApiResponse

from ._config import ClusterConfig
from ._transport import describe_error

__all__ = ["RestClient"]

T = TypeVar("T")


class RestClient:
    """Performs the core's ``ApiGet`` requests with a pooled ``httpx.AsyncClient``."""

    def __init__(self, config: ClusterConfig, http: httpx.AsyncClient) -> None:
        self._config = config
        self._http = http

    @classmethod
    def open_http_client(cls, config: ClusterConfig, *, timeout: float) -> httpx.AsyncClient:
        """A pooled client for ``config`` (TLS verified by default); the caller closes it."""
        return httpx.AsyncClient(
            base_url=config.server,
            verify=config.ssl_context if config.ssl_context is not None else True,
            timeout=timeout,
            headers={"Accept": "application/json"},
            follow_redirects=False,
            trust_env=False,
        )

    async def auth_headers(self) -> list[tuple[str, str]]:
        """Fresh auth headers, computed in a worker thread (a refresh may run a plugin)."""
        return await anyio.to_thread.run_sync(self._config.auth_headers)

    async def run(self, plan: ApiPlan[T]) -> T:
        """Perform ``plan``'s requests in order and return its result."""
        while (request := plan.next_event()) is not None:
            plan.response_received(await self.get(request))
        return plan.result()

    async def get(self, request: ApiGet) -> ApiResponse:
        """One GET; transport failures become ``EXEC_FAILED`` (never an httpx exception)."""
        headers = await self.auth_headers()
        try:
            response = await self._http.get(request.target, headers=headers)
        except httpx.HTTPError as error:
            raise ExecError(
                ExecErrorCode.FAILED,
                f"Kubernetes API GET {request.path} failed: {describe_error(error)}",
            ) from None
        return ApiResponse(status=response.status_code, body=response.content)
