"""A push consumer group while its topic grows from 8 to 16 queues (``mqadmin updateTopic -r 16 -w 16``).

The members read from the last offset and the broker answers "no offset" for queues the group never
committed (``first-on-disk``, as a real broker once a queue's first message left its memory): a queue
added to the topic starts at its minimum offset, because the group has offsets on the topic - so the
messages producers wrote to it before the members noticed it are consumed, exactly once, like the rest.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from airflow_provider_rocketmq.client import ConsumeStatus, Message, MessageQueue, PushConsumer
from airflow_provider_rocketmq.embedded import OffsetFaults

from .cluster import FAST, TestCluster, wait_until

pytestmark = pytest.mark.timeout(120)
TOPIC, GROUP = "GrowsPush", "g_grows_push"


def _send(cluster: TestCluster, per_queue: int, queues: range, tag: str) -> list[bytes]:
    async def go() -> list[bytes]:
        sent: list[bytes] = []
        for q in queues:
            batch = [Message(TOPIC, f"{tag}-{q}-{i}".encode()) for i in range(per_queue)]
            await cluster.producer.send_batch(batch, queue=MessageQueue(TOPIC, "broker-a", q))
            sent += [m.body for m in batch]
        return sent
    result: list[bytes] = cluster.run(go())
    return result


def test_queues_added_while_the_group_runs_are_consumed_from_their_first_message(cluster: TestCluster) -> None:
    cluster.create_topic(TOPIC, 8)
    cluster.embedded.set_offset_faults(OffsetFaults(first_on_disk=True))
    _send(cluster, 3, range(8), "before-group")  # older than the group: never consumed (it reads from last)
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    options = {**FAST, "consume_from_where": "CONSUME_FROM_LAST_OFFSET", "poll_name_server_interval": 1.0}
    members = [PushConsumer(GROUP, namesrv_addr=cluster.namesrv_addr, **options) for _ in range(2)]
    for member in members:
        member.subscribe(TOPIC)
        member.register_listener(listener)
        member.start()
    try:
        # both members own their half and have committed where they started (the queues' ends)
        wait_until(lambda: sum(len(m.assigned_queues()) for m in members) == 8
                   and set(cluster.committed(GROUP, TOPIC).values()) == {3}, 30, "the group settled at the end")
        sent = _send(cluster, 5, range(8), "old")
        wait_until(lambda: len(got) >= len(sent), 30, "the messages of the 8 queues")
        cluster.embedded.create_topic(TOPIC, 16)  # the expansion; producers write to the new queues at once
        sent += _send(cluster, 4, range(16), "grown")
        wait_until(lambda: len(got) >= len(sent), 60, "every message, the new queues' first ones included")
        wait_until(lambda: sum(len(m.assigned_queues()) for m in members) == 16, 30, "16 queues shared")
    finally:
        for member in members:
            member.shutdown()
    assert Counter(got) == Counter(sent)  # each once; nothing older than the group
    committed = cluster.committed(GROUP, TOPIC)
    assert {mq.queue_id: off for mq, off in committed.items() if mq.queue_id >= 8} == {q: 4 for q in range(8, 16)}
