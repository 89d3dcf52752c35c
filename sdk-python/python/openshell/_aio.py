"""Glue that turns the native module's asyncio futures into real coroutines.

The native ``AsyncClient`` returns ``run(start)``: a coroutine that creates the
Rust-backed future only once it runs inside an event loop. So every method can
be called before a loop exists (``asyncio.run(client.gateway_info())``), passed
to ``asyncio.create_task`` and cancelled like any coroutine.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")


async def run(start: Callable[[], Awaitable[T]]) -> T:
    return await start()


async def ready(value: T) -> T:
    """A coroutine that returns ``value``: ``__aenter__`` and ``__aexit__`` must be awaitable."""
    return value


async def call_progress(callback: Callable[[Any], Any], operation: Any) -> None:
    """Runs one progress callback on the loop, awaiting it if it is async."""
    result = callback(operation)
    if inspect.isawaitable(result):
        await result
