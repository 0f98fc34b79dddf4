"""Batch listeners (client/consumer/consume_batch.py): once per pulled batch, per-queue offset order,
never concurrently for one queue, one consume thread; success settles a batch, failures go back."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import AsyncPushConsumer, PushConsumer
from airflow_provider_rocketmq.client.protocol.batch import (
    MessageBatch,
    PullFilter,
    apply_filter,
    decode_message_batch,
)
from airflow_provider_rocketmq.client.protocol.errors import ClientStateError, ConfigError
from airflow_provider_rocketmq.client.protocol.message import decode_messages
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_until
from .helpers import stored_messages


class Decoded:
    """The tests' decoder: `decode_messages` plus the filter, and a record of what it was asked."""

    def __init__(self) -> None:
        self.filters: list[PullFilter] = []

    def __call__(self, body: bytes, mq: MessageQueue, flt: PullFilter) -> MessageBatch | None:
        self.filters.append(flt)
        msgs = apply_filter(decode_messages(body, broker_name=mq.broker_name), flt)
        return MessageBatch(mq, msgs) if msgs else None


def _per_queue(calls: list[tuple[MessageQueue, int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for mq, first, last, _ in calls:
        out.setdefault(mq.queue_id, []).append((first, last))
    return out


def _assert_contiguous(per_queue: dict[int, list[tuple[int, int]]], ends: dict[int, int]) -> None:
    for qid, spans in per_queue.items():
        expect = 0
        for first, last in spans:
            assert first == expect, f"queue {qid}: batch starts at {first}, expected {expect}"
            expect = last + 1
        assert expect == ends[qid]


def test_sync_batch_listener_once_per_batch_in_order_on_one_thread(cluster: TestCluster) -> None:
    topic, group = "BatchTopic", "g_batch"
    cluster.create_topic(topic, 4)
    cluster.fill(topic, 400, per_batch=25)  # 100 per queue
    calls: list[tuple[MessageQueue, int, int, int]] = []
    threads: set[str] = set()
    active = [0]
    overlaps = [0]
    decoder = Decoded()

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        active[0] += 1
        if active[0] > 1:
            overlaps[0] += 1
        threads.add(threading.current_thread().name)
        assert [m.queue_offset for m in batch.messages()] == list(range(batch.first_offset, batch.last_offset + 1))
        calls.append((batch.mq, batch.first_offset, batch.last_offset, batch.count))
        time.sleep(0.001)  # widen any window in which a second call could overlap
        active[0] -= 1
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, pull_batch_size=16, **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, decoder)
    c.start()
    try:
        wait_until(lambda: sum(n for *_, n in calls) >= 400, 20, "every message")
        mqs = cluster.queues_of(topic)
        wait_until(lambda: cluster.committed(group, topic) == {mq: 100 for mq in mqs}, 10, "committed offsets")
        info = c.stats()
    finally:
        c.shutdown()
    assert sum(n for *_, n in calls) == 400  # nothing twice
    assert all(n <= 16 for *_, n in calls)  # one call per pulled batch, never merged
    _assert_contiguous(_per_queue(calls), {q: 100 for q in range(4)})
    assert overlaps[0] == 0 and len(threads) == 1 and next(iter(threads)).startswith("ConsumeBatchThread_")
    assert info["consumed_ok"] == 400 and info["pulled_messages"] == 400
    assert all(f.tags is None and f.stop is None and f.namespace == "" for f in decoder.filters)


def test_a_finished_batch_is_settled_while_every_pull_loop_waits_in_a_long_poll(cluster: TestCluster) -> None:
    # the consume thread never wakes the loop: its results are collected by a timer while batches
    # are in flight, so the last batches settle without waiting for a pull to return
    topic, group = "BatchSettleTopic", "g_batch_settle"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 60, per_batch=30)
    seen: list[int] = []
    release = threading.Event()

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        release.wait(20)  # finishes once the pull loops sit in long polls of 15 s
        seen.append(batch.count)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr,
                     **{**FAST, "broker_suspend_max_time": 15.0, "consumer_timeout_when_suspend": 20.0})
    c.subscribe(topic)
    c.register_batch_listener(listener, decode_message_batch)
    c.start()
    try:
        wait_until(lambda: c.stats()["pulled_messages"] == 60, 20, "every message pulled")
        release.set()
        wait_until(lambda: sum(seen) == 60, 10, "every batch through the listener")
        wait_until(lambda: c.stats()["consumed_ok"] == 60, 2, "every batch settled")
        assert c.stats()["cached_messages"] == 0
    finally:
        c.shutdown()


