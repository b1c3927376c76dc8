"""A block that opens an inner block on entry and leaves it on exit: the exec path's openers.

Opening an exec passes through several layers (the retry on a stale cached target, the retry
with fresh credentials, the connection, the transport), each a context manager entered for
every exec. Written as ``@asynccontextmanager`` generators each layer cost ~12 k instructions
per exec on asyncio (a generator frame, its wrapper and two extra coroutine steps; issue 19).
:class:`DelegatingBlock` is the same thing as a class: the subclass's ``_enter`` opens the
inner block, perhaps after a refused try; leaving is the inner block's own exit. It also says
plainly what the generators needed a flag for: only an error on entry is a refusal to retry,
never the caller's errors inside the block.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

__all__ = ["DelegatingBlock"]

T = TypeVar("T")


class DelegatingBlock(Generic[T]):
    """Enter with ``_enter`` (a subclass's: the inner block, already entered, and the
    value the ``async with`` gets); exit through that inner block's ``__aexit__``. Entered
    once."""

    __slots__ = ("_inner",)

    _inner: AbstractAsyncContextManager[Any]

    async def __aenter__(self) -> T:
        self._inner, value = await self._enter()
        return value

    async def _enter(self) -> tuple[AbstractAsyncContextManager[Any], T]:
        """Open and enter the inner block; return it and the block's value."""
        raise NotImplementedError

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(error_type, error, traceback)
