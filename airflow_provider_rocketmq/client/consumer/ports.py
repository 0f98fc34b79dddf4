"""The narrow interfaces the consumer's services are built with (`core.ConsumerCore` wires them).

No service holds the core or a sibling: each gets, at construction, exactly the
views and hooks below. Imports point one way only - `core` imports the
services, the services import this module, `process_queue` and leaf modules -
so `client/consumer` has no import cycle (tests/test_structure.py).

    pull        -> submit / settle callables of the consume service,
                   PullOffsets, StartOffset, ForgetQueue, StopOffsets, FlowLimits
    consume     -> OffsetSink, SendBackFn, LockFn (orderly), the owned-queue view
    rebalance   -> QueueControl (pull), QueueRelease (consume), RebalanceOffsets
    handlers    -> BrokerRequests (answered by the core)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from ..protocol.message import MessageExt
from ..protocol.queue import MessageQueue
from .offset_store import DeniedHook as DeniedHook
from .offset_store import ReadOffsetType
from .process_queue import ProcessQueue

OwnedQueues = Mapping[MessageQueue, ProcessQueue]  # a read-only view of the rebalancer's table


class OffsetSink(Protocol):
    """Where consumption reports progress (the offset store's in-memory table)."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None: ...


class PullOffsets(OffsetSink, Protocol):
    """What the pull loop writes: tag-filter corrections and illegal-offset repair (pulls carry no offset)."""

    async def persist(self, mq: MessageQueue) -> None: ...


class RebalanceOffsets(Protocol):
    """The offset store as the rebalancer uses it (start offsets, release, reset)."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None: ...

    def memory_offset(self, mq: MessageQueue) -> int: ...

    async def read_offset(self, mq: MessageQueue, how: ReadOffsetType) -> int: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...

    async def persist_sync(self, mq: MessageQueue) -> None: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...


class QueueControl(Protocol):
    """The pull service as the rebalancer sees it."""

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None: ...

    def stop_queue(self, mq: MessageQueue) -> None: ...


class QueueRelease(Protocol):
    """The consume service as the rebalancer sees it when a queue leaves this member."""

    async def wait_queue_idle(self, mq: MessageQueue, timeout: float) -> bool:
        """True once no listener runs on ``mq`` (False after ``timeout``)."""
        ...

    def when_queue_idle(self, mq: MessageQueue, callback: Callable[[], Awaitable[None]]) -> None:
        """Run ``callback`` once no listener runs on ``mq``."""
        ...


SendBackFn = Callable[[MessageExt, int, "MessageQueue | None"], Awaitable[bool]]
LockFn = Callable[[MessageQueue], Awaitable[bool]]
StartOffset = Callable[[MessageQueue], Awaitable[int]]
ForgetQueue = Callable[[MessageQueue, ProcessQueue], None]


class StopOffsets:
    """Per-queue stop offsets (pulls stop before them) and a signal when they change."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self._changed: asyncio.Future[None] | None = None

    def get(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def update(self, offsets: Mapping[MessageQueue, int]) -> None:
        self.table.update(offsets)
        fut, self._changed = self._changed, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def wait_changed(self, timeout: float = 1.0) -> None:
        """Until `update` is called, at most ``timeout`` seconds."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._changed), timeout)


class FlowLimits:
    """Per-queue cache limits; the core divides topic-wide limits by the owned queues."""

    __slots__ = ("bytes", "count")

    def __init__(self, count: int, size_mib: int) -> None:
        self.count = count
        self.bytes = size_mib * 1024 * 1024


class BrokerRequests(Protocol):
    """What the handlers of broker-initiated requests ask of the consumer."""

    def owns_group(self, group: str | None) -> bool: ...

    def wake_rebalance(self) -> None: ...

    async def reset_offsets(self, topic: str, table: dict[MessageQueue, int]) -> None: ...

    def running_info(self) -> dict[str, Any]: ...

    async def consume_directly(self, body: bytes, broker_name: str) -> dict[str, Any]: ...

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]: ...
