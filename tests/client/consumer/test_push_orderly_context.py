"""What an orderly listener may ask through its context: ``auto_commit`` is honoured (Java's
ConsumeOrderlyContext semantics, with COMMIT / ROLLBACK), the concurrent-only knobs are refused."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_rocketmq.client.consumer.config import OrderlyStatus
from airflow_provider_rocketmq.client.consumer.listener import OrderlyContext
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_until


def _orderly(cluster: TestCluster, group: str, topic: str, listener) -> PushConsumer:  # type: ignore[no-untyped-def]
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, lock_interval=0.5,
                     **{**FAST, "persist_consumer_offset_interval": 60.0})
    c.subscribe(topic)
    c.register_listener(listener, orderly=True)
    return c


def test_auto_commit_off_commits_only_on_commit(cluster: TestCluster) -> None:
    topic, group = "OrderlyManualTopic", "g_orderly_manual"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 10, per_batch=10)
    seen: list[int] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        ctx.auto_commit = False
        with lock:
            seen.extend(m.queue_offset for m in msgs)
        return OrderlyStatus.COMMIT if msgs[-1].queue_offset == 5 else OrderlyStatus.SUCCESS

    c = _orderly(cluster, group, topic, listener)
    c.start()
    try:
        wait_until(lambda: len(seen) == 10, 10, "every message")
        c.persist_offsets()
        mq = cluster.queues_of(topic)[0]
        # SUCCESS without auto-commit keeps 6..9 uncommitted; only COMMIT (at 5) moved the offset
        wait_until(lambda: cluster.committed(group, topic) == {mq: 6}, 5, "the offset after the COMMIT")
        assert c.stats()["offsets"][str(mq)] == 6
    finally:
        c.shutdown()
    assert seen == list(range(10))


def test_rollback_consumes_the_uncommitted_messages_again(cluster: TestCluster) -> None:
    topic, group = "OrderlyRollbackTopic", "g_orderly_rollback"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 4, per_batch=4)
    seen: list[int] = []
    rolled = [False]

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        ctx.auto_commit = False
        ctx.suspend_current_queue_time = 0.05
        off = msgs[-1].queue_offset
        seen.append(off)
        if off == 2 and not rolled[0]:
            rolled[0] = True
            return OrderlyStatus.ROLLBACK  # 0, 1 and 2 were taken since the last commit
        return OrderlyStatus.COMMIT if off == 3 else OrderlyStatus.SUCCESS

    c = _orderly(cluster, group, topic, listener)
    c.start()
    try:
        wait_until(lambda: seen[-1:] == [3], 10, "the last message")
        c.persist_offsets()
        mq = cluster.queues_of(topic)[0]
        wait_until(lambda: cluster.committed(group, topic) == {mq: 4}, 5, "the offset after the COMMIT")
    finally:
        c.shutdown()
    assert seen == [0, 1, 2, 0, 1, 2, 3]


def test_consume_directly_reports_the_listeners_auto_commit(cluster: TestCluster) -> None:
    topic, group = "OrderlyDirectTopic", "g_orderly_direct"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1)
    seen: list[int] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        seen.append(msgs[0].queue_offset)
        ctx.auto_commit = False
        return OrderlyStatus.COMMIT

    c = _orderly(cluster, group, topic, listener)
    c.start()
    try:
        wait_until(lambda: len(seen) == 1, 10, "the message by pulling")
        stored = cluster.embedded.messages(topic)[0]
        resp = cluster.embedded.brokers[0].consume_message_directly(group, c.client_id, stored.commit_log_offset)
        resp = resp.result(10) if hasattr(resp, "result") else resp
    finally:
        c.shutdown()
    result = fastjson.loads(resp.body)
    assert result["consumeResult"] == "CR_COMMIT" and result["order"] is True  # Java's mapping
    assert result["autoCommit"] is False


@pytest.mark.parametrize("knob", ["ack_index", "delay_level_when_next_consume"])
def test_concurrent_only_knobs_are_refused_by_name(knob: str) -> None:
    ctx = OrderlyContext(MessageQueue("T", "b", 0))
    with pytest.raises(AttributeError, match=f"{knob}.*orderly"):
        setattr(ctx, knob, 1)
    assert not hasattr(ctx, knob)
    ctx.auto_commit = False
    ctx.suspend_current_queue_time = 2.0
    assert (ctx.auto_commit, ctx.suspend_current_queue_time) == (False, 2.0)


def test_flow_control_counts_taken_uncommitted_messages(cluster: TestCluster) -> None:
    # messages an orderly worker took but did not commit still occupy the cache (Java's msgCount)
    topic, group = "OrderlyFlowTopic", "g_orderly_flow"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 400, per_batch=50)
    seen: list[int] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        ctx.auto_commit = False  # acknowledged, never committed: they stay in the consuming set
        seen.extend(m.queue_offset for m in msgs)
        return OrderlyStatus.SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, lock_interval=0.5, pull_threshold_for_queue=64,
                     **FAST)
    c.subscribe(topic)
    c.register_listener(listener, orderly=True)
    c.start()
    try:
        # flow control holds, and the listener has taken every message in the cache
        wait_until(lambda: c.stats()["flow_control_delays"] > 0 and c.stats()["cached_messages"] == len(seen), 10,
                   "flow control, every cached message taken")
        n = len(seen)
        delays = c.stats()["flow_control_delays"]
        wait_until(lambda: c.stats()["flow_control_delays"] > delays + 5, 10, "flow control holding")
        assert len(seen) == n <= 64 + 32  # the threshold plus at most one pull batch
        assert c.stats()["cached_messages"] == n
    finally:
        c.shutdown()
