"""Helpers of the sandbox API server's tests: the demo's ready pod and an exec URL's path."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from kuber_exec_sandbox import Cluster

__all__ = ["exec_target", "ready_web_pod"]


def ready_web_pod(cluster: Cluster) -> str:
    """The name of the demo's ready ``web`` pod."""
    web = cluster.deployment("demo", "web")
    assert web is not None
    return next(p.name for p in cluster.pods_of(web) if p.ready)


def exec_target(pod: str, command: list[str], *, namespace: str = "demo", **flags: str) -> str:
    """The path and query of an exec of ``command`` in ``pod`` with the query ``flags``."""
    query = [("command", c) for c in command] + list(flags.items())
    return (
        f"/api/v1/namespaces/{namespace}/pods/{quote(pod)}/exec?{urlencode(query, quote_via=quote)}"
    )
