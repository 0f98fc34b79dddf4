"""Produce -> consume round trip: tags, keys, properties, a compressed body, batches, tag filtering."""

from __future__ import annotations

import os

from .backends import IntegrationCluster
from .helpers import SEQ, Collector, make_message, start_consumer, stop_consumers

TIMEOUT = 60.0


def test_round_trip_preserves_tags_keys_properties_and_a_compressed_body(cluster: IntegrationCluster) -> None:
    topic = cluster.new_topic("rt", queues=4)
    group = cluster.new_group("rt")
    big = os.urandom(3000) + b"x" * 5000  # > 4 KiB: the producer compresses it on the wire
    sent = {}
    with cluster.producer() as producer:
        for seq, tags in enumerate(["TagA", "TagB", "TagA", "TagB"]):
            body = big if seq == 3 else f"body {seq}".encode()
            msg = make_message(topic, seq, tags=tags, keys=f"k{seq} order-{seq % 2}", body=body,
                               color="red", note="值")
            sent[seq] = (producer.send(msg), msg)
        # a tag nobody subscribed to: must never reach the listener
        filtered = producer.send(make_message(topic, 99, tags="TagC"))
        # a batch of three, all TagA
        batch = [make_message(topic, s, tags="TagA") for s in (10, 11, 12)]
        batch_result = producer.send_batch(batch)

    collector = Collector()
    consumer = start_consumer(cluster, group, topic, collector.listener("c1"), expression="TagA || TagB")
    try:
        collector.wait_for_seqs([0, 1, 2, 3, 10, 11, 12], TIMEOUT)
    finally:
        stop_consumers(consumer)

    by_seq = {r.seq: r for r in collector.snapshot()}
    assert 99 not in by_seq, "a TagC message was delivered to a 'TagA || TagB' subscription"
    for seq, (result, msg) in sent.items():
        got = by_seq[seq].msg
        assert got.body == msg.body
        assert got.tags == msg.tags
        assert got.keys == f"k{seq} order-{seq % 2}"
        assert got.properties["color"] == "red"
        assert got.properties["note"] == "值"
        assert got.properties[SEQ] == str(seq)
        assert got.msg_id == result.msg_id
        assert got.queue_id == result.queue.queue_id
        assert got.queue_offset == result.queue_offset
        assert got.reconsume_times == 0
        assert got.born_timestamp > 0 and got.store_timestamp > 0
    assert len(by_seq[3].msg.body) == len(big)
    assert {by_seq[s].msg.queue_id for s in (10, 11, 12)} == {batch_result.queue.queue_id}

    # after a clean shutdown the broker holds the group's progress past every delivered message
    # (a trailing filtered-out message may stay uncommitted until a pull skips it, as in Java)
    hw = cluster.admin.high_water_marks(topic)
    for mq, end in hw.items():
        delivered = [r.queue_offset for r in collector.snapshot() if r.queue == mq]
        committed = cluster.admin.committed_offset(group, mq)
        assert max(delivered, default=-1) + 1 <= committed <= end, (mq, delivered, committed, end)
    filtered_mq = filtered.queue
    assert all(r.queue_offset != filtered.queue_offset for r in collector.snapshot() if r.queue == filtered_mq)
