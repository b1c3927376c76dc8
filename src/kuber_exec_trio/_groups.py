"""Keep trio's strict exception groups out of the public API.

Since trio 0.25 an exception raised in a nursery's body comes out wrapped in an exception group.
kuber-exec's context managers own nurseries around the caller's code; callers should see
``ExecError`` (or ``Cancelled``) itself, not a group of one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["single_exception"]


def _flatten(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exception in group.exceptions:
        if isinstance(exception, BaseExceptionGroup):
            leaves.extend(_flatten(exception))
        else:
            leaves.append(exception)
    return leaves


@contextmanager
def single_exception() -> Iterator[None]:
    """Re-raise a group holding exactly one exception as that exception; others unchanged."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _flatten(group)
        if len(leaves) == 1:
            leaf = leaves[0]
            raise leaf from leaf.__cause__
        raise
