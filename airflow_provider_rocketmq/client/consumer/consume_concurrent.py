"""Concurrent consumption (Java ConsumeMessageConcurrentlyService).

Hot path: a pulled batch (up to pull_batch_size messages) is handed to the
consume pool as *one* work item; the worker calls the listener on slices of
consume_message_batch_max_size and reports the whole batch back to the loop with
one ``call_soon_threadsafe``. Offsets are then advanced once per batch. Failed
messages are sent back (clustering) before they leave the process queue, so the
committed offset never passes a message that is neither consumed nor retried.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from ..protocol.message import MessageExt
from ..protocol.queue import MessageQueue
from .config import ConsumerConfig, ConsumeStatus
from .consume_pool import ConsumePool, PooledConsumeService
from .lifecycle import Background, Lifecycle
from .listener import ACK_ALL, ConsumeContext, Listener, failed_from, is_async_listener
from .ports import OffsetSink, OwnedQueues, SendBackFn
from .process_queue import InFlight, ProcessQueue
from .stats import ConsumeStatsTable

log = logging.getLogger(__name__)

RESUBMIT_DELAY = 5.0
EXPIRED_DELAY_LEVEL = 3  # Java cleanExpiredMsg sends back with delay level 3

Failure = tuple[list[MessageExt], int]  # (messages, delay level)
# what a worker reports for one batch: messages, queue, token, failures, listener seconds
Result = tuple[Sequence[MessageExt], ProcessQueue, MessageQueue, int, list[Failure], float]


class ConcurrentConsumeService(PooledConsumeService):
    """Runs a concurrent listener over pulled batches and settles offsets per batch."""

    def __init__(self, *, config: ConsumerConfig, group: str, listener: Listener, life: Lifecycle,
                 offsets: OffsetSink, send_back: SendBackFn, table: OwnedQueues,
                 stats: ConsumeStatsTable) -> None:
        self.config = config
        self.listener = listener
        self.life = life
        self.offsets = offsets
        self.send_back = send_back
        self.table = table
        self.stats = stats
        self.is_async = is_async_listener(listener)
        super().__init__(None if self.is_async else ConsumePool(config.consume_thread_min,
                                                                f"ConsumeMessageThread_{group}"),
                         Background("concurrent consume"))
        self.batch_max = config.consume_message_batch_max_size
        # Worker results, until the loop polls them (PooledConsumeService): a worker waking the loop
        # would cost a self-pipe write, a loop iteration and a GIL hand-off per burst.
        self._results: collections.deque[Result] = collections.deque()

    # -- dispatch --------------------------------------------------------------------------
    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        token, fl = pq.begin_batch(msgs)
        if not self.inflight:  # set only while nothing is in flight (_done_one)
            self._idle.clear()
        self.inflight += 1
        if self.is_async:
            self._spawn(self._run_async(msgs, pq, mq, token, fl), f"consume {mq}")
        else:
            assert self.pool is not None
            self.pool.submit(self._run_sync, msgs, pq, mq, token, fl)
            self._wake_pool()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self.bg.spawn(coro, name)

    def _run_sync(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, token: int,
                  fl: InFlight) -> None:
        """Worker thread: call the listener per slice, report the batch once."""
        failures: list[Failure] = []
        listener = self.listener
        step = self.batch_max
        success = ConsumeStatus.CONSUME_SUCCESS
        start = time.monotonic()
        ctx = ConsumeContext(mq)
        n = len(msgs)
        if step == 1 and n > 1:
            # batch size 1 (the Java default): one list per message, no slicing arithmetic
            for m in msgs:
                if pq.dropped:  # Java skips the listener for a dropped queue
                    break
                fl.current = m  # the consume-timeout clock of this call starts now
                try:
                    status = listener([m], ctx)
                except Exception:
                    log.exception("listener raised on a message of %s; it will be retried", mq)
                    status = None
                if status is success and ctx.ack_index == ACK_ALL:
                    continue
                if failed_from(status, ctx, 1) == 0:
                    failures.append(([m], ctx.delay_level_when_next_consume))
                ctx = ConsumeContext(mq)
        else:
            for i in range(0, n, step):
                if pq.dropped:  # Java skips the listener for a dropped queue
                    break
                chunk = msgs[i:i + step]
                fl.current = chunk[0]
                try:
                    status = listener(chunk, ctx)
                except Exception:
                    log.exception("listener raised on %d message(s) of %s; they will be retried", len(chunk), mq)
                    status = None
                if status is success and ctx.ack_index == ACK_ALL:
                    continue  # the common case: no per-call bookkeeping
                bad = failed_from(status, ctx, len(chunk))
                if bad < len(chunk):
                    failures.append((chunk[bad:], ctx.delay_level_when_next_consume))
                ctx = ConsumeContext(mq)  # the listener changed it: a fresh one for the next call
        self._results.append((msgs, pq, mq, token, failures, time.monotonic() - start))

    def settle_ready(self) -> None:
        """Settle what the workers finished (loop thread; also called by the pull loops)."""
        results = self._results
        while results:
            self._settle(*results.popleft())

    def _collect(self) -> bool:
        if self.pool is not None and self.pool.pending():
            self.pool.grow()  # batches still wait: one more worker if the awake ones are stuck
        if not self._results:
            return False
        self.settle_ready()
        return True

    async def _run_async(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                         token: int, fl: InFlight) -> None:
        failures: list[Failure] = []
        step = self.batch_max
        start = time.monotonic()
        for i in range(0, len(msgs), step):
            if pq.dropped:
                break
            chunk = list(msgs[i:i + step])
            ctx = ConsumeContext(mq)
            fl.current = chunk[0]
            try:
                status = await self.listener(chunk, ctx)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("listener raised on %d message(s) of %s; they will be retried", len(chunk), mq)
                status = None
            bad = failed_from(status, ctx, len(chunk))
            if bad < len(chunk):
                failures.append((chunk[bad:], ctx.delay_level_when_next_consume))
        self._settle(msgs, pq, mq, token, failures, time.monotonic() - start)

    # -- results (loop thread) -----------------------------------------------------------------
    def _settle(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue, token: int,
                failures: list[Failure], rt: float) -> None:
        pq.inflight.pop(token, None)  # ProcessQueue.end_batch, inlined: once per batch
        n = len(msgs)
        st = self.stats.topic(mq.topic)
        st.consume_rt += rt
        st.consume_calls += -(-n // self.batch_max)  # the listener calls the batch took
        if not failures:  # the common case
            st.consumed_ok += n
            if not pq.dropped:  # a dropped queue moved to another member: do not touch offsets
                offset = pq.remove_messages(msgs)
                if offset >= 0:
                    self.offsets.update_offset(mq, offset, True)
            self._done_one()
            return
        n_failed = sum(len(f[0]) for f in failures)
        st.consumed_ok += n - n_failed
        st.consumed_failed += n_failed
        if pq.dropped:
            self._done_one()
            return
        if self.config.clustering:
            failed_ids = {id(m) for f in failures for m in f[0]}
            ok = [m for m in msgs if id(m) not in failed_ids]
            self._commit(pq, mq, ok)
            self._spawn(self._send_back(failures, pq, mq), f"send back {mq}")
        else:
            for f_msgs, _ in failures:
                log.warning("broadcasting: dropping %d failed message(s) of %s (first offset %d)",
                            len(f_msgs), mq, f_msgs[0].queue_offset)
            self._commit(pq, mq, msgs)
        self._done_one()

    def _commit(self, pq: ProcessQueue, mq: MessageQueue, msgs: Sequence[MessageExt]) -> None:
        offset = pq.remove_messages(msgs)
        if offset >= 0 and not pq.dropped:
            self.offsets.update_offset(mq, offset, increase_only=True)

    async def _send_back(self, failures: list[Failure], pq: ProcessQueue, mq: MessageQueue) -> None:
        retry_later: list[MessageExt] = []
        for f_msgs, delay_level in failures:
            for m in f_msgs:
                try:
                    ok = await self.send_back(m, delay_level, mq)
                except asyncio.CancelledError:
                    raise
                except Exception:  # not a broker answer (those return False): a bug; never pin the offset
                    log.exception("sending message %s of %s back failed; it will be consumed again",
                                  m.msg_id, mq)
                    ok = False
                if ok:
                    self._commit(pq, mq, [m])
                else:
                    retry_later.append(m)
        if retry_later and not pq.dropped:
            for m in retry_later:  # Java bumps the local count before re-submitting
                m.reconsume_times += 1
            await asyncio.sleep(RESUBMIT_DELAY)
            if not pq.dropped and not self.life.closing:
                self.submit(retry_later, pq, mq)

    # -- maintenance ---------------------------------------------------------------------------
    async def clean_expired(self) -> None:
        """Send back messages whose listener call exceeded consume_timeout (Java cleanExpiredMsg)."""
        timeout = self.config.consume_timeout
        for mq, pq in list(self.table.items()):
            for m in pq.expired_messages(timeout, self.batch_max):
                log.warning("message %s of %s exceeded consume_timeout; sending it back", m.msg_id, mq)
                if await self.send_back(m, EXPIRED_DELAY_LEVEL, mq):
                    self._commit(pq, mq, [m])
