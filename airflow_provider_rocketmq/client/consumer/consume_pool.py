"""A small worker pool tuned for handing pulled batches to consume threads, and the part of the
consume services built on it (`PooledConsumeService`: results polled by the loop, drain, close).

`concurrent.futures.ThreadPoolExecutor` creates a Future (with its own
Condition) per task and may wake a thread for every submit. Here a task is a
plain tuple appended to a deque, and each worker sleeps on its own binary lock:
waking one is a single ``lock.release()`` (one futex call), with no Condition
and no mutex on the submitting side. Only `kick()` and `grow()` wake sleepers,
so the owner decides how many batches share one wake-up; a woken worker drains
the deque before it sleeps again.

Under the GIL a second awake worker cannot run listeners any faster; it only
fights the first one (and the event loop) for the interpreter. So `kick()`
wakes a worker only when all of them sleep, and `grow()` adds one when the
awake workers took no task since the previous call - they are blocked in slow
listeners (I/O releases the GIL), which is when more threads do help, up to
``size`` (consume_thread_min: with an unbounded queue Java's pool never grows
past its core size either).

Lost wake-ups are impossible because both sides "publish, then look" under the
GIL: a worker appends its lock to ``_sleepers`` *before* its last look at the
deque, and `kick()` looks at ``_sleepers`` *after* the work was appended.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .lifecycle import Background, wait_set

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConsumePool:
    """``submit(fn, *args)`` queues ``fn(*args)`` for one of ``size`` daemon threads; no result object."""

    def __init__(self, size: int, name: str) -> None:
        self._work: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._sleepers: collections.deque[threading.Lock] = collections.deque()
        self._closed = False
        self._size = size
        self.taken = 0
        self._taken_seen = -1
        self._threads = [threading.Thread(target=self._main, name=f"{name}_{i}", daemon=True)
                         for i in range(size)]
        for t in self._threads:
            t.start()

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a task; it runs once a worker is awake (see `kick`)."""
        self._work.append((fn, args))

    def pending(self) -> int:
        return len(self._work)

    def kick(self) -> None:
        """Wake a worker if work waits and every worker sleeps (an awake one drains the deque)."""
        if self._work and len(self._sleepers) == self._size:
            self._wake()

    def grow(self) -> None:
        """Wake one more worker if work waits and the awake ones took no task since the previous call.

        With every worker asleep there is nobody to be stuck: waking is `kick`'s business.
        """
        taken = self.taken
        if self._work and taken == self._taken_seen and len(self._sleepers) < self._size:
            self._wake()
        self._taken_seen = taken

    def _wake(self) -> None:
        try:
            lock = self._sleepers.pop()  # the most recent sleeper: its thread is the warmest
        except IndexError:
            return  # every worker is awake and will reach the new work
        lock.release()

    def _main(self) -> None:
        work = self._work
        sleepers = self._sleepers
        me = threading.Lock()
        me.acquire()  # held while awake; a waker's release() lets the next acquire() through
        while not self._closed:
            try:
                fn, args = work.popleft()
                self.taken += 1  # a progress hint for grow(); a rare lost increment is harmless
            except IndexError:
                sleepers.append(me)
                if work or self._closed:  # work arrived between the pop and the append
                    try:
                        sleepers.remove(me)
                        continue
                    except ValueError:
                        pass  # a waker took us already: consume its release below
                me.acquire()
                continue
            try:
                fn(*args)
            except Exception:  # the task itself reports listener errors; this is a safety net
                log.exception("consume task failed")

    def shutdown(self) -> None:
        """Stop the workers (queued tasks are dropped; a running task finishes on its own)."""
        self._closed = True
        self._work.clear()
        while True:
            try:
                self._sleepers.popleft().release()
            except IndexError:
                return


KICK_BATCHES = 16  # wake a worker at once when this many batches wait
KICK_DELAY = 0.002  # otherwise at most this late
RESULT_POLL_MIN = 0.002  # the loop collects worker results at least this often while busy ...
RESULT_POLL_MAX = 0.02  # ... backing off to this while listeners are slow  # Java submitConsumeRequestLater


