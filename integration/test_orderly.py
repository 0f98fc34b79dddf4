"""Orderly consumption: per-queue order, one consumer per queue, broker-side locks."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from airflow_provider_rocketmq.client import (
    ClientConfig,
    MessageExt,
    MessageQueue,
    OrderlyStatus,
    PushConsumer,
)
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand

from .backends import IntegrationCluster, wait_until
from .helpers import SEQ, Collector, assigned_map, is_partition, make_message, start_consumer, stop_consumers

TIMEOUT = 60.0
LOCK_RELEASE_TIMEOUT = 15.0
ORDERS = 8
STEPS = 25
EXTRA_STEPS = 2
SUSPEND_AT = (3, 5)  # (order, step) answered SUSPEND_CURRENT_QUEUE_A_MOMENT once


async def _lock_probe(namesrv: str, group: str, queues: list[MessageQueue]) -> set[MessageQueue]:
    """Ask each queue's broker for its lock as an outsider client of ``group``.

    Returns the queues the brokers granted (and releases them again at once).
    """
    client = MQClient(ClientConfig(namesrv_addr=namesrv, instance_name="it_lock_probe"))
    await client.start()
    got: set[MessageQueue] = set()
    try:
        by_broker: dict[str, list[MessageQueue]] = {}
        for q in queues:
            by_broker.setdefault(q.broker_name, []).append(q)
        for mqs in by_broker.values():
            addr = await client.master_addr(mqs[0])
            granted = await _lock_batch(client, addr, RequestCode.LOCK_BATCH_MQ, group, mqs)
            if granted:
                await _lock_batch(client, addr, RequestCode.UNLOCK_BATCH_MQ, group, sorted(granted))
            got |= granted
        return got
    finally:
        await client.close()


async def _lock_batch(client: MQClient, addr: str, code: int, group: str,
                      mqs: list[MessageQueue]) -> set[MessageQueue]:
    mq_set = [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id} for q in mqs]
    body = json.dumps({"consumerGroup": group, "clientId": client.client_id, "mqSet": mq_set}).encode()
    resp = await client.invoke_ok(addr, RemotingCommand.request(code, {}, body))
    if code != RequestCode.LOCK_BATCH_MQ:
        return set()
    granted = json.loads(resp.body or b"{}").get("lockOKMQSet") or []
    return {MessageQueue(g["topic"], g["brokerName"], int(g["queueId"])) for g in granted}


def test_orderly_consumption_keeps_order_under_broker_locks(cluster: IntegrationCluster) -> None:
    topic = cluster.new_topic("orderly", queues=4)
    group = cluster.new_group("orderly")
    all_queues = cluster.queues(topic)
    collector = Collector()  # successful consumptions only, in consumption order
    suspended: list[int] = []
    guard = threading.Lock()

    def orderly_listener(name: str) -> Any:
        def on_messages(msgs: list[MessageExt], ctx: Any) -> OrderlyStatus:
            for m in msgs:
                seq = int(m.properties[SEQ])
                with guard:
                    if divmod(seq, 1000) == SUSPEND_AT and not suspended:
                        suspended.append(seq)
                        return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            collector.add(name, msgs)
            return OrderlyStatus.SUCCESS

        return on_messages

    consumers: dict[str, PushConsumer] = {}
    try:
        for name in ("a", "b"):
            consumers[name] = start_consumer(cluster, group, topic, orderly_listener(name), orderly=True,
                                             suspend_current_queue_time=0.2)
        wait_until(lambda: is_partition(assigned_map(consumers, topic), all_queues)
                   and all(len(qs) == len(all_queues) // 2 for qs in assigned_map(consumers, topic).values()),
                   TIMEOUT, "queues split half and half")
        assignment = assigned_map(consumers, topic)

        with cluster.producer() as producer:
            # order o always goes to queue o % 4, steps in order
            for step in range(STEPS):
                for order in range(ORDERS):
                    producer.send(make_message(topic, order * 1000 + step, keys=f"order-{order}"),
                                  queue=all_queues[order % len(all_queues)])
        collector.wait_for(lambda recs: len({r.seq for r in recs}) == ORDERS * STEPS, TIMEOUT,
                           "every order step consumed")

        # while both consumers run, the broker refuses the queues' locks to anybody else
        granted = asyncio.run(_lock_probe(cluster.namesrv_addr, group, all_queues))
        assert granted == set(), f"broker granted locks held by running orderly consumers: {granted}"
        records = collector.snapshot()

        # a leaves: b takes over every queue (it must win the broker locks a held) and goes on in order
        stop_consumers(consumers.pop("a"))
        wait_until(lambda: assigned_map(consumers, topic)["b"] == frozenset(all_queues), TIMEOUT,
                   "every queue on b after a left")
        with cluster.producer() as producer:
            for step in range(STEPS, STEPS + EXTRA_STEPS):
                for order in range(ORDERS):
                    producer.send(make_message(topic, order * 1000 + step, keys=f"order-{order}"),
                                  queue=all_queues[order % len(all_queues)])
        collector.wait_for_seqs([o * 1000 + s for o in range(ORDERS) for s in range(STEPS, STEPS + EXTRA_STEPS)],
                                TIMEOUT, consumer="b")
        granted = asyncio.run(_lock_probe(cluster.namesrv_addr, group, all_queues))
        assert granted == set(), f"broker granted locks held by the remaining consumer: {granted}"
    finally:
        stop_consumers(*consumers.values())

    # while the group was stable: every order in sequence, exactly once, by its queue's owner
    assert suspended == [SUSPEND_AT[0] * 1000 + SUSPEND_AT[1]]
    for order in range(ORDERS):
        steps = [r.seq % 1000 for r in records if r.seq // 1000 == order]
        assert steps == list(range(STEPS)), f"order {order} consumed out of order: {steps}"
        owners = {r.consumer for r in records if r.seq // 1000 == order}
        assert len(owners) == 1
        queue = all_queues[order % len(all_queues)]
        assert queue in assignment[owners.pop()]

    # after the takeover b went on in order (a replay of what a had not committed is allowed)
    later = collector.snapshot()[len(records):]
    for order in range(ORDERS):
        steps = [r.seq % 1000 for r in later if r.seq // 1000 == order and r.consumer == "b"]
        assert steps == sorted(set(steps)), f"order {order} out of order after the takeover: {steps}"
        assert steps[-EXTRA_STEPS:] == list(range(STEPS, STEPS + EXTRA_STEPS))

    # b's shutdown (UNLOCK_BATCH_MQ) frees the locks at once, well before the broker's 60 s lock expiry
    wait_until(lambda: asyncio.run(_lock_probe(cluster.namesrv_addr, group, all_queues)) == set(all_queues),
               LOCK_RELEASE_TIMEOUT, "queue locks released after shutdown")
