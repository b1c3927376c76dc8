"""A block that opens an inner block on entry and leaves it on exit: the exec path's openers.

Opening an exec passes through several layers (the retry on a stale cached target, the retry
with fresh credentials, the connection, the transport), each a context manager entered for
every exec. As an ``@asynccontextmanager`` generator each layer would cost a generator frame,
its wrapper and two extra coroutine steps per exec (docs/benchmarks.md).
:class:`DelegatingBlock` is the same thing as a class: its ``enter`` function opens the inner
block, perhaps after a refused try; leaving is the inner block's own exit. It also says plainly
what the generators needed a flag for: only an error on entry is a refusal to retry, never the
caller's errors inside the block.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

__all__ = ["DelegatingBlock", "Entry"]

T = TypeVar("T")

#: What a :class:`DelegatingBlock` calls on entry: it opens and enters the inner block and
#: returns it with the value the ``async with`` gets.
Entry = Callable[[], Awaitable[tuple[AbstractAsyncContextManager[Any], T]]]


class DelegatingBlock(Generic[T]):
    """Enter by calling ``enter`` (see :data:`Entry`); exit through the inner block's
    ``__aexit__``. Entered once."""

    __slots__ = ("_enter", "_inner")

    _inner: AbstractAsyncContextManager[Any]

    def __init__(self, enter: Entry[T]) -> None:
        self._enter = enter

    async def __aenter__(self) -> T:
        self._inner, value = await self._enter()
        return value

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(error_type, error, traceback)
