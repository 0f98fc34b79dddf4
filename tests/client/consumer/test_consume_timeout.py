"""The consume-timeout clock of a message starts when its listener call starts, not when its
pulled batch was handed to the consume pool: a backlog behind a slow listener is never sent back
(then consumed anyway) just for having waited its turn."""

from __future__ import annotations

import threading
import time

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer

from .cluster import FAST, TestCluster, wait_until


def test_waiting_in_the_backlog_does_not_count_as_consuming(cluster: TestCluster) -> None:
    topic, group = "TimeoutBacklogTopic", "g_timeout_backlog"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 12, per_batch=12)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        time.sleep(0.15)  # each call well under consume_timeout; the whole batch takes 1.8 s
        with lock:
            seen.extend((m.queue_offset, m.reconsume_times) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_timeout=0.5,
                     **{**FAST, "consume_thread_min": 1, "consume_thread_max": 1})
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(seen) >= 12, 20, "the whole batch")
        wait_until(lambda: cluster.committed(group, topic) == {mq: 12 for mq in cluster.queues_of(topic)}, 10,
                   "the offset past the batch")
        time.sleep(0.5)  # one more cleaner period: nothing may come back from %RETRY%
        stats = c.stats()
    finally:
        c.shutdown()
    assert stats["sent_back"] == 0
    assert seen == [(i, 0) for i in range(12)]  # each once, none redelivered
