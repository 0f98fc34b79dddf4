"""Client-side rebalancing (Java RebalanceImpl / RebalancePushImpl).

For every subscribed topic: list the queues (route) and the group's members
(GET_CONSUMER_LIST_BY_GROUP), sort both, allocate with the configured strategy,
then reconcile the process-queue table: dropped queues persist their offset and
(orderly) unlock before release; new queues (orderly: once locked) get their
start offset by the consume-from-where rules of REFERENCE 2.12 and a pull loop.

The rebalancer is the only writer of the table; the other services get it as a
read-only `OwnedQueues` view.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..mqclient import MQClient
from ..protocol.errors import AclDeniedError, RocketMQError
from ..protocol.names import RETRY_PREFIX
from ..protocol.queue import MessageQueue
from .allocate import AllocateStrategy
from .config import ConsumerConfig
from .lifecycle import Lifecycle, wait_set
from .locks import LOCK_TIMEOUT, QueueLocks
from .ports import DeniedHook, QueueControl, QueueRelease, RebalanceOffsets, StartOffset
from .process_queue import ProcessQueue
from .subscription import SubscriptionData

log = logging.getLogger(__name__)

RESET_WAIT = 10.0  # Java resetOffset waits for in-flight pulls/consumption to settle

AssignmentCallback = Callable[[str, "frozenset[MessageQueue]", "frozenset[MessageQueue]"], Any]
QueuesChanged = Callable[[str, "frozenset[MessageQueue]", "frozenset[MessageQueue]"], Awaitable[None]]


class Rebalancer:
    """Owns the process-queue table of one consumer and keeps it in line with the group."""

    def __init__(self, *, config: ConsumerConfig, client: MQClient, group: str, client_id: str,
                 strategy: AllocateStrategy, subscriptions: Mapping[str, SubscriptionData], life: Lifecycle,
                 table: dict[MessageQueue, ProcessQueue], offsets: RebalanceOffsets, start_offset: StartOffset,
                 pull: QueueControl, release: QueueRelease | None, locks: QueueLocks | None,
                 on_changed: QueuesChanged, on_denied: DeniedHook, adjust_limits: Callable[[int], None],
                 callbacks: list[AssignmentCallback]) -> None:
        self.config = config
        self.client = client
        self.group = group  # as the user named it (the client adds the namespace)
        self.client_id = client_id
        self.strategy = strategy
        self.subscriptions = subscriptions
        self.life = life
        self.table = table
        self.offsets = offsets
        self.start_offset = start_offset
        self.pull = pull
        self.release = release  # orderly: never unlock while a listener runs on the queue
        self.locks = locks  # orderly clustering only
        self.on_changed = on_changed
        self.on_denied = on_denied
        self.adjust_limits = adjust_limits
        self.callbacks = callbacks
        self.topic_queues: dict[str, list[MessageQueue]] = {}
        # orderly: released queues whose unlock waits for a listener call still running on them
        self.releasing: dict[MessageQueue, ProcessQueue] = {}
        self._reported: set[str] = set()
        self._lock = asyncio.Lock()  # one rebalance at a time
        self._wakeup = asyncio.Event()
        self._absent_since: dict[str, float] = {}  # broker name -> first rebalance that missed it

    # -- driving -----------------------------------------------------------------------
    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        """Rebalance every rebalance_interval and whenever woken, until the consumer closes."""
        # `while not closing`, not `while True`: Python 3.11's asyncio.wait_for (used by RPCs) can
        # swallow a cancellation that races with a completed result; shutdown must still end it
        while not self.life.closing:
            await wait_set(self._wakeup, self.config.rebalance_interval)
            self._wakeup.clear()
            if self.life.paused or self.life.failed:
                continue
            try:
                await self.do_rebalance()
            except asyncio.CancelledError:
                raise
            except AclDeniedError as exc:
                self.on_denied("rebalance", exc)
            except Exception:
                log.exception("rebalance failed")

    async def do_rebalance(self) -> bool:
        """Rebalance every subscribed topic; returns True if any assignment changed."""
        async with self._lock:
            changed = False
            for topic in list(self.subscriptions):
                try:
                    changed |= await self._rebalance_topic(topic)
                except AclDeniedError:
                    raise  # the caller reports it: the consumer fails
                except RocketMQError as exc:
                    log.warning("rebalance of %s for group %s failed: %s", topic, self.group, exc)
            # queues of topics no longer subscribed
            for mq in [mq for mq in self.table if mq.topic not in self.subscriptions]:
                await self._release(mq, self.table.pop(mq))
                changed = True
            return changed

    async def _queues_of(self, topic: str) -> list[MessageQueue]:
        route = await self.client.get_route(topic)
        mqs = sorted(route.subscribe_queues(self.client.ns(topic)))
        self.topic_queues[topic] = mqs
        return mqs

    async def _rebalance_topic(self, topic: str) -> bool:
        mq_all = await self._queues_of(topic)
        if self.config.clustering:
            cids = sorted(set(await self.client.consumer_ids(self.group, topic)))
            if not mq_all or not cids:
                return False
            mine = self.strategy.allocate(self.group, self.client_id, mq_all, cids)
            allocated = set(mine)
        else:
            allocated = set(mq_all)
        changed = await self._update_table(topic, allocated, {mq.broker_name for mq in mq_all})
        if changed:
            await self.on_changed(topic, frozenset(mq_all), frozenset(allocated))
        # callbacks also hear the first result of a topic, even an empty one ("you own nothing")
        if changed or topic not in self._reported:
            self._reported.add(topic)
            for cb in list(self.callbacks):
                try:
                    res = cb(topic, frozenset(mq_all), frozenset(allocated))
                    if asyncio.iscoroutine(res):
                        await res
                except Exception:  # a user callback must not break rebalancing
                    log.exception("on_assignment callback failed")
        return changed

    def _briefly_absent(self, broker: str, present: set[str]) -> bool:
        """True while ``broker`` has been missing from the topic's route for less than
        pull_max_idle_time: a restarting broker leaves the route, and its queues are in nobody's
        allocation meanwhile, so keeping them (and their in-memory offsets) is safe and lets pulls
        resume where they were instead of from the last persisted offset."""
        now = time.monotonic()
        for name in present:
            self._absent_since.pop(name, None)
        if broker in present:
            return False
        return now - self._absent_since.setdefault(broker, now) < self.config.pull_max_idle_time

    async def _update_table(self, topic: str, allocated: set[MessageQueue], present: set[str]) -> bool:
        changed = False
        cfg = self.config
        for mq, pq in list(self.table.items()):
            if mq.topic != topic:
                continue
            if mq not in allocated:
                if self._briefly_absent(mq.broker_name, present):
                    continue
                changed = True
                await self._release(mq, self.table.pop(mq))
            elif pq.is_pull_expired(cfg.pull_max_idle_time) and not pq.dropped:
                log.warning("pull of %s idle for over %.0fs; dropping it", mq, cfg.pull_max_idle_time)
                changed = True
                await self._release(mq, self.table.pop(mq))
        new = sorted(allocated - set(self.table))
        if new:  # topic thresholds must be divided before the new queues' first pulls
            self.adjust_limits(len(self.table) + len(new))
        locks = self.locks
        for mq in new:
            # owned again before the old listener call ended: its delayed unlock must not fire
            self.releasing.pop(mq, None)
            if locks is not None and not await locks.lock(mq):
                log.info("queue %s is locked by another member; retrying at the next rebalance", mq)
                continue
            self.offsets.remove_offset(mq)
            offset = await self.start_offset(mq)
            if offset < 0:
                log.warning("no start offset for %s; skipping it this round", mq)
                if locks is not None:
                    await locks.unlock([mq])  # its next owner need not wait for the lock to expire
                continue
            pq = ProcessQueue()
            if locks is not None:
                pq.locked = True
            self.table[mq] = pq
            self.pull.start_queue(mq, pq, offset)
            changed = True
        return changed

    async def _release(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Stop pulling, persist the queue's offset, then (orderly) unlock it."""
        pq.drop()
        self.pull.stop_queue(mq)
        try:
            await self.offsets.persist(mq)
        except RocketMQError as exc:
            log.warning("cannot persist the offset of released %s: %s", mq, exc)
        self.offsets.remove_offset(mq)
        locks, release = self.locks, self.release
        if locks is not None and release is not None:
            # never unlock while a listener still runs on the queue: another member would start
            # consuming it concurrently (Java tries the consume lock first and unlocks later)
            if await release.wait_queue_idle(mq, LOCK_TIMEOUT):
                await locks.unlock([mq])
            else:
                pq.try_unlock_times += 1
                self.releasing[mq] = pq
                release.when_queue_idle(mq, lambda: self._unlock_released(mq, pq))
        pq.clear()

    async def _unlock_released(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """The delayed unlock of a released orderly queue, unless this member owns it again."""
        if self.releasing.get(mq) is not pq or mq in self.table:
            return
        del self.releasing[mq]
        if self.locks is not None:
            await self.locks.unlock([mq])

    def forget(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Forget a queue (OFFSET_ILLEGAL / reset) if ``pq`` still holds it: the next rebalance re-creates it."""
        if self.table.get(mq) is pq:
            del self.table[mq]
            pq.drop()
            self.pull.stop_queue(mq)

    def assigned(self) -> frozenset[MessageQueue]:
        return frozenset(mq for mq in self.table if not mq.topic.startswith(RETRY_PREFIX))

    # -- RESET_CONSUMER_CLIENT_OFFSET -------------------------------------------------------
    async def reset_offsets(self, topic: str, table: dict[MessageQueue, int], wait: float = RESET_WAIT) -> None:
        """Java MQClientInstance.resetOffset: pause, drop, wait, set + persist, forget queues, resume."""
        life = self.life
        life.paused = True
        try:
            affected = [mq for mq in self.table if mq.topic == topic and mq in table]
            dropped = []
            for mq in affected:
                pq = self.table.get(mq)
                if pq is not None:
                    pq.drop()
                    self.pull.stop_queue(mq)
                    dropped.append(pq)
            # Java sleeps 10 s so in-flight consumption settles; here: until it has, at most ``wait``
            deadline = time.monotonic() + wait
            while any(pq.inflight or pq.consuming for pq in dropped) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # settled by worker threads: nothing to await
            # only the queues this member owns (Java): the others' owners get their own request,
            # and writing theirs would overwrite progress this member knows nothing about
            remote = self.config.clustering
            for mq in affected:
                self.offsets.update_offset(mq, table[mq], increase_only=False)
                try:
                    if remote:
                        await self.offsets.persist_sync(mq)
                except RocketMQError as exc:
                    log.warning("cannot persist the reset offset of %s: %s", mq, exc)
            if not remote and affected:
                # the file holds every owned queue: writing only the reset ones would drop the
                # other topics' offsets until the next periodic persist
                try:
                    await self.offsets.persist_all(list(self.table))
                except OSError as exc:
                    log.error("cannot write the reset offsets of %s: %s", topic, exc)
            for mq in affected:
                pq = self.table.get(mq)
                if pq is not None:
                    self.forget(mq, pq)
        finally:
            life.paused = False
            self.wake()