class KickScheduler:
    """When the loop wakes a pool's sleeping worker for submitted batches (loop thread only).

    Batches share wake-ups: a wake-up is a futex call, a context switch and a GIL hand-off
    that stalls the loop thread after its next syscall. `schedule` wakes at once when
    ``KICK_BATCHES`` batches wait, otherwise within ``KICK_DELAY`` (bounded latency, far
    fewer wake-ups).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, pool: ConsumePool) -> None:
        self.loop = loop
        self.pool = pool
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None

    def schedule(self) -> None:
        if self.pool.pending() >= KICK_BATCHES:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._scheduled:
                self._scheduled = True
                self.loop.call_soon(self._kick)
        elif self._timer is None and not self._scheduled:
            self._timer = self.loop.call_later(KICK_DELAY, self._kick)

    def _kick(self) -> None:
        self._scheduled = False
        self._timer = None
        self.pool.kick()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


THREAD_EXIT_WAIT = 0.5  # close(): idle workers exit within microseconds; a stuck listener is not waited for


async def wait_exited(threads: list[threading.Thread], timeout: float = THREAD_EXIT_WAIT) -> int:
    """After a pool's shutdown: wait (polling, at most ``timeout``) until its threads have exited,
    so a stopped consumer leaves no thread behind (start/stop cycles in one interpreter); returns
    how many are still running a listener."""
    deadline = time.monotonic() + timeout
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    return sum(1 for t in threads if t.is_alive())


class PooledConsumeService:
    """What the concurrent and the batch consume services share.

    Sync listeners run on a `ConsumePool` whose results wait in a deque the loop polls (the pull
    loops before each pull, and a timer while batches are in flight): the consume threads never
    wake the loop. Async listeners run on the loop (no pool). Both count the batches in flight,
    so that `drain` can wait until they are settled, and close the same way.
    """

    def __init__(self, pool: ConsumePool | None, bg: Background) -> None:
        self.loop = asyncio.get_running_loop()
        self.pool = pool
        self.bg = bg
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._kick = KickScheduler(self.loop, pool) if pool is not None else None
        self._poll_timer: asyncio.TimerHandle | None = None
        self._poll_interval = RESULT_POLL_MIN

    def _collect(self) -> bool:
        """Settle what the workers finished; whether there was anything."""
        raise NotImplementedError

    def _wake_pool(self) -> None:
        """After a submit to the pool: a worker wakes soon, and the results are polled while in flight."""
        assert self._kick is not None
        self._kick.schedule()
        if self._poll_timer is None:
            self._poll_interval = RESULT_POLL_MIN
            self._poll_timer = self.loop.call_later(RESULT_POLL_MIN, self._poll_results)

    def _poll_results(self) -> None:
        self._poll_timer = None
        if self._collect():
            self._poll_interval = RESULT_POLL_MIN
        else:  # a slow listener (or a writer pushing back): poll less often, up to RESULT_POLL_MAX
            self._poll_interval = min(self._poll_interval * 2, RESULT_POLL_MAX)
        if self.inflight > 0:
            self._poll_timer = self.loop.call_later(self._poll_interval, self._poll_results)

    def _done_one(self) -> None:
        self.inflight -= 1
        if self.inflight <= 0:
            self.inflight = 0
            self._idle.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until in-flight batches are settled (or the timeout passes)."""
        return await wait_set(self._idle, timeout)

    async def close(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        if self._kick is not None:
            self._kick.cancel()
        await self.bg.cancel_all()
        if self.pool is not None:
            self.pool.shutdown()
            await wait_exited(self.pool.threads)


class DaemonExecutor(concurrent.futures.Executor):
    """A fixed set of daemon threads behind the `Executor` API (for ``loop.run_in_executor``).

    `ThreadPoolExecutor`'s threads are joined when the interpreter exits, so a listener stuck
    past shutdown would keep the process alive; these are daemons, and `shutdown` never waits.
    """

    def __init__(self, size: int, name: str) -> None:
        self._work: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]
                                      | None] = queue.SimpleQueue()
        self._closed = False
        self._threads = [threading.Thread(target=self._main, name=f"{name}_{i}", daemon=True) for i in range(size)]
        for t in self._threads:
            t.start()

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        if self._closed:
            raise RuntimeError("cannot schedule new work after shutdown")
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        call = (lambda: fn(*args, **kwargs)) if kwargs else fn
        self._work.put((fut, call, () if kwargs else args))
        return fut

    def _main(self) -> None:
        work = self._work
        while True:
            item = work.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:
                fut.set_exception(exc)

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = True) -> None:
        """Stop taking work; queued calls are cancelled; running ones finish on their own."""
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._work.put(None)
