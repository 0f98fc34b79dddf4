"""A small worker pool tuned for handing pulled batches to consume threads.

`concurrent.futures.ThreadPoolExecutor` creates a Future (with its own
Condition) per task and may wake a thread for every submit. Here a task is a
plain tuple appended to a deque; an idle worker is woken only when none is
awake, and a busy worker keeps draining the deque before it sleeps. Under load
that removes most thread wake-ups (each one is a futex call plus a GIL hand-off).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ConsumePool:
    """``submit(fn, *args)`` runs ``fn(*args)`` on one of ``size`` daemon threads; no result object."""

    def __init__(self, size: int, name: str, on_idle: Callable[[], None] | None = None) -> None:
        self._work: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._sleeping = 0
        self._wake_pending = False
        self._closed = False
        self.on_idle = on_idle  # called by a worker before it sleeps (flush per-burst results)
        self.defer_wake: Callable[[], None] | None = None
        self._threads = [threading.Thread(target=self._main, name=f"{name}_{i}", daemon=True)
                         for i in range(size)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self._work.append((fn, args))
        if self.defer_wake is not None:
            self.defer_wake()  # the owner calls kick() once per event-loop iteration
            return
        self.kick()

    def pending(self) -> int:
        return len(self._work)

    def kick(self) -> None:
        """Wake a sleeping worker if there is work and no wake-up is already on its way."""
        if not self._work:
            return
        # A worker announces itself in _sleeping *before* its last look at the deque, so reading
        # _sleeping after the append cannot miss a sleeper; one wake-up in flight is enough because
        # the woken worker drains the deque before it sleeps again.
        if self._sleeping and not self._wake_pending:
            with self._cond:
                self._wake_pending = True
                self._cond.notify()

    def _main(self) -> None:
        work = self._work
        cond = self._cond
        while True:
            try:
                fn, args = work.popleft()
            except IndexError:
                if self.on_idle is not None:
                    try:
                        self.on_idle()
                    except Exception:
                        log.exception("consume pool idle hook failed")
                with cond:
                    if self._closed:
                        return
                    self._sleeping += 1
                    if not work:
                        cond.wait()
                        self._wake_pending = False
                    self._sleeping -= 1
                continue
            try:
                fn(*args)
            except Exception:  # the task itself reports listener errors; this is a safety net
                log.exception("consume task failed")

    def shutdown(self) -> None:
        """Stop the workers once the queue is empty (queued tasks are dropped)."""
        self._work.clear()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
