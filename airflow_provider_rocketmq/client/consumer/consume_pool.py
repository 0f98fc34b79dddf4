"""A small worker pool tuned for handing pulled batches to consume threads.

`concurrent.futures.ThreadPoolExecutor` creates a Future (with its own
Condition) per task and may wake a thread for every submit. Here a task is a
plain tuple appended to a deque, and each worker sleeps on its own binary lock:
waking one is a single ``lock.release()`` (one futex call), with no Condition
and no mutex on the submitting side. Only `kick()` wakes sleepers, so the owner
decides how many batches share one wake-up; a woken worker drains the deque
before it sleeps again.

Lost wake-ups are impossible because both sides "publish, then look" under the
GIL: a worker appends its lock to ``_sleepers`` *before* its last look at the
deque, and `kick()` looks at ``_sleepers`` *after* the work was appended.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ConsumePool:
    """``submit(fn, *args)`` queues ``fn(*args)`` for one of ``size`` daemon threads; no result object."""

    def __init__(self, size: int, name: str) -> None:
        self._work: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._sleepers: collections.deque[threading.Lock] = collections.deque()
        self._closed = False
        self._threads = [threading.Thread(target=self._main, name=f"{name}_{i}", daemon=True)
                         for i in range(size)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue a task; it runs once a worker is awake (see `kick`)."""
        self._work.append((fn, args))

    def pending(self) -> int:
        return len(self._work)

    def kick(self) -> None:
        """Wake one sleeping worker if there is work (deque operations are atomic under the GIL)."""
        if self._work:
            try:
                lock = self._sleepers.popleft()
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
