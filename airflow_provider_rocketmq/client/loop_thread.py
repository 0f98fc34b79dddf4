"""A private asyncio loop in a daemon thread, behind the sync facades.

The client core is asyncio; Airflow tasks and scripts are synchronous. A sync
facade owns one `LoopThread` and runs coroutines on it with `run()`, which
blocks the caller until the coroutine is done (re-raising its exception).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar

from .mqclient import with_deadline
from .protocol.errors import ClientStateError

T = TypeVar("T")

log = logging.getLogger(__name__)


class LoopThread:
    def __init__(self, name: str = "rocketmq-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        # drain callbacks scheduled by the last tasks' cleanup
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result from another thread."""
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("LoopThread.run() called from its own loop thread (would deadlock)")
        if not self._thread.is_alive():
            coro.close()
            raise ClientStateError("the client is closed (its loop thread is stopped)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Cancel what is left on the loop and join the thread. Idempotent."""
        if not self._thread.is_alive():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if not self.in_loop_thread:
            try:
                asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(10)
            except Exception as exc:
                log.debug("cancelling the loop's tasks failed: %r", exc)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        else:
            self.loop.stop()


class _Closable(Protocol):
    async def close(self) -> None: ...


A = TypeVar("A", bound=_Closable)


async def _build(make: Callable[[], A]) -> A:
    return make()


class SyncFacade(Generic[A]):
    """Base of the sync facades: an async client built and driven on a private `LoopThread`."""

    def __init__(self, thread_name: str, make: Callable[[], A]) -> None:
        self._loop = LoopThread(name=thread_name)
        try:
            # built on the loop thread so that every asyncio object belongs to that loop
            self._impl: A = self._loop.run(_build(make))
        except BaseException:
            self._loop.stop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None, what: str) -> T:
        """Run ``coro`` on the loop within ``timeout`` (RequestTimeoutError naming ``what``)."""
        if not self._loop.is_alive:
            coro.close()  # never started: close it here rather than leave an un-awaited coroutine
            raise ClientStateError(f"{type(self).__name__} is closed")
        return self._loop.run(with_deadline(coro, timeout, what))

    def close(self) -> None:
        """Close the async client, then stop the loop thread. Idempotent."""
        try:
            if self._loop.loop.is_running():
                self._loop.run(self._impl.close(), 10)
        finally:
            self._loop.stop()
