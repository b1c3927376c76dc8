"""Whom the current exec acts as: the request's :class:`~kuber_exec_core.Impersonation`, carried
to the backend's HTTP requests through a context variable.

``ExecService`` sets it (:func:`acting_as`) for the whole of an ``execute`` call or interactive
session, so every request the backend makes for it (REST reads, the access review, the exec
upgrade) carries the impersonation headers without the ``Backend`` protocol changing. Tasks
started inside inherit it (anyio copies the context); the backend's own work started elsewhere
(the watch cache's streams, the Lease slots) does not, and runs as the service.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from kuber_exec_core import Impersonation

__all__ = ["acting_as", "current_impersonation", "impersonation_headers"]

_current: ContextVar[Impersonation | None] = ContextVar("kuber_exec_impersonation", default=None)


def current_impersonation() -> Impersonation | None:
    """The impersonation of the exec running in this context (``None``: the service itself)."""
    return _current.get()


def impersonation_headers() -> list[tuple[str, str]]:
    """The headers for :func:`current_impersonation` (none without one)."""
    identity = _current.get()
    return [] if identity is None else identity.headers()


@contextlib.contextmanager
def acting_as(identity: Impersonation | None) -> Iterator[None]:
    """Act as ``identity`` in this context for the block (``None``: as the service)."""
    token = _current.set(identity if isinstance(identity, Impersonation) else None)
    try:
        yield
    finally:
        _current.reset(token)
