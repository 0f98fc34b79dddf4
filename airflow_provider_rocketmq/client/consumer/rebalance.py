"""Client-side rebalancing (Java RebalanceImpl / RebalancePushImpl).

For every subscribed topic: list the queues (route) and the group's members
(GET_CONSUMER_LIST_BY_GROUP), sort both, allocate with the configured strategy,
then reconcile the process-queue table: dropped queues persist their offset and
(orderly) unlock before release; new queues (orderly: once locked) get their
start offset by the consume-from-where rules of REFERENCE 2.12 and a pull loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import RETRY_PREFIX
from ..errors import RocketMQError
from ..queue import MessageQueue
from ..remoting.codes import RequestCode
from ..remoting.command import RemotingCommand
from .config import ConsumeFromWhere, parse_consume_timestamp
from .offset_store import ReadOffsetType
from .process_queue import ProcessQueue

if TYPE_CHECKING:
    from .core import ConsumerCore

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 1.0  # Java: 1000 ms for LOCK/UNLOCK_BATCH_MQ

AssignmentCallback = Callable[[str, "frozenset[MessageQueue]", "frozenset[MessageQueue]"], Any]


class Rebalancer:
    """Owns the process-queue table of one consumer and keeps it in line with the group."""

    def __init__(self, core: ConsumerCore) -> None:
        self.core = core
        self.table: dict[MessageQueue, ProcessQueue] = {}
        self.topic_queues: dict[str, list[MessageQueue]] = {}
        self.callbacks: list[AssignmentCallback] = []
        self._reported: set[str] = set()
        self._lock = asyncio.Lock()  # one rebalance at a time
        # Every queue this client ever asked the broker to lock. A request may be granted while
        # its caller is cancelled or gone (shutdown, a failed start offset), so the final UNLOCK
        # covers all of them; the broker only releases locks held by this client id.
        self.lock_requested: set[MessageQueue] = set()
        self._lock_rpcs: set[asyncio.Task[set[MessageQueue] | None]] = set()

    # -- driving -----------------------------------------------------------------------
    async def do_rebalance(self) -> bool:
        """Rebalance every subscribed topic; returns True if any assignment changed."""
        async with self._lock:
            changed = False
            for topic in list(self.core.subscriptions):
                try:
                    changed |= await self._rebalance_topic(topic)
                except RocketMQError as exc:
                    log.warning("rebalance of %s for group %s failed: %s", topic, self.core.group, exc)
            # queues of topics no longer subscribed
            for mq in [mq for mq in self.table if mq.topic not in self.core.subscriptions]:
                await self._release(mq, self.table.pop(mq))
                changed = True
            return changed

    async def _queues_of(self, topic: str) -> list[MessageQueue]:
        route = await self.core.client.get_route(topic)
        mqs = sorted(route.subscribe_queues(self.core.client.ns(topic)))
        self.topic_queues[topic] = mqs
        return mqs

    async def _rebalance_topic(self, topic: str) -> bool:
        mq_all = await self._queues_of(topic)
        if self.core.config.clustering:
            cids = sorted(set(await self.core.client.consumer_ids(self.core.group, topic)))
            if not mq_all or not cids:
                return False
            mine = self.core.strategy.allocate(self.core.group, self.core.client_id, mq_all, cids)
            allocated = set(mine)
        else:
            allocated = set(mq_all)
        changed = await self._update_table(topic, allocated)
        if changed:
            await self.core.on_queues_changed(topic, frozenset(mq_all), frozenset(allocated))
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

    async def _update_table(self, topic: str, allocated: set[MessageQueue]) -> bool:
        changed = False
        core = self.core
        for mq, pq in list(self.table.items()):
            if mq.topic != topic:
                continue
            if mq not in allocated:
                changed = True
                await self._release(mq, self.table.pop(mq))
            elif pq.is_pull_expired(core.config.pull_max_idle_time) and not pq.dropped:
                log.warning("pull of %s idle for over %.0fs; dropping it", mq, core.config.pull_max_idle_time)
                changed = True
                await self._release(mq, self.table.pop(mq))
        new = sorted(allocated - set(self.table))
        if new:  # topic thresholds must be divided before the new queues' first pulls
            core.adjust_thresholds(len(self.table) + len(new))
        for mq in new:
            if core.orderly and core.config.clustering and not await self.lock(mq):
                log.info("queue %s is locked by another member; retrying at the next rebalance", mq)
                continue
            core.offset_store.remove_offset(mq)
            offset = await self.compute_pull_from_where(mq)
            if offset < 0:
                log.warning("no start offset for %s; skipping it this round", mq)
                if core.orderly and core.config.clustering:
                    await self.unlock([mq])  # its next owner need not wait for the lock to expire
                continue
            pq = ProcessQueue()
            if core.orderly and core.config.clustering:
                pq.locked = True
            self.table[mq] = pq
            core.pull.start_queue(mq, pq, offset)
            changed = True
        return changed

    async def _release(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Stop pulling, persist the queue's offset, then (orderly) unlock it."""
        pq.drop()
        core = self.core
        core.pull.stop_queue(mq)
        try:
            await core.offset_store.persist(mq)
        except RocketMQError as exc:
            log.warning("cannot persist the offset of released %s: %s", mq, exc)
        core.offset_store.remove_offset(mq)
        if core.orderly and core.config.clustering:
            # never unlock while a listener still runs on the queue: another member would start
            # consuming it concurrently (Java tries the consume lock first and unlocks later)
            consume = core.consume
            if await consume.wait_queue_idle(mq, LOCK_TIMEOUT):  # type: ignore[union-attr]
                await self.unlock([mq])
            else:
                consume.when_queue_idle(mq, lambda: self.unlock([mq]))  # type: ignore[union-attr]
        pq.clear()

    def remove_queue(self, mq: MessageQueue) -> None:
        """Forget a queue (OFFSET_ILLEGAL / reset): the next rebalance re-creates it."""
        pq = self.table.pop(mq, None)
        if pq is not None:
            pq.drop()
            self.core.pull.stop_queue(mq)

    async def release_all(self) -> None:
        for mq in list(self.table):
            await self._release(mq, self.table.pop(mq))

    # -- start offsets (REFERENCE 2.12) ---------------------------------------------------
    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        core = self.core
        last = await core.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last == -2:
            return -1
        where = core.config.consume_from_where
        is_retry = mq.topic.startswith(RETRY_PREFIX)
        try:
            if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
                if is_retry:
                    return await core.client.max_offset(mq)
                ts = parse_consume_timestamp(core.config.consume_timestamp)
                return await core.client.search_offset(mq, ts)
            # LAST_OFFSET and its deprecated aliases
            return 0 if is_retry else await core.client.max_offset(mq)
        except RocketMQError as exc:
            log.warning("cannot compute the start offset of %s: %s", mq, exc)
            return -1

    # -- orderly locks ----------------------------------------------------------------------
    def _lock_body(self, mqs: list[MessageQueue]) -> bytes:
        body = {"clientId": self.core.client_id, "consumerGroup": self.core.client.ns(self.core.group),
                "mqSet": [mq.to_json() for mq in mqs]}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    async def _lock_batch(self, broker: str, mqs: list[MessageQueue]) -> set[MessageQueue] | None:
        """LOCK_BATCH_MQ; the queues granted, or None when the broker gave no answer.

        No request leaves once the consumer is closing. The RPC runs in its own task and is
        awaited through a shield: a cancelled caller must not lose track of a request that may
        already be on the wire, and shutdown awaits these tasks before its final UNLOCK.
        """
        if self.core.closing or not mqs:
            return set()
        self.lock_requested.update(mqs)
        task = asyncio.get_running_loop().create_task(self._lock_rpc(broker, mqs), name=f"lock {broker}")
        self._lock_rpcs.add(task)
        task.add_done_callback(self._lock_rpcs.discard)
        return await asyncio.shield(task)

    async def _lock_rpc(self, broker: str, mqs: list[MessageQueue]) -> set[MessageQueue] | None:
        client = self.core.client
        try:
            addr = client.broker_addr(broker, 0, exact=True)
            resp = await client.invoke_ok(addr, RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, None, self._lock_body(mqs)), LOCK_TIMEOUT)
            data = json.loads(resp.body or b"{}")
            return {MessageQueue.from_json(o) for o in data.get("lockOKMQSet") or []}
        except (RocketMQError, ValueError) as exc:
            log.warning("LOCK_BATCH_MQ of %d queue(s) on %s failed: %s", len(mqs), broker, exc)
            return None

    async def lock(self, mq: MessageQueue) -> bool:
        granted = await self._lock_batch(mq.broker_name, [mq])
        ok = granted is not None and mq in granted
        pq = self.table.get(mq)
        if pq is not None and ok:
            pq.locked = True
            pq.last_lock_time = time.monotonic()
        return ok

    async def lock_all(self) -> None:
        """Renew the broker locks of every owned queue (Java lockAll, every 20 s)."""
        brokers = sorted({mq.broker_name for mq in self.table})
        for broker in brokers:
            # read the table per broker: a queue released meanwhile must not be locked again
            mqs = [mq for mq in self.table if mq.broker_name == broker]
            ok = await self._lock_batch(broker, mqs)
            if ok is None:
                continue
            for mq in mqs:
                pq = self.table.get(mq)
                if pq is None:
                    continue
                if mq in ok:
                    pq.locked = True
                    pq.last_lock_time = time.monotonic()
                else:
                    pq.locked = False

    async def unlock_all_final(self) -> None:
        """Shutdown: wait for lock requests still in flight, then unlock everything ever asked for.

        The caller has set ``closing`` (no new LOCK_BATCH_MQ) and stopped every task that locks.
        """
        if self._lock_rpcs:
            await asyncio.wait(list(self._lock_rpcs), timeout=2 * LOCK_TIMEOUT)
        mqs = sorted(self.lock_requested | set(self.table))
        if mqs:
            await self.unlock(mqs)

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, group in by_broker.items():
            try:
                addr = self.core.client.broker_addr(broker, 0, exact=True)
                await self.core.client.invoke_ok(addr, RemotingCommand.request(
                    RequestCode.UNLOCK_BATCH_MQ, None, self._lock_body(group)), LOCK_TIMEOUT)
            except RocketMQError as exc:
                log.warning("UNLOCK_BATCH_MQ on %s failed: %s", broker, exc)

