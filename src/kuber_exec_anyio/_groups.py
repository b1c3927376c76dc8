"""Keep exception groups of one out of the public API.

An exception raised in the body of a trio nursery (trio >= 0.25) or of an asyncio ``TaskGroup``
comes out wrapped in an exception group. The adapters' context managers own such task groups
around the caller's code; callers should see ``ExecError`` (or the cancellation) itself.
Pure Python, no I/O: shared by both adapters, so it lives here.
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
