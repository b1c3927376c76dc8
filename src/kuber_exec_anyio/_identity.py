"""Whom the current exec acts as: the request's :class:`~kuber_exec_core.Impersonation`, carried
to the backend's HTTP requests through a context variable.

``ExecService`` sets it (:func:`act_as`, through ``_admission``) for the whole of an ``execute``
call or interactive session, so every request the backend makes for it (REST reads, the access
review, the exec upgrade) carries the impersonation headers without the ``Backend`` protocol
changing. Tasks started inside inherit it (anyio copies the context); the backend's own work
started elsewhere (the watch cache's streams, the Lease slots) does not, and runs as the service.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from kuber_exec_core import Impersonation

__all__ = ["act_as", "current_impersonation", "impersonation_headers", "stop_acting"]

_current: ContextVar[Impersonation | None] = ContextVar("kuber_exec_impersonation", default=None)


def current_impersonation() -> Impersonation | None:
    """The impersonation of the exec running in this context (``None``: the service itself)."""
    return _current.get()


def impersonation_headers() -> list[tuple[str, str]]:
    """The headers for :func:`current_impersonation` (none without one)."""
    identity = _current.get()
    return [] if identity is None else identity.headers()


def act_as(identity: object) -> Token[Impersonation | None]:
    """Act as ``identity`` in this context from now on (``None``, or anything that is not an
    :class:`Impersonation`: as the service) until :func:`stop_acting` with the token returned."""
    return _current.set(identity if isinstance(identity, Impersonation) else None)


def stop_acting(token: Token[Impersonation | None]) -> None:
    """Act again as before the :func:`act_as` that returned ``token``."""
    _current.reset(token)
