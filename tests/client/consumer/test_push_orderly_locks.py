"""Orderly shutdown leaves no broker queue lock behind (the broker keeps a lock for 60 s).

The hard case: the last member shuts down while its rebalance is still taking over the
queues of a member that just left. A LOCK_BATCH_MQ already on the wire (or granted, with
the start offset still being read) must be released by the final UNLOCK_BATCH_MQ too.
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_rocketmq.client.consumer.config import OrderlyStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_settled, wait_until


def lock_batch(cluster: TestCluster, group: str, mqs: list[MessageQueue], client_id: str,
               unlock: bool = False) -> set[MessageQueue]:
    """LOCK_BATCH_MQ (or UNLOCK_BATCH_MQ) as another client; returns lockOKMQSet."""
    async def go() -> set[MessageQueue]:
        addr = await cluster.client.master_addr(mqs[0])
        body = json.dumps({"clientId": client_id, "consumerGroup": group,
                           "mqSet": [mq.to_json() for mq in mqs]}).encode()
        code = RequestCode.UNLOCK_BATCH_MQ if unlock else RequestCode.LOCK_BATCH_MQ
        resp = await cluster.client.invoke_ok(addr, RemotingCommand.request(code, None, body), 5)
        if unlock:
            return set()
        return {MessageQueue.from_json(o) for o in json.loads(resp.body or b"{}").get("lockOKMQSet") or []}
    return cluster.run(go())


def _member(cluster: TestCluster, group: str, topic: str) -> PushConsumer:
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, lock_interval=0.5, **FAST)
    c.subscribe(topic)
    c.register_listener(lambda msgs, ctx: OrderlyStatus.SUCCESS, orderly=True)
    return c


# which broker answer is slow while the remaining member takes over the leaver's queues:
# LOCK_BATCH_MQ (the lock is granted, its answer still on the way) or QUERY_CONSUMER_OFFSET
# (locked, start offset still being read); None: no fault, the plain race
SLOW = [RequestCode.LOCK_BATCH_MQ, RequestCode.QUERY_CONSUMER_OFFSET, None]


@pytest.mark.parametrize("iteration", range(2))
def test_last_orderly_member_leaves_no_lock_behind(cluster: TestCluster, iteration: int) -> None:
    broker = cluster.embedded.brokers[0]
    for slow in SLOW:
        topic = f"OrderLocks{iteration}_{slow}"
        group = f"g_order_locks_{iteration}_{slow}"
        cluster.create_topic(topic, 4)
        mqs = cluster.queues_of(topic)
        a, b = _member(cluster, group, topic), _member(cluster, group, topic)
        a.start()
        b.start()
        try:
            wait_settled([a, b], 4)
            taken = sorted(a.assigned_queues())
            if slow is not None:
                # answered 0.6 s late (under the client's 1 s lock timeout), processed at once
                cluster.embedded.delay_responses(slow, 0.6)
            a.shutdown()
            # the broker has granted b the leaver's queues: b's rebalance is now waiting for
            # an answer (or, without a fault, may still be anywhere in its takeover)
            wait_until(lambda: all(broker.lock_owner(group, mq) == b.client_id for mq in taken),  # noqa: B023
                       10, "b locking the queues a released")
        finally:
            a.shutdown()
            b.shutdown()
            cluster.embedded.clear_faults()
        owners = {mq.queue_id: broker.lock_owner(group, mq) for mq in mqs}
        probe = f"127.0.0.1@probe{iteration}"
        got = lock_batch(cluster, group, mqs, probe)
        lock_batch(cluster, group, mqs, probe, unlock=True)
        assert got == set(mqs), (slow, owners)
