"""RESET_CONSUMER_CLIENT_OFFSET moves only what this member owns (Java MQClientInstance.resetOffset).

Clustering: the body names every queue of the topic, but a member sets and commits only the
queues it owns (another member owns the rest and gets its own request). Broadcasting: the reset
rewrites offsets.json with every owned queue, so the other topics' progress survives a crash
before the next periodic persist.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.offset_store import decode_offsets, offsets_file_path
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_settled, wait_until

QUIET = {**FAST, "persist_consumer_offset_interval": 60.0}  # only the reset itself writes offsets


def tell_reset(cluster: TestCluster, group: str, client_id: str, topic: str, table: dict[MessageQueue, int]) -> None:
    """RESET_CONSUMER_CLIENT_OFFSET (oneway, like the broker) to one member only."""
    broker = cluster.embedded.brokers[0]

    async def go() -> None:
        conn = broker.client_channel(group, client_id)
        conn.oneway(RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                    {"topic": topic, "group": group, "timestamp": "-1", "isForce": "true"},
                                    fastjson.dumps({"offsetTable": table}).encode(), language="JAVA"))
    asyncio.run_coroutine_threadsafe(go(), cluster.embedded.loop).result(10)


class Seen:
    def __init__(self) -> None:
        self.items: list[tuple[str, int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, msgs, ctx):  # type: ignore[no-untyped-def]
        with self.lock:
            self.items.extend((m.topic, m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS


def test_clustering_reset_touches_only_the_members_own_queues(cluster: TestCluster) -> None:
    topic, group = "ResetOwnTopic", "g_reset_own"
    cluster.create_topic(topic, 4)
    cluster.fill(topic, 40, per_batch=10)  # 10 per queue
    mqs = cluster.queues_of(topic)
    seen_a, seen_b = Seen(), Seen()
    a = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **QUIET)
    b = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **QUIET)
    for c, seen in ((a, seen_a), (b, seen_b)):
        c.subscribe(topic)
        c.register_listener(seen)
    a.start()
    b.start()
    try:
        wait_settled([a, b], 4)
        wait_until(lambda: len(seen_a.items) + len(seen_b.items) >= 40, 20, "everything once")
        for c in (a, b):
            c.persist_offsets()
        wait_until(lambda: cluster.committed(group, topic) == {mq: 10 for mq in mqs}, 10, "offsets 10")
        b.suspend()  # b neither pulls nor persists from here on: the broker's figures are a's doing
        mine = a.assigned_queues()
        before = len(seen_a.items)
        tell_reset(cluster, group, a.client_id, topic, {mq: 0 for mq in mqs})
        wait_until(lambda: len(seen_a.items) - before >= 20, 20, "a consuming its queues again")
        committed = cluster.committed(group, topic)
    finally:
        a.shutdown()
        b.shutdown()
    assert {qid for _, qid, _ in seen_a.items[before:]} == {mq.queue_id for mq in mine}  # a's own, again
    # b's queues keep b's progress: a must not have committed the reset for them
    assert {mq: committed[mq] for mq in mqs if mq not in mine} == {mq: 10 for mq in mqs if mq not in mine}


def test_broadcasting_reset_keeps_the_other_topics_offsets_on_disk(cluster: TestCluster, tmp_path: Path) -> None:
    t1, t2, group = "ResetBcastA", "ResetBcastB", "g_reset_bcast"
    for t in (t1, t2):
        cluster.create_topic(t, 1)
        cluster.fill(t, 5, per_batch=5)
    seen = Seen()
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, message_model="BROADCASTING",
                     offset_store_dir=str(tmp_path), **QUIET)
    for t in (t1, t2):
        c.subscribe(t)
    c.register_listener(seen)
    path = offsets_file_path(str(tmp_path), c.client_id, group)
    mq1, mq2 = cluster.queues_of(t1)[0], cluster.queues_of(t2)[0]
    c.start()
    try:
        wait_until(lambda: len(seen.items) == 10, 10, "both topics consumed")
        c.persist_offsets()
        assert decode_offsets(path.read_text("utf-8")) == {mq1: 5, mq2: 5}
        tell_reset(cluster, group, c.client_id, t1, {mq1: 2})
        wait_until(lambda: len(seen.items) == 13, 10, "t1 from offset 2 again")
        on_disk = decode_offsets(path.read_text("utf-8"))
    finally:
        c.shutdown()
    assert seen.items[10:] == [(t1, 0, 2), (t1, 0, 3), (t1, 0, 4)]
    assert on_disk == {mq1: 2, mq2: 5}  # written by the reset itself (periodic persist: 60 s)