def test_async_batch_listener_never_concurrent_for_one_queue(cluster: TestCluster) -> None:
    topic, group = "BatchAsyncTopic", "g_batch_async"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 200, per_batch=20)
    calls: list[tuple[MessageQueue, int, int, int]] = []
    busy: set[int] = set()
    overlaps = [0]

    async def listener(batch, ctx):  # type: ignore[no-untyped-def]
        if batch.mq.queue_id in busy:
            overlaps[0] += 1
        busy.add(batch.mq.queue_id)
        await asyncio.sleep(0.002)  # yields to the loop: pulls and other queues go on
        busy.discard(batch.mq.queue_id)
        calls.append((batch.mq, batch.first_offset, batch.last_offset, batch.count))
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, decode_message_batch)
    c.start()
    try:
        wait_until(lambda: sum(n for *_, n in calls) >= 200, 20, "every message")
    finally:
        c.shutdown()
    assert overlaps[0] == 0
    _assert_contiguous(_per_queue(calls), {0: 100, 1: 100})


def test_failed_batch_goes_back_from_ack_index_and_returns_from_retry(cluster: TestCluster) -> None:
    topic, group = "BatchFailTopic", "g_batch_fail"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 6, per_batch=6)
    calls: list[tuple[str, list[int], list[int]]] = []
    lock = threading.Lock()

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        msgs = batch.messages()
        with lock:
            calls.append((msgs[0].topic, [int(m.body) for m in msgs], [m.reconsume_times for m in msgs]))
        if msgs[0].reconsume_times == 0:
            ctx.ack_index = 2  # bodies 0..2 done; 3..5 go back
            return ConsumeStatus.CONSUME_SUCCESS
        if msgs[0].reconsume_times == 1:  # the first redelivery (in one batch or several)
            raise RuntimeError("a failing batch: all of it goes back")
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, decode_message_batch)
    c.start()
    try:
        wait_until(lambda: sorted(b for _, bs, rt in calls[1:] for b, r in zip(bs, rt, strict=True) if r == 2) == [3, 4, 5],
                   30, "the failed messages back a second time")
        wait_until(lambda: cluster.committed(group, topic) == {mq: 6 for mq in cluster.queues_of(topic)}, 10,
                   "the topic's offset past every message")
        stats = c.stats()
    finally:
        c.shutdown()
    assert calls[0] == (topic, [0, 1, 2, 3, 4, 5], [0] * 6)
    # redeliveries come from %RETRY%<group> with the original topic restored by the filter
    assert {t for t, _, _ in calls[1:]} == {topic}
    assert sorted(b for _, bs, rt in calls[1:] for b, r in zip(bs, rt, strict=True) if r == 1) == [3, 4, 5]
    assert stats["consumed_failed"] == 6 and stats["sent_back"] == 6


def test_broadcasting_drops_failed_batches_and_moves_on(cluster: TestCluster, tmp_path: Any) -> None:
    topic, group = "BatchBcastTopic", "g_batch_bcast"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 5, per_batch=5)
    calls: list[int] = []

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        calls.append(batch.count)
        return ConsumeStatus.RECONSUME_LATER

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, message_model="BROADCASTING",
                     offset_store_dir=str(tmp_path), **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, decode_message_batch)
    c.start()
    try:
        wait_until(lambda: any(off == 5 for off in c.stats()["offsets"].values()), 10, "the offset moving on")
        stats = c.stats()
    finally:
        c.shutdown()
    assert calls == [5] and stats["consumed_failed"] == 5 and stats["sent_back"] == 0


