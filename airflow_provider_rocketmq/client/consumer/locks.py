"""Broker-side queue locks of an orderly clustering consumer (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

A queue is consumed only while this client holds the broker's lock on it; the
lock is renewed every ``lock_interval`` (`lock_all`) and considered lost locally
after ``lock_max_live_time``. The broker drops a lock 60 s after its last
renewal, which is why the configuration enforces
``lock_interval < lock_max_live_time < 60 s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from ..mqclient import MQClient
from ..protocol.codes import RequestCode
from ..protocol.command import RemotingCommand
from ..protocol.errors import AclDeniedError, RocketMQError
from ..protocol.queue import MessageQueue
from .lifecycle import Lifecycle
from .ports import DeniedHook, OwnedQueues

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 1.0  # Java: 1000 ms for LOCK/UNLOCK_BATCH_MQ


class QueueLocks:
    """Locks, renewals and unlocks of one consumer's queues on their master brokers."""

    def __init__(self, client: MQClient, client_id: str, group: str, table: OwnedQueues, life: Lifecycle,
                 on_denied: DeniedHook | None = None) -> None:
        self.client = client
        self.client_id = client_id
        self.group = group  # namespaced
        self.table = table
        self.life = life
        self.on_denied = on_denied  # an ACL refusal: the consumer fails
        # Every queue this client ever asked the broker to lock. A request may be granted while
        # its caller is cancelled or gone (shutdown, a failed start offset), so the final UNLOCK
        # covers all of them; the broker only releases locks held by this client id.
        self.lock_requested: set[MessageQueue] = set()
        self._lock_rpcs: set[asyncio.Task[set[MessageQueue] | None]] = set()

    def _body(self, mqs: list[MessageQueue]) -> bytes:
        body = {"clientId": self.client_id, "consumerGroup": self.group, "mqSet": [mq.to_json() for mq in mqs]}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    async def _lock_batch(self, broker: str, mqs: list[MessageQueue]) -> set[MessageQueue] | None:
        """LOCK_BATCH_MQ; the queues granted, or None when the broker gave no answer.

        No request leaves once the consumer is closing. The RPC runs in its own task and is
        awaited through a shield: a cancelled caller must not lose track of a request that may
        already be on the wire, and shutdown awaits these tasks before its final UNLOCK.
        """
        if self.life.closing or not mqs:
            return set()
        self.lock_requested.update(mqs)
        task = asyncio.get_running_loop().create_task(self._lock_rpc(broker, mqs), name=f"lock {broker}")
        self._lock_rpcs.add(task)
        task.add_done_callback(self._lock_rpcs.discard)
        return await asyncio.shield(task)

    async def _lock_rpc(self, broker: str, mqs: list[MessageQueue]) -> set[MessageQueue] | None:
        client = self.client
        try:
            addr = client.broker_addr(broker, 0, exact=True)
            resp = await client.invoke_ok(addr, RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, None, self._body(mqs)), LOCK_TIMEOUT)
            data = json.loads(resp.body or b"{}")
            return {MessageQueue.from_json(o) for o in data.get("lockOKMQSet") or []}
        except AclDeniedError as exc:
            if self.on_denied is not None:
                self.on_denied(f"LOCK_BATCH_MQ on {broker}", exc)
            return None
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
        """Renew the broker locks of every owned queue (Java lockAll, every lock_interval)."""
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
                addr = self.client.broker_addr(broker, 0, exact=True)
                await self.client.invoke_ok(addr, RemotingCommand.request(
                    RequestCode.UNLOCK_BATCH_MQ, None, self._body(group)), LOCK_TIMEOUT)
            except RocketMQError as exc:
                log.warning("UNLOCK_BATCH_MQ on %s failed: %s", broker, exc)
