"""Orderly consumption (Java ConsumeMessageOrderlyService).

One consume task per queue at a time, in offset order. In clustering a queue is
consumed only while this member holds a non-expired broker lock (LOCK_BATCH_MQ,
renewed by the consumer every lock_interval). A listener answering
SUSPEND_CURRENT_QUEUE_A_MOMENT gets the same messages again after the suspend
time with a local reconsume count; past max_reconsume_times they go to the
retry/DLQ path and count as consumed. A task yields the queue after
max_time_consume_continuously so other queues get the threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from ..protocol.message import PROPERTY_RETRY_TOPIC, MessageExt
from ..protocol.names import RETRY_PREFIX
from ..protocol.queue import MessageQueue
from .config import ConsumerConfig
from .consume_pool import DaemonExecutor, wait_exited
from .lifecycle import Background, Lifecycle
from .listener import Listener, OrderlyContext, OrderlyOutcome, is_async_listener, orderly_outcome
from .ports import LockFn, OffsetSink, SendBackFn
from .process_queue import ProcessQueue
from .stats import ConsumeStatsTable

log = logging.getLogger(__name__)

RETRY_LOCK_SOON = 0.1  # Java tryLockLaterAndReconsume: 100 ms when the queue was locked before
RETRY_LOCK_LATER = 3.0
YIELD_DELAY = 0.01



def _restore_retry_topics(msgs: list[MessageExt]) -> None:
    """Messages pulled from a %RETRY% topic carry their original topic again (Java resetRetryAndNamespace)."""
    for m in msgs:
        if m.topic.startswith(RETRY_PREFIX):
            original = m.properties.get(PROPERTY_RETRY_TOPIC)
            if original:
                m.topic = original

class OrderlyConsumeService:
    """Consumes each owned queue sequentially; never two workers on one queue."""

    def __init__(self, *, config: ConsumerConfig, group: str, listener: Listener, life: Lifecycle,
                 offsets: OffsetSink, send_back: SendBackFn, max_reconsume_times: int,
                 lock: LockFn | None, stats: ConsumeStatsTable) -> None:
        self.config = config
        self.listener = listener
        self.life = life
        self.offsets = offsets
        self.send_back = send_back
        self.max_reconsume_times = max_reconsume_times
        self.lock = lock  # clustering: LOCK_BATCH_MQ of one queue
        self.stats = stats
        self.is_async = is_async_listener(listener)
        self.bg = Background("orderly consume")
        self.pool: DaemonExecutor | None = None
        if not self.is_async:  # daemons: a listener stuck past shutdown must not hold the process
            self.pool = DaemonExecutor(config.consume_thread_min, f"ConsumeMessageThread_{group}")
        self.tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._serving: dict[MessageQueue, ProcessQueue] = {}  # the process queue each task consumes
        # a queue owned again while the worker of its previous process queue still runs a listener
        # call: its worker starts when that task ends (never beside it)
        self._next: dict[MessageQueue, ProcessQueue] = {}
        # a queue waiting to be consumed again: after a yield or a refused lock (timer), or for
        # its re-lock (task); either holds the queue, so a new pull does not start a worker early
        self._timers: dict[MessageQueue, tuple[ProcessQueue, asyncio.TimerHandle]] = {}
        self._relocks: dict[MessageQueue, tuple[ProcessQueue, asyncio.Task[None]]] = {}

    def submit(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self._ensure_worker(pq, mq)

    def settle_ready(self) -> None:
        """Nothing to settle: an orderly worker commits on the loop as it goes."""

    def _ensure_worker(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if self.life.closing:
            return
        timer = self._timers.get(mq)
        if timer is not None:
            if timer[0] is pq:
                return
            timer[1].cancel()  # left over from the queue's previous (dropped) process queue
            del self._timers[mq]
        relock = self._relocks.get(mq)
        if relock is not None:
            if relock[0] is pq:
                return
            relock[1].cancel()
            del self._relocks[mq]
        task = self.tasks.get(mq)
        if task is not None and not task.done():
            if self._serving.get(mq) is not pq:
                if mq not in self._next:
                    task.add_done_callback(lambda _t: self._start_next(mq))
                self._next[mq] = pq
            return
        self._serving[mq] = pq
        self.tasks[mq] = self.bg.spawn(self._consume_queue(pq, mq), f"orderly {mq}")

    def _start_next(self, mq: MessageQueue) -> None:
        pq = self._next.pop(mq, None)
        if pq is not None and not pq.dropped:
            self._ensure_worker(pq, mq)

    def _later(self, delay: float, pq: ProcessQueue, mq: MessageQueue) -> None:
        """Start the queue's worker again after ``delay``."""
        if self.life.closing:
            return
        old = self._timers.pop(mq, None)
        if old is not None:
            old[1].cancel()
        self._timers[mq] = (pq, asyncio.get_running_loop().call_later(delay, self._timer_fired, pq, mq))

    def _timer_fired(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        timer = self._timers.get(mq)
        if timer is not None and timer[0] is pq:
            del self._timers[mq]
        self._ensure_worker(pq, mq)

    def _relock_soon(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if self.life.closing:
            return
        old = self._relocks.get(mq)
        if old is not None:
            if old[0] is pq:
                return
            old[1].cancel()  # for the queue's previous (dropped) process queue
        self._relocks[mq] = (pq, self.bg.spawn(self._relock(pq, mq), f"relock {mq}"))

    async def _relock(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """Java tryLockLaterAndReconsume: lock again shortly, then consume (or retry later)."""
        ok = False
        try:
            await asyncio.sleep(RETRY_LOCK_SOON)
            if pq.dropped or self.life.closing or self.lock is None:
                return
            ok = await self.lock(mq)
        finally:
            entry = self._relocks.get(mq)
            if entry is not None and entry[1] is asyncio.current_task():
                del self._relocks[mq]
        if ok:
            self._ensure_worker(pq, mq)
        else:
            self._later(RETRY_LOCK_LATER, pq, mq)

    async def stop_relocking(self) -> None:
        """Shutdown, before the final UNLOCK: cancel pending re-locks and delayed restarts."""
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        relocks = [t for _, t in self._relocks.values()]
        self._relocks.clear()
        for t in relocks:
            t.cancel()
        if relocks:
            await asyncio.gather(*relocks, return_exceptions=True)

    async def _call(self, msgs: list[MessageExt], ctx: OrderlyContext) -> object:
        if self.is_async:
            return await self.listener(msgs, ctx)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.listener, msgs, ctx)

    async def _consume_queue(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """Hand ``mq``'s messages to the listener, one batch at a time, while this member holds its lock
        (at most ``max_time_consume_continuously``, then it lets other queues have the thread)."""
        cfg = self.config
        life = self.life
        st = self.stats.topic(mq.topic)
        began = time.monotonic()
        pq.orderly_running = True
        try:
            while not pq.dropped and not life.closing:
                if cfg.clustering and (not pq.locked or pq.is_lock_expired(cfg.lock_max_live_time)):
                    # re-lock soon and resume; the lock renewal may also bring it back
                    self._relock_soon(pq, mq)
                    return
                if time.monotonic() - began > cfg.max_time_consume_continuously:
                    self._later(YIELD_DELAY, pq, mq)
                    return
                msgs = pq.take_messages(cfg.consume_message_batch_max_size)
                if not msgs:
                    return
                _restore_retry_topics(msgs)
                ctx = OrderlyContext(mq)
                start = time.monotonic()
                try:
                    status = await self._call(msgs, ctx)
                except Exception:
                    log.exception("orderly listener raised on %d message(s) of %s", len(msgs), mq)
                    status = None
                st.consume_rt += time.monotonic() - start
                st.consume_calls += 1
                if pq.dropped:
                    return
                outcome = orderly_outcome(status, ctx.auto_commit)
                if outcome is OrderlyOutcome.COMMIT or outcome is OrderlyOutcome.ACK:
                    st.consumed_ok += len(msgs)
                    if outcome is OrderlyOutcome.COMMIT:  # ACK (auto_commit off): consumed, offset unchanged
                        self._commit(pq, mq)
                    continue
                await self._after_failure(pq, mq, msgs, outcome, ctx)
        finally:
            pq.orderly_running = False

    async def _after_failure(self, pq: ProcessQueue, mq: MessageQueue, msgs: list[MessageExt],
                             outcome: OrderlyOutcome, ctx: OrderlyContext) -> None:
        """A batch the listener did not consume: roll back, or send it to retry/DLQ past its maximum
        reconsume times, or take it again after the queue's pause."""
        self.stats.topic(mq.topic).consumed_failed += len(msgs)
        if outcome is OrderlyOutcome.ROLLBACK:
            pq.rollback()
        elif await self._past_max(msgs):
            self._commit(pq, mq)  # sent to retry/DLQ: they count as consumed
            return
        else:
            pq.make_messages_consume_again(msgs)
        pause = ctx.suspend_current_queue_time if ctx.suspend_current_queue_time > 0 \
            else self.config.effective_suspend_time()
        await asyncio.sleep(min(30.0, max(0.01, pause)))

    def _commit(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        offset = pq.commit()
        if offset >= 0:
            self.offsets.update_offset(mq, offset, increase_only=False)

    async def _past_max(self, msgs: list[MessageExt]) -> bool:
        """Java checkReconsumeTimes: bump local counts; True if every message went to retry/DLQ."""
        max_times = self.max_reconsume_times
        suspend = False
        for m in msgs:
            if m.reconsume_times >= max_times:
                # delay level -1: straight to %DLQ% (the fallback send lets the broker decide)
                try:
                    sent = await self.send_back(m, -1, None)
                except asyncio.CancelledError:
                    raise
                except Exception:  # not a broker answer: a bug; the message stays and is retried
                    log.exception("sending message %s to the DLQ failed", m.msg_id)
                    sent = False
                if not sent:
                    suspend = True
                    m.reconsume_times += 1
            else:
                suspend = True
                m.reconsume_times += 1
        return not suspend

    async def wait_queue_idle(self, mq: MessageQueue, timeout: float) -> bool:
        """Wait for the queue's worker (a listener call cannot be interrupted)."""
        task = self.tasks.get(mq)
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)

    def when_queue_idle(self, mq: MessageQueue, callback: Callable[[], Awaitable[None]]) -> None:
        task = self.tasks.get(mq)

        async def run() -> None:
            await callback()

        if task is None or task.done():
            self.bg.spawn(run(), f"after {mq}")
        else:
            task.add_done_callback(lambda _t: self.bg.spawn(run(), f"after {mq}"))

    async def drain(self, timeout: float) -> bool:
        tasks = [t for t in self.tasks.values() if not t.done()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def close(self) -> None:
        await self.stop_relocking()
        await self.bg.cancel_all()
        self.tasks.clear()
        if self.pool is not None:
            self.pool.shutdown()
            await wait_exited(self.pool.threads)
