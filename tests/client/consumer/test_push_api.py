"""Facade features the window operator relies on: async listeners, stop offsets, assignment callbacks,
suspend/resume, disabled offset commits, ack_index."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import AsyncPushConsumer, PushConsumer
from airflow_provider_rocketmq.client.protocol.errors import ClientStateError

from .cluster import FAST, TestCluster, wait_until


def test_async_listener_stop_offsets_and_assignment_callback(cluster: TestCluster) -> None:
    topic, group = "ApiTopic", "g_api"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 100, per_batch=10)  # 50 per queue
    seen: list[tuple[int, int]] = []
    assignments: list[tuple[str, int, int]] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        assert asyncio.get_running_loop()  # runs on the consumer's loop
        seen.extend((m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, enable_offset_commit=False, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.on_assignment(lambda t, all_, mine: assignments.append((t, len(all_), len(mine))))
    mqs = cluster.queues_of(topic)
    c.set_stop_offsets({mqs[0]: 7, mqs[1]: 0})
    c.start()
    try:
        wait_until(lambda: len(seen) >= 7, 10, "queue 0 up to its stop offset")
        assert c.assigned_queues() == frozenset(mqs)
        c.set_stop_offsets({mqs[1]: 3})  # raising a stop offset lets the queue continue
        wait_until(lambda: len(seen) >= 10, 10, "queue 1 up to its new stop offset")
    finally:
        c.shutdown()
    assert sorted(seen) == [(0, i) for i in range(7)] + [(1, i) for i in range(3)]
    assert (topic, 2, 2) in assignments
    # enable_offset_commit=False: the broker holds no progress for the group
    assert all(v <= 0 for v in cluster.committed(group, topic).values())


def test_suspend_pauses_and_resume_continues(cluster: TestCluster) -> None:
    topic, group = "PauseTopic", "g_pause"
    cluster.create_topic(topic, 1)
    seen: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            seen.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(c.assigned_queues()) == 1, 10, "assignment")
        c.suspend()
        assert c.stats()["paused"] is True
        # the pull already parked on the broker still answers once: those messages are delivered
        cluster.fill(topic, 5, per_batch=5)
        wait_until(lambda: len(seen) == 5, 10, "the parked pull's messages")
        cluster.fill(topic, 5, per_batch=5)
        pulls = c.stats()["pulls"]
        deadline = time.monotonic() + 1.5  # a negative check needs a window: no pull while paused
        while time.monotonic() < deadline:
            assert len(seen) == 5 and c.stats()["pulls"] == pulls
            time.sleep(0.05)
        c.resume()
        wait_until(lambda: len(seen) == 10, 10, "everything after resume")
    finally:
        c.shutdown()


def test_ack_index_retries_only_the_rest(cluster: TestCluster) -> None:
    topic, group = "AckTopic", "g_ack"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 4, per_batch=4)
    calls: list[tuple[list[int], list[int]]] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            calls.append(([m.queue_offset for m in msgs], [m.reconsume_times for m in msgs]))
        if len(msgs) == 4:
            ctx.ack_index = 1  # the first two succeeded
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_message_batch_max_size=4, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(calls) >= 2 and sum(len(o) for o, _ in calls) >= 6, 30, "the retried pair")
    finally:
        c.shutdown()
    assert calls[0] == ([0, 1, 2, 3], [0, 0, 0, 0])
    # the two unacknowledged ones come back from %RETRY% (in one call or two), reconsume_times 1
    retried = [rt for _, times in calls[1:] for rt in times]
    assert retried == [1, 1]


async def test_async_facade_on_the_callers_loop(cluster: TestCluster) -> None:
    topic, group = "AsyncFacadeTopic", "g_async_facade"
    cluster.create_topic(topic, 2)
    await asyncio.to_thread(cluster.fill, topic, 20, per_batch=10)
    got = asyncio.Event()
    seen: list[bytes] = []

    async def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        seen.extend(m.body for m in msgs)
        if len(seen) >= 20:
            got.set()
        return ConsumeStatus.CONSUME_SUCCESS

    bare = AsyncPushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    bare.subscribe(topic)
    with pytest.raises(ClientStateError, match="listener"):
        await bare.start()
    c = AsyncPushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    await c.start()
    try:
        await asyncio.wait_for(got.wait(), 20)
    finally:
        await c.shutdown()
    assert len(set(seen)) == 20


def test_assignment_callback_reports_an_empty_share(cluster: TestCluster) -> None:
    topic, group = "OneQueueTopic", "g_one_queue"
    cluster.create_topic(topic, 1)
    reports: dict[str, list[int]] = {"a": [], "b": []}

    def member(name: str) -> PushConsumer:
        c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
        c.subscribe(topic)
        c.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
        c.on_assignment(lambda t, all_, mine: reports[name].append(len(mine)) if t == topic else None)
        return c

    a, b = member("a"), member("b")
    a.start()
    try:
        wait_until(lambda: reports["a"] == [1], 10, "a owns the queue")
        b.start()
        # 1 queue, 2 members: b is told it owns nothing (and a keeps the queue: ids sort a/b either way)
        wait_until(lambda: 0 in reports["a"] + reports["b"] and len(reports["b"]) >= 1, 10, "b's first report")
        wait_until(lambda: len(a.assigned_queues()) + len(b.assigned_queues()) == 1, 10, "one owner")
    finally:
        a.shutdown()
        b.shutdown()


def test_illegal_offset_moves_to_the_brokers_correction(cluster: TestCluster) -> None:
    topic, group = "IllegalTopic", "g_illegal"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 10, per_batch=10)
    mq = cluster.queues_of(topic)[0]
    cluster.run(cluster.client.update_consumer_offset(mq, group, 1000))  # beyond the queue's end
    seen: list[int] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            seen.extend(m.queue_offset for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, enable_offset_commit=False, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: c.stats()["pulls"] >= 1, 10, "the first pull")
        cluster.fill(topic, 5, per_batch=5)
        wait_until(lambda: len(seen) >= 5, 10, "the new messages")
    finally:
        c.shutdown()
    assert seen == [10, 11, 12, 13, 14]  # the broker corrected 1000 to the queue's end (10)
