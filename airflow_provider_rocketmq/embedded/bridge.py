"""Calling the embedded servers' coroutines from any thread or loop.

The cluster runs on one event loop: the caller's (``async with``) or a private
`LoopThread` (``with``). Its control methods (stop/restart a broker, close client
connections, ...) go through `bridge`, so the same method works everywhere:

* called on the cluster's own loop: returns the coroutine (``await`` it);
* called from synchronous code: runs it on the cluster's loop and returns its result;
* called from another running loop (an async test using the shared fixture): runs it
  to completion on the cluster's loop, then returns an already-completed future, so
  ``await cluster.restart_broker(...)`` and a forgotten ``await`` both see the effect.
  Methods whose coroutine needs the *caller's* loop to make progress (a request to a
  client that runs on that loop) use ``wait=False`` and return a pending awaitable.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 60.0


def bridge(loop: asyncio.AbstractEventLoop | None, coro: Coroutine[Any, Any, T], *, wait: bool = True,
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
    if not wait:
        return asyncio.wrap_future(fut)
    # Blocking the caller's loop briefly is safe: the work runs on the other loop's thread.
    done: asyncio.Future[T] = running.create_future()
    done.set_result(fut.result(timeout))
    return done


# the bridged method returns a coroutine, a result or a future depending on the caller (see above)
Bridged = Callable[..., Any]
BridgeDecorator = Callable[[Callable[..., Coroutine[Any, Any, Any]]], Bridged]


@overload
def bridged(fn: Callable[..., Coroutine[Any, Any, Any]], *, wait: bool = True) -> Bridged: ...


@overload
def bridged(fn: None = None, *, wait: bool = True) -> BridgeDecorator: ...


def bridged(fn: Callable[..., Coroutine[Any, Any, Any]] | None = None, *,
            wait: bool = True) -> Bridged | BridgeDecorator:
    """Decorate an ``async def`` method of an object with a ``loop`` attribute."""

    def decorate(func: Callable[..., Coroutine[Any, Any, Any]]) -> Bridged:
        @functools.wraps(func)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return bridge(getattr(self, "loop", None), func(self, *args, **kwargs), wait=wait)

        return wrapper

    return decorate(fn) if fn is not None else decorate
