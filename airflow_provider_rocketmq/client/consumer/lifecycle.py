"""The consumer's life cycle (an Enum with checked transitions) and its tracked background tasks.

Every service reads the one `Lifecycle` it is given (``closing``, ``paused``)
instead of its owner's attributes. Every task a service starts goes through a
`Background`: a task that dies of an exception is logged at once with its
traceback, counted (``stats()["background_errors"]``) and handed to the
service's ``on_crash`` hook, which recovers (a pull loop is restarted) or makes
the failure visible; shutdown cancels and awaits whatever is still running.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..protocol.errors import ClientStateError

log = logging.getLogger(__name__)


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; whether it was set."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return False


class ConsumerState(enum.Enum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SHUTDOWN = "SHUTDOWN"


_NEXT: dict[ConsumerState, frozenset[ConsumerState]] = {
    ConsumerState.CREATED: frozenset({ConsumerState.STARTING, ConsumerState.SHUTDOWN}),
    ConsumerState.STARTING: frozenset({ConsumerState.RUNNING, ConsumerState.STOPPING}),
    ConsumerState.RUNNING: frozenset({ConsumerState.STOPPING}),
    ConsumerState.STOPPING: frozenset({ConsumerState.SHUTDOWN}),
    ConsumerState.SHUTDOWN: frozenset(),
}


class Lifecycle:
    """State of one consumer plus the two flags every loop checks (plain attributes: hot path)."""

    __slots__ = ("closing", "failed", "paused", "state")

    def __init__(self) -> None:
        self.state = ConsumerState.CREATED
        self.closing = False  # STOPPING or SHUTDOWN: no new pull, lock or consume work starts
        self.paused = False  # suspend(): pulls wait, rebalancing stops
        self.failed = False  # a terminal failure (an ACL refusal): no new pull or rebalance; resume() keeps it

    def advance(self, to: ConsumerState) -> None:
        if to not in _NEXT[self.state]:
            raise ClientStateError(f"consumer is {self.state.value}; it cannot become {to.value}")
        self.state = to
        if to in (ConsumerState.STOPPING, ConsumerState.SHUTDOWN):
            self.closing = True


CrashHook = Callable[[BaseException], None]


class Background:
    """The tasks of one service: each one tracked until it ends, none of them failing unseen."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.tasks: set[asyncio.Task[Any]] = set()
        self.errors = 0
        self.last_error: BaseException | None = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, on_crash: CrashHook | None = None) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            if t.cancelled():
                return
            exc = t.exception()
            if exc is None:
                return
            self.errors += 1
            self.last_error = exc
            log.error("%s: background task %r crashed", self.owner, t.get_name(), exc_info=exc)
            if on_crash is not None:
                try:
                    on_crash(exc)
                except Exception:  # a recovery hook must not hide the original failure
                    log.exception("%s: recovering from the crash of %r failed", self.owner, t.get_name())

        task.add_done_callback(done)
        return task

    async def cancel_all(self, timeout: float = 5.0) -> None:
        """Cancel every task and wait (bounded) for them to end."""
        tasks = list(self.tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                log.debug("%s: %d task(s) still finishing after cancel", self.owner, len(pending))
