"""Requests the broker sends to the consumer: running info, consume directly, reset offset, ids changed."""

from __future__ import annotations

import threading

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_until


def _consumer(cluster: TestCluster, group: str, topic: str, sink: list[bytes]) -> PushConsumer:
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            sink.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic, "*")
    c.register_listener(listener)
    return c


def test_running_info_consume_directly_and_reset(cluster: TestCluster) -> None:
    topic, group = "ReqTopic", "g_req"
    cluster.create_topic(topic, 2)
    sent = cluster.fill(topic, 40, per_batch=10)
    seen: list[bytes] = []
    c = _consumer(cluster, group, topic, seen)
    c.start()
    broker = cluster.embedded.brokers[0]
    try:
        wait_until(lambda: len(seen) >= 40, 20, "first pass")
        wait_until(lambda: sum(cluster.committed(group, topic).values()) == 40, 10, "committed")

        resp = broker.get_consumer_running_info(group, c.client_id)
        if hasattr(resp, "result"):
            resp = resp.result(10)
        assert resp.code == 0
        info = fastjson.loads(resp.body)
        mqs = {MessageQueue.from_json(fastjson.parse_key(k)): v for k, v in info["mqTable"].items()}
        assert mqs[MessageQueue(topic, broker.name, 0)]["commitOffset"] == 20
        assert info["properties"]["consumerGroup"] == group
        assert {s["topic"] for s in info["subscriptionSet"]} == {topic, "%RETRY%" + group}

        stored = cluster.read_all(topic)[0]
        before = len(seen)
        resp = broker.consume_message_directly(group, c.client_id, stored.commit_log_offset)
        if hasattr(resp, "result"):
            resp = resp.result(10)
        result = fastjson.loads(resp.body)
        assert result["consumeResult"] == "CR_SUCCESS" and result["autoCommit"] is True
        assert seen[before:] == [stored.body]

        seen.clear()
        broker.reset_consumer_offset(group, topic, {0: 0, 1: 0})
        wait_until(lambda: sorted(seen) == sorted(sent), 20, "everything again after the reset")
    finally:
        c.shutdown()


def test_notify_ids_changed_rebalances_at_once(cluster: TestCluster) -> None:
    topic, group = "NotifyTopic", "g_notify"
    cluster.create_topic(topic, 4)
    slow = dict(FAST, rebalance_interval=600.0)  # only the broker's notification can trigger it
    a = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **slow)
    a.subscribe(topic)
    a.register_listener(lambda m, ctx: ConsumeStatus.CONSUME_SUCCESS)
    b = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **slow)
    b.subscribe(topic)
    b.register_listener(lambda m, ctx: ConsumeStatus.CONSUME_SUCCESS)
    a.start()
    try:
        wait_until(lambda: len(a.assigned_queues()) == 4, 10, "a owns everything")
        b.start()
        wait_until(lambda: len(a.assigned_queues()) == 2 and len(b.assigned_queues()) == 2, 10, "split")
        b.shutdown()  # UNREGISTER_CLIENT -> the broker notifies a
        wait_until(lambda: len(a.assigned_queues()) == 4, 10, "a takes everything back")
    finally:
        a.shutdown()
        b.shutdown()
