"""What the platform's authorization callable is given, and how it refuses."""

from __future__ import annotations

import hmac
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from kuber_exec_core import Impersonation, Workspace

__all__ = [
    "BEARER_PREFIX",
    "Authorize",
    "TerminalGrant",
    "TerminalRefused",
    "TerminalRequest",
    "bearer_from_authorization",
    "call_authorize",
    "token_authorizer",
]

#: A browser cannot set headers on a WebSocket; it can offer subprotocols. The page offers its
#: token as the subprotocol ``bearer.<token>`` (as Kubernetes does for its own exec), never in a
#: URL, so that it never reaches an access log.
BEARER_PREFIX = "bearer."


class TerminalRefused(Exception):
    """Raised by an authorization callable: the request gets no terminal; ``message`` is shown."""

    def __init__(self, message: str = "not authorized") -> None:
        super().__init__(message)
        self.message = message


@attrs.frozen(kw_only=True)
class TerminalRequest:
    """One browser's request for a terminal, as the authorization callable sees it.

    Attributes:
        scope: the ASGI scope of the WebSocket (``path``, ``root_path``, ``client``, whatever
            the platform's middleware put there, e.g. ``scope["user"]`` or ``scope["session"]``).
        headers: the handshake's headers, names lowercased (``cookie``, ``authorization``,
            ``origin``, ...).
        query: the query parameters of the WebSocket URL (the page passes its own ``?...``).
        deployment: the Deployment asked for.
        container: the container asked for, if any.
        bearer_token: the token the page offered (``#token=`` in the page's URL), or the one of
            an ``Authorization: Bearer`` header; ``None`` if neither.
        session: for a viewer joining or coming back to a shared terminal, its session id
            (``None`` for a new terminal, whose caller is its owner).
        role: with ``session``, the role asked for (``"owner"``, ``"peer"`` or
            ``"observer"``): from a verified join token, or the returning viewer's own. Refuse
            to keep a user out of a session or a role; a grant for another workspace than the
            session's is refused by the app.
    """

    scope: Mapping[str, Any] = attrs.field(repr=False)
    headers: Mapping[str, str] = attrs.field(repr=False)
    query: Mapping[str, str]
    deployment: str
    container: str | None
    bearer_token: str | None = attrs.field(repr=False)
    session: str | None = None
    role: str | None = None


@attrs.frozen
class TerminalGrant:
    """What an authorization callable may return instead of a bare ``Workspace``: the
    workspace, and the user the terminal's exec acts for (Kubernetes impersonation: the
    cluster's RBAC and audit log see that user; ``None``: the service's own identity).
    """

    workspace: Workspace
    on_behalf_of: Impersonation | None = None


#: Maps a request to the caller's workspace (a ``Workspace``, or a :class:`TerminalGrant`
#: naming the user too): return it, or ``None`` / raise :class:`TerminalRefused` to refuse. May
#: be a plain function or a coroutine function.
Authorize = Callable[
    [TerminalRequest],
    "Workspace | TerminalGrant | Awaitable[Workspace | TerminalGrant | None] | None",
]


async def call_authorize(authorize: Authorize, request: TerminalRequest) -> TerminalGrant:
    """Run ``authorize``; ``None`` or :class:`TerminalRefused` refuses (TerminalRefused), and
    anything but a ``Workspace`` or ``TerminalGrant`` is a ``TypeError``."""
    answer = authorize(request)
    if inspect.isawaitable(answer):
        answer = await answer
    if answer is None:
        raise TerminalRefused()
    if isinstance(answer, Workspace):
        return TerminalGrant(answer)
    if not isinstance(answer, TerminalGrant) or not isinstance(answer.workspace, Workspace):
        raise TypeError(f"the authorization callable returned {type(answer).__name__}")
    return answer


def token_authorizer(token: str, workspace: Workspace) -> Callable[[TerminalRequest], Workspace]:
    """An authorization callable for one workspace behind one secret token (the demo's).

    Compares in constant time; the refusal says nothing about the token.
    """
    expected = token.encode("utf-8")

    def authorize(request: TerminalRequest) -> Workspace:
        offered = (request.bearer_token or "").encode("utf-8")
        if not offered or not hmac.compare_digest(offered, expected):
            raise TerminalRefused("not authorized: open the URL with the token printed at start")
        return workspace

    return authorize


def bearer_from_authorization(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value; ``None`` for any other
    scheme or an empty token."""
    scheme, _, value = header.partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None
