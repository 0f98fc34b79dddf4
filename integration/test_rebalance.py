"""Client-side rebalancing against the broker's view of the group."""

from __future__ import annotations

from airflow_provider_rocketmq.client import MessageQueue, PushConsumer

from .backends import IntegrationCluster, wait_until
from .helpers import (
    Collector,
    assigned_map,
    is_partition,
    produce,
    start_consumer,
    stop_consumers,
    wait_offsets_committed,
)

TIMEOUT = 60.0


def _blocks(assignment: dict[str, frozenset[MessageQueue]]) -> list[list[int]]:
    """Each consumer's queue ids, sorted, ordered by their first queue id."""
    return sorted((sorted(q.queue_id for q in qs) for qs in assignment.values()), key=lambda b: b[:1])


def test_sixteen_queues_over_three_consumers(cluster: IntegrationCluster) -> None:
    topic = cluster.new_topic("alloc", queues=16)
    group = cluster.new_group("alloc")
    all_queues = cluster.queues(topic)
    collector = Collector()
    consumers: dict[str, PushConsumer] = {}
    try:
        for name in ("c1", "c2", "c3"):
            consumers[name] = start_consumer(cluster, group, topic, collector.listener(name))
        wait_until(lambda: len(cluster.admin.consumer_ids(group)) == 3, TIMEOUT, "3 consumers registered")
        # AllocateMessageQueueAveragely: contiguous blocks of 6, 5 and 5 queues in queue order
        # (while members join, views differ and transient splits are expected: wait for the final one)
        wait_until(lambda: _blocks(assigned_map(consumers, topic)) == [list(range(6)), list(range(6, 11)),
                                                                      list(range(11, 16))],
                   TIMEOUT, "16 queues split 6/5/5 between 3 consumers")
        assignment = assigned_map(consumers, topic)
        assert is_partition(assignment, all_queues)

        with cluster.producer() as producer:
            results = produce(producer, topic, range(160))
        assert {r.queue.queue_id for r in results} == set(range(16))
        collector.wait_for_seqs(range(160), TIMEOUT)
        # taken before any consumer leaves: a leave moves queues, and redelivery of what the
        # leaving member had not yet committed is allowed (at-least-once), as in Java
        records = collector.snapshot()
        # the running group commits its progress to the broker
        wait_offsets_committed(cluster, group, topic)
        assert assigned_map(consumers, topic) == assignment
    finally:
        stop_consumers(*consumers.values())

    # while the group was stable, every message went to its queue's owner, exactly once
    assert sorted(r.seq for r in records) == list(range(160))
    for r in records:
        assert r.queue in assignment[r.consumer], (r.consumer, r.queue)


def test_rebalance_on_join_and_leave_loses_nothing(cluster: IntegrationCluster) -> None:
    topic = cluster.new_topic("rebal", queues=8)
    group = cluster.new_group("rebal")
    all_queues = cluster.queues(topic)
    collector = Collector()
    consumers: dict[str, PushConsumer] = {}
    try:
        with cluster.producer() as producer:
            consumers["a"] = start_consumer(cluster, group, topic, collector.listener("a"))
            produce(producer, topic, range(200))
            collector.wait_for(lambda recs: len(recs) >= 20, TIMEOUT, "first consumer consuming")

            # join: b takes half of the queues, a gives them up
            consumers["b"] = start_consumer(cluster, group, topic, collector.listener("b"))
            wait_until(lambda: is_partition(assigned_map(consumers, topic), all_queues)
                       and all(len(qs) == 4 for qs in assigned_map(consumers, topic).values()),
                       TIMEOUT, "8 queues split 4/4 after the join")
            produce(producer, topic, range(200, 400))
            collector.wait_for_seqs(range(400), TIMEOUT)
            assert collector.seqs("b"), "the joining consumer never consumed"

            # leave: a shuts down cleanly, b takes every queue
            stop_consumers(consumers.pop("a"))
            wait_until(lambda: assigned_map(consumers, topic)["b"] == frozenset(all_queues), TIMEOUT,
                       "all queues on the remaining consumer")
            produce(producer, topic, range(400, 600))
            collector.wait_for_seqs(range(400, 600), TIMEOUT, consumer="b")
            wait_offsets_committed(cluster, group, topic)
    finally:
        stop_consumers(*consumers.values())

    assert collector.seqs() == set(range(600))
    # the last member's clean shutdown leaves the broker's offsets at the end
    wait_offsets_committed(cluster, group, topic)
