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


def _averagely(all_queues: list[MessageQueue], members: int) -> set[frozenset[MessageQueue]]:
    """What AllocateMessageQueueAveragely hands out: consecutive runs of the sorted queues, the
    first ``len % members`` runs one longer (6/5/5 for 16 queues over 3 members)."""
    size, extra = divmod(len(all_queues), members)
    out, start = set(), 0
    for i in range(members):
        n = size + (1 if i < extra else 0)
        out.add(frozenset(all_queues[start:start + n]))
        start += n
    return out


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
        # while members join, views differ and transient splits are expected: wait for the final one
        expected = _averagely(all_queues, 3)
        if len(all_queues) == 16:
            assert sorted(len(qs) for qs in expected) == [5, 5, 6]
        wait_until(lambda: set(assigned_map(consumers, topic).values()) == expected, TIMEOUT,
                   f"{len(all_queues)} queues split {sorted(len(q) for q in expected)} between 3 consumers")
        assignment = assigned_map(consumers, topic)
        assert is_partition(assignment, all_queues)

        with cluster.producer() as producer:
            results = produce(producer, topic, range(160))
        assert {r.queue for r in results} == set(all_queues)
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
                       and all(len(qs) == len(all_queues) // 2 for qs in assigned_map(consumers, topic).values()),
                       TIMEOUT, "queues split half and half after the join")
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
