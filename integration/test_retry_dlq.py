"""RECONSUME_LATER -> send-back -> redelivery from %RETRY%, and the DLQ after max_reconsume_times.

On a real broker the first retry level (delay level 3) is 10 s, the second 30 s; the
embedded broker runs them on a fast time scale. Waits are bounded by the backend's
``first_retry_delay`` plus a margin.
"""

from __future__ import annotations

import threading

from airflow_provider_rocketmq.client import ConsumeStatus, MessageExt

from .backends import IntegrationCluster, wait_until
from .helpers import SEQ, Collector, make_message, start_consumer, stop_consumers

MARGIN = 45.0


def _dlq_count(cluster: IntegrationCluster, group: str) -> int:
    # the DLQ topic is write-only (not in the readable route): ask the broker's topic stats
    stats = cluster.admin.topic_stats(f"%DLQ%{group}")
    return sum(o.max_offset - o.min_offset for o in stats.offset_table.values())


def test_retry_then_dead_letter_queue(cluster: IntegrationCluster) -> None:
    topic = cluster.new_topic("retry", queues=2)
    group = cluster.new_group("retry")
    failed_once: set[int] = set()
    lock = threading.Lock()

    def decide(msg: MessageExt) -> ConsumeStatus | None:
        seq = int(msg.properties[SEQ])
        if seq == 1:  # poison: always fails
            return ConsumeStatus.RECONSUME_LATER
        if seq == 2:  # transient: fails the first time only
            with lock:
                if seq not in failed_once:
                    failed_once.add(seq)
                    return ConsumeStatus.RECONSUME_LATER
        return None

    collector = Collector()
    with cluster.producer() as producer:
        for seq in (0, 1, 2):
            producer.send(make_message(topic, seq, tags="T"))
    # max_reconsume_times=1: one redelivery, then the poison message goes to %DLQ%<group>
    consumer = start_consumer(cluster, group, topic, collector.listener("c1", decide),
                              max_reconsume_times=1)
    timeout = cluster.first_retry_delay + MARGIN
    try:
        collector.wait_for(
            lambda recs: sum(1 for r in recs if r.seq == 1) >= 2 and sum(1 for r in recs if r.seq == 2) >= 2,
            timeout, "the failed messages redelivered once")
        wait_until(lambda: _dlq_count(cluster, group) >= 1, timeout, "the poison message in the DLQ")
    finally:
        stop_consumers(consumer)

    deliveries = collector.snapshot()
    by_seq: dict[int, list[int]] = {}
    for r in deliveries:
        by_seq.setdefault(r.seq, []).append(r.reconsume_times)
    assert by_seq[0] == [0]
    # transient: original delivery then one retry that succeeded
    assert by_seq[2] == [0, 1]
    # poison: original delivery, one retry, then dead-lettered (never a third delivery)
    assert by_seq[1] == [0, 1]
    assert _dlq_count(cluster, group) == 1
    redelivered = [r for r in deliveries if r.reconsume_times == 1]
    # the retry keeps the user's topic, tags, keys and properties
    for r in redelivered:
        assert r.msg.topic == topic
        assert r.tags == "T"
        assert r.keys == f"key-{r.seq}"
