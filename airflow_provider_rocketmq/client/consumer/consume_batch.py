"""Batch listeners: ``fn(batch, ctx)`` once per pulled batch.

Every batch goes through one FIFO: a sync ``fn`` runs on one dedicated consume
thread, an ``async def fn`` on one task of the event loop. So batches of one
queue reach ``fn`` in offset order and never concurrently; a slow ``fn`` is
back-pressure (the cache fills up and the pull loops stop on flow control).
As for message listeners, batches share the consume thread's wake-ups (`KickScheduler`)
and the thread never wakes the loop: its results are collected by the pull loops and by a
timer while batches are in flight.

``CONSUME_SUCCESS`` with the default ``ack_index`` settles the whole batch: the
offset moves past ``last_offset``. Otherwise the messages from ``ack_index + 1``
on (all of them for RECONSUME_LATER or an exception) are materialised with
``batch.messages()`` and take the failure path of a message listener: sent back
to the retry topic (clustering; the offset stays before a message until the
broker has it, and a failed send-back is retried every few seconds, never
handed to ``fn`` again because a decoder's batch type cannot be rebuilt from
messages) or dropped with a warning (broadcasting).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

from ..protocol.batch import PulledBatch
from ..protocol.message import MessageExt
from ..protocol.queue import MessageQueue
from .config import ConsumerConfig
from .consume_pool import ConsumePool, PooledConsumeService
from .lifecycle import Background, Lifecycle
from .listener import ConsumeContext, failed_from, is_async_listener
from .ports import OffsetSink, SendBackFn
from .process_queue import ProcessQueue
from .stats import ConsumeStatsTable

log = logging.getLogger(__name__)

SEND_BACK_RETRY = 5.0  # a failed send-back is tried again after this long (Java re-consumes after 5 s)

BatchListener = Callable[[Any, ConsumeContext], Any]
# (batch, queue, process queue, status, ack_index, delay level, listener seconds)
_Result = tuple[PulledBatch, ProcessQueue, MessageQueue, Any, int, int, float]


class BatchConsumeService(PooledConsumeService):
    """Runs a batch listener over pulled batches and settles offsets per batch."""

    def __init__(self, *, config: ConsumerConfig, group: str, listener: BatchListener, life: Lifecycle,
                 offsets: OffsetSink, send_back: SendBackFn, stats: ConsumeStatsTable) -> None:
        self.is_async = is_async_listener(listener)
        super().__init__(None if self.is_async else ConsumePool(1, f"ConsumeBatchThread_{group}"),
                         Background("batch consume"))
        self.config = config
        self.listener = listener
        self.life = life
        self.offsets = offsets
        self.send_back = send_back
        self.stats = stats
        # the consume thread's results, until the loop polls them (PooledConsumeService)
        self._results: collections.deque[_Result] = collections.deque()
        self._queue: collections.deque[tuple[PulledBatch, ProcessQueue, MessageQueue]] = collections.deque()
        self._wake = asyncio.Event()
        if self.is_async:
            self.bg.spawn(self._async_worker(), "batch listener")

    # -- dispatch --------------------------------------------------------------------------
    def submit_batch(self, batch: PulledBatch, pq: ProcessQueue, mq: MessageQueue) -> None:
        self.inflight += 1
        self._idle.clear()
        if self.pool is not None:
            self.pool.submit(self._run_sync, batch, pq, mq)
            self._wake_pool()
        else:
            self._queue.append((batch, pq, mq))
            self._wake.set()

    def _run_sync(self, batch: PulledBatch, pq: ProcessQueue, mq: MessageQueue) -> None:
        """The consume thread: one call of the listener, its result back to the loop."""
        ctx = ConsumeContext(mq)
        start = time.monotonic()
        status: Any = None
        if not pq.dropped:  # Java skips the listener for a dropped queue
            try:
                status = self.listener(batch, ctx)
            except Exception:
                log.exception("batch listener raised on %d message(s) of %s; they will be retried",
                              batch.count, mq)
        self._results.append((batch, pq, mq, status, ctx.ack_index, ctx.delay_level_when_next_consume,
                              time.monotonic() - start))

    async def _async_worker(self) -> None:
        queue = self._queue
        while True:
            while queue:
                batch, pq, mq = queue.popleft()
                ctx = ConsumeContext(mq)
                start = time.monotonic()
                status: Any = None
                if not pq.dropped:
                    try:
                        status = await self.listener(batch, ctx)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("batch listener raised on %d message(s) of %s; they will be retried",
                                      batch.count, mq)
                self._settle(batch, pq, mq, status, ctx.ack_index, ctx.delay_level_when_next_consume,
                             time.monotonic() - start)
            self._wake.clear()
            await self._wake.wait()

    def settle_ready(self) -> None:
        """Settle what the consume thread finished (loop thread; also called by the pull loops)."""
        results = self._results
        while results:
            self._settle(*results.popleft())

    def _collect(self) -> bool:
        if not self._results:
            return False
        self.settle_ready()
        return True

    # -- results (loop thread) -----------------------------------------------------------------
    def _settle(self, batch: PulledBatch, pq: ProcessQueue, mq: MessageQueue, status: Any, ack_index: int,
                delay_level: int, rt: float) -> None:
        n = batch.count
        st = self.stats.topic(mq.topic)
        st.consume_rt += rt
        st.consume_calls += 1
        ctx = ConsumeContext(mq)
        ctx.ack_index = ack_index
        ok_n = failed_from(status, ctx, n)
        if ok_n >= n:  # the common case: the whole batch
            st.consumed_ok += n
            if not pq.dropped:  # a dropped queue moved to another member: do not touch offsets
                offset = pq.remove_batch(batch)
                if offset >= 0:
                    self.offsets.update_offset(mq, offset, increase_only=True)
            self._done_one()
            return
        st.consumed_ok += ok_n
        st.consumed_failed += n - ok_n
        if pq.dropped:
            self._done_one()
            return
        msgs = pq.expand_batch(batch)
        if self.config.clustering:
            self._commit(pq, mq, msgs[:ok_n])
            self.bg.spawn(self._send_back(msgs[ok_n:], delay_level, pq, mq), f"send back {mq}")
        else:
            log.warning("broadcasting: dropping %d failed message(s) of %s (first offset %d)",
                        n - ok_n, mq, msgs[ok_n].queue_offset)
            self._commit(pq, mq, msgs)
        self._done_one()

    def _commit(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        if not msgs:
            return
        offset = pq.remove_messages(msgs)
        if offset >= 0 and not pq.dropped:
            self.offsets.update_offset(mq, offset, increase_only=True)

    async def _send_back(self, msgs: list[MessageExt], delay_level: int, pq: ProcessQueue,
                         mq: MessageQueue) -> None:
        """Until the broker has every failed message (or the queue left this member)."""
        pending = msgs
        while pending and not pq.dropped and not self.life.closing:
            left: list[MessageExt] = []
            for m in pending:
                try:
                    ok = await self.send_back(m, delay_level, mq)
                except asyncio.CancelledError:
                    raise
                except Exception:  # not a broker answer (those return False): a bug; keep trying
                    log.exception("sending message %s of %s back failed", m.msg_id, mq)
                    ok = False
                if ok:
                    self._commit(pq, mq, [m])
                else:
                    left.append(m)
            pending = left
            if pending:
                log.warning("%d failed message(s) of %s could not be sent back; trying again in %.0fs "
                            "(the offset stays before them)", len(pending), mq, SEND_BACK_RETRY)
                await asyncio.sleep(SEND_BACK_RETRY)
