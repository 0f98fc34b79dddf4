"""Calling the embedded servers' coroutines from any thread or loop.

The cluster runs on one event loop: the caller's (``async with``) or a private
`LoopThread` (``with``). Its control methods (stop/restart a broker, close client
connections, ...) go through `bridge`, so the same method works everywhere:

* called on the cluster's own loop: returns the coroutine (``await`` it);
* called from another running loop (an async test using the shared fixture):
  schedules it on the cluster's loop and returns an awaitable;
* called from synchronous code: runs it and returns its result.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0


def bridge(loop: asyncio.AbstractEventLoop | None, coro: Coroutine[Any, Any, T],
           timeout: float = DEFAULT_TIMEOUT) -> Any:
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop:
        if running is None:
            coro.close()
            raise RuntimeError("not started: start it with EmbeddedCluster (or await it on a running loop)")
        return coro
    fut = asyncio.run_coroutine_threadsafe(coro, loop)
    if running is None:
        return fut.result(timeout)
    return asyncio.wrap_future(fut)


def bridged(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., Any]:
    """Decorate an ``async def`` method of an object with a ``loop`` attribute."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return bridge(getattr(self, "loop", None), fn(self, *args, **kwargs))

    return wrapper
