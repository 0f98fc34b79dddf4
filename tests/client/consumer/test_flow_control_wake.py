"""A pull loop held by flow control resumes as soon as its cache shrinks, not after a fixed delay."""

from __future__ import annotations

import asyncio
import threading

import pytest

from airflow_provider_rocketmq.client.consumer import pull
from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.process_queue import ProcessQueue
from airflow_provider_rocketmq.client.consumer.push import PushConsumer

from .cluster import FAST, TestCluster, wait_until
from .helpers import stored_messages


async def test_whatever_leaves_the_cache_wakes_the_waiting_pull_loop() -> None:
    pq = ProcessQueue()
    msgs = stored_messages("T", range(8))
    pq.put_messages(msgs[:4])
    pq.put_messages(msgs[4:])

    waiter = asyncio.ensure_future(pq.wait_for_space(30))
    await asyncio.sleep(0)  # let it start waiting
    assert not waiter.done()
    pq.remove_messages(msgs[:4])  # a settled batch
    await asyncio.wait_for(waiter, 5)

    taken = pq.take_messages(2)  # orderly: taken messages still occupy the cache ...
    waiter = asyncio.ensure_future(pq.wait_for_space(30))
    await asyncio.sleep(0)
    assert taken and not waiter.done()
    pq.commit()  # ... until they are committed
    await asyncio.wait_for(waiter, 5)

    waiter = asyncio.ensure_future(pq.wait_for_space(30))
    await asyncio.sleep(0)
    pq.drop()  # a dropped queue's loop must see it now, not in 30 s
    await asyncio.wait_for(waiter, 5)

    await asyncio.wait_for(ProcessQueue().wait_for_space(0.01), 5)  # nothing leaves: the delay bounds it


def test_small_thresholds_do_not_idle_the_queue_for_the_flow_control_delay(
        cluster: TestCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a threshold of 32 cached messages every second pull meets flow control. Were each hit
    a fixed delay (made 30 s here), 2,000 messages would take minutes; woken by settled batches,
    they are consumed at once."""
    monkeypatch.setattr(pull, "DELAY_FLOW_CONTROL", 30.0)
    topic, group = "FlowWakeTopic", "g_flow_wake"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 2000, per_batch=100)
    seen: list[int] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            seen.extend(m.queue_offset * 10 + m.queue_id for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, pull_threshold_for_queue=32, pull_batch_size=32,
                     **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(seen) >= 2000, 20, "2,000 messages")
        assert c.stats()["flow_control_delays"] > 0  # flow control did hold the queues
    finally:
        c.shutdown()
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 2000
