"""Pipelined sends (`Producer.send_many`) against the broker under test: every message's result names
where it was stored, and the messages of one key are stored in the order given, with many requests in
flight (a real 4.x broker serves one connection's sends on several threads)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from airflow_provider_rocketmq.client.protocol.send_wire import select_by_key

from .backends import IntegrationCluster
from .helpers import Collector, make_message, start_consumer, stop_consumers

TIMEOUT = 60.0


@pytest.mark.parametrize("max_batch", [1, 16])
def test_results_per_message_and_order_per_key(cluster: IntegrationCluster, max_batch: int) -> None:
    topic = cluster.new_topic(f"pipe{max_batch}", queues=4)
    group = cluster.new_group(f"pipe{max_batch}")
    keys = [f"account-{k}" for k in range(8)]
    keyed = [(make_message(topic, i, keys=keys[i % 8]), keys[i % 8]) for i in range(800)]
    loose = [make_message(topic, 1000 + i) for i in range(400)]
    with cluster.producer() as producer:
        outcomes = list(producer.send_many(keyed, max_in_flight=32, max_batch=max_batch))
        outcomes += list(producer.send_many(loose, max_in_flight=32, max_batch=max_batch))
        queues = producer.publish_queues(topic)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok][:3]

    collector = Collector()
    consumer = start_consumer(cluster, group, topic, collector.listener("c1"))
    try:
        collector.wait_for_seqs([*range(800), *range(1000, 1400)], TIMEOUT)
    finally:
        stop_consumers(consumer)
    by_seq = {r.seq: r for r in collector.snapshot()}
    for o in outcomes:  # the result of each message is where the broker has it
        assert o.result is not None
        got = by_seq[int(o.message.properties["it_seq"])]
        assert (got.queue.queue_id, got.queue_offset) == (o.result.queue.queue_id, o.result.queue_offset)
        assert got.msg.msg_id == o.result.msg_id and got.msg.body == o.message.body
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in sorted(by_seq.values(), key=lambda r: (r.queue.queue_id, r.queue_offset)):
        if r.seq < 800:
            per_queue[r.queue.queue_id].append(r.seq)
    for k, key in enumerate(keys):
        stored = [s for s in per_queue[select_by_key(queues, key).queue_id] if s % 8 == k]
        assert stored == list(range(k, 800, 8)), f"{key} stored out of order"