def test_slow_batch_listener_is_back_pressure(cluster: TestCluster) -> None:
    topic, group = "BatchSlowTopic", "g_batch_slow"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 600, per_batch=50)
    release = threading.Event()
    calls: list[int] = []

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        calls.append(batch.count)
        release.wait(10)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, pull_threshold_for_queue=100, **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, decode_message_batch)
    c.start()
    try:
        # on a loaded machine the consume thread may take its first batch after pulls already stopped
        wait_until(lambda: c.stats()["flow_control_delays"] > 0 and calls, 20, "flow control by the cached count")
        cached = c.stats()["cached_messages"]
        assert 100 < cached <= 100 + 32 and calls == [32]  # the first batch is still running
        release.set()
        wait_until(lambda: sum(calls) == 600, 20, "everything once released")
    finally:
        release.set()
        c.shutdown()


def test_stop_offsets_and_tags_reach_the_decoder(cluster: TestCluster) -> None:
    topic, group = "BatchStopTopic", "g_batch_stop"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 40, per_batch=40, tags=lambda i: "A" if i % 2 else "B")
    decoder = Decoded()
    seen: list[int] = []

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        seen.extend(m.queue_offset for m in batch.messages())
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic, "A")
    c.register_batch_listener(listener, decoder)
    c.set_stop_offsets({cluster.queues_of(topic)[0]: 21})
    c.start()
    try:
        wait_until(lambda: len(seen) == 10, 10, "the odd offsets below 21")
        time.sleep(0.3)  # the stop offset holds: nothing beyond it arrives
    finally:
        c.shutdown()
    assert seen == list(range(1, 21, 2))
    assert {(f.stop, f.tags) for f in decoder.filters if not f.restore_retry_topic} == {(21, frozenset({"A"}))}


def test_consume_message_directly_hands_the_batch_listener_a_batch_of_one(cluster: TestCluster) -> None:
    topic, group = "BatchDirectTopic", "g_batch_direct"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1)
    got: list[MessageBatch] = []

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        got.append(batch)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, decode_message_batch)
    c.start()
    try:
        wait_until(lambda: len(got) == 1, 10, "the message by pulling")
        stored = cluster.embedded.messages(topic)[0]
        broker = cluster.embedded.brokers[0]
        resp = broker.consume_message_directly(group, c.client_id, stored.commit_log_offset)
        resp = resp.result(10) if hasattr(resp, "result") else resp
    finally:
        c.shutdown()
    assert resp.code == 0 and b"CR_SUCCESS" in (resp.body or b"")
    assert len(got) == 2 and got[1].count == 1 and got[1].messages()[0].body == stored.body


def test_registration_is_checked() -> None:
    c = AsyncPushConsumer("g_batch_reg", namesrv_addr="127.0.0.1:1")
    with pytest.raises(ConfigError, match="decoder"):
        c.register_batch_listener(lambda b, ctx: None, "not a decoder")  # type: ignore[arg-type]
    c.register_batch_listener(lambda b, ctx: None, decode_message_batch)
    with pytest.raises(ClientStateError, match="one listener"):
        c.register_listener(lambda msgs, ctx: None)


def test_message_batch_summary_and_filter() -> None:
    mq = MessageQueue("%RETRY%g", "b", 0)
    msgs = stored_messages("%RETRY%g", range(5, 9), tags="T", properties={"RETRY_TOPIC": "ns%Orig"})
    batch = decode_message_batch(b"".join(_encoded(msgs)), mq, PullFilter(8, frozenset({"T"}), True, "ns"))
    assert batch is not None
    assert (batch.first_offset, batch.last_offset, batch.count, batch.body_bytes) == (5, 7, 3, 30)
    assert {m.topic for m in batch.messages()} == {"Orig"}
    assert decode_message_batch(b"".join(_encoded(msgs)), mq, PullFilter(None, frozenset({"X"}), False, "")) is None
    with pytest.raises(ValueError, match="msgs"):
        MessageBatch(mq, [])


def _encoded(msgs: list[Any]) -> list[bytes]:
    from airflow_provider_rocketmq.client.protocol.message import encode_stored_message
    return [encode_stored_message(topic=m.topic, body=m.body, properties=m.properties, queue_id=m.queue_id,
                                  queue_offset=m.queue_offset, commit_log_offset=m.commit_log_offset,
                                  born_timestamp=1, born_host="127.0.0.1:1", store_timestamp=2,
                                  store_host="127.0.0.1:10911") for m in msgs]

