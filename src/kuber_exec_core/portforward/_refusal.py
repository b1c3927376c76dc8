"""The signal to fall back from the tunnel to the legacy channels."""

from __future__ import annotations

__all__ = ["PORT_REQUIRED_MESSAGE", "is_tunnel_refusal", "portforward_path"]

#: What a server without the tunnel (gate ``PortForwardWebsockets`` off, or before 1.30) answers
#: a port-forward upgrade that names no port: the kubelet's words, with HTTP 400.
PORT_REQUIRED_MESSAGE = 'query parameter "port" is required'


def is_tunnel_refusal(status: int, body: bytes) -> bool:
    """Whether an upgrade answered ``status`` with ``body`` means "no tunnel here"."""
    return status == 400 and PORT_REQUIRED_MESSAGE.encode() in body


def portforward_path(namespace: str, pod: str) -> str:
    """The upgrade's path (names are validated DNS labels by then: no escaping needed)."""
    return f"/api/v1/namespaces/{namespace}/pods/{pod}/portforward"
