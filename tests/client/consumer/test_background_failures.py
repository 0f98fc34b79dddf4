"""Failures of background work are seen and recovered from, never silent.

* a pull loop that dies of an unexpected exception (a decoder bug) is logged, counted in
  ``stats()["background_errors"]`` and restarted: the queue keeps being consumed;
* an OSError of the local offset store while repairing an illegal offset does not leave a
  dropped queue in the table forever: the queue is taken again and consumed;
* a send-back that raises (not a broker answer: a bug) counts as a failed send-back: the
  messages are consumed again and the offset moves on, instead of being pinned forever.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

import airflow_provider_rocketmq.client.consumer.consume_concurrent as concurrent_module
import airflow_provider_rocketmq.client.consumer.pull as pull_module
from airflow_provider_rocketmq.client.consumer.config import ConsumerConfig, ConsumeStatus
from airflow_provider_rocketmq.client.consumer.consume_concurrent import ConcurrentConsumeService
from airflow_provider_rocketmq.client.consumer.lifecycle import Lifecycle
from airflow_provider_rocketmq.client.consumer.offset_store import (
    decode_offsets,
    encode_offsets,
    offsets_file_path,
)
from airflow_provider_rocketmq.client.consumer.process_queue import ProcessQueue
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.consumer.stats import ConsumeStatsTable
from airflow_provider_rocketmq.client.protocol.batch import MessageBatch, PullFilter, decode_message_batch
from airflow_provider_rocketmq.client.protocol.message import MessageExt
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_until
from .helpers import stored_messages


def test_a_crashed_pull_loop_is_logged_counted_and_restarted(
        cluster: TestCluster, caplog: pytest.LogCaptureFixture) -> None:
    topic, group = "PullCrashTopic", "g_pull_crash"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 30, per_batch=10)
    crashed = [False]
    seen: list[int] = []

    def buggy_decoder(body: bytes, mq: MessageQueue, flt: PullFilter) -> MessageBatch | None:
        if not crashed[0] and not mq.topic.startswith("%RETRY%"):
            crashed[0] = True
            raise RuntimeError("a decoder bug")  # not a MessageDecodeError: nothing expects it
        return decode_message_batch(body, mq, flt)

    def listener(batch, ctx):  # type: ignore[no-untyped-def]
        seen.extend(m.queue_offset for m in batch.messages())
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_batch_listener(listener, buggy_decoder)
    with caplog.at_level(logging.ERROR):
        c.start()
        try:
            wait_until(lambda: len(seen) == 30, 10, "the queue consumed after the crash")
            assert c.stats()["background_errors"] == 1
        finally:
            c.shutdown()
    assert sorted(seen) == list(range(30))
    assert any("crashed" in r.getMessage() and r.exc_info and "a decoder bug" in str(r.exc_info[1])
               for r in caplog.records)


def test_offset_store_oserror_while_repairing_an_illegal_offset_does_not_strand_the_queue(
        cluster: TestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pull_module, "DELAY_OFFSET_ILLEGAL", 0.05)  # Java waits 10 s
    topic, group = "IllegalLocalTopic", "g_illegal_local"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 20, per_batch=20)
    mq = cluster.queues_of(topic)[0]
    seen: list[int] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            seen.extend(m.queue_offset for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, message_model="BROADCASTING",
                     offset_store_dir=str(tmp_path), **FAST)
    path = offsets_file_path(str(tmp_path), c.client_id, group)
    path.parent.mkdir(parents=True)
    path.write_text(encode_offsets({mq: 50}))  # past the queue's end: the broker answers OFFSET_MOVED
    blocker = path.with_name(path.name + ".tmp")
    blocker.mkdir()  # the store's next write fails with an OSError (even as root)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        # the repair put the broker's correction (20) in memory; writing it to the file failed
        wait_until(lambda: 20 in c.stats()["offsets"].values(), 10, "the offset repair")
        blocker.rmdir()  # the disk recovers
        wait_until(lambda: decode_offsets(path.read_text("utf-8")) == {mq: 20}, 10, "the correction on disk")
        new = cluster.fill(topic, 5, per_batch=5)
        wait_until(lambda: len(seen) >= 5, 10, "the queue consumed again")
    finally:
        c.shutdown()
    assert len(new) == 5 and sorted(seen) == list(range(20, 25))


async def test_a_send_back_that_raises_is_retried_and_the_offset_moves_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(concurrent_module, "RESUBMIT_DELAY", 0.01)  # Java re-consumes after 5 s
    mq = MessageQueue("T", "broker-a", 0)
    msgs = stored_messages("T", range(3))
    calls: list[tuple[int, int]] = []  # (offset, reconsume_times) per listener call
    sends: list[int] = []
    committed: dict[MessageQueue, int] = {}
    settled = asyncio.Event()

    def listener(batch: list[MessageExt], ctx: Any) -> ConsumeStatus:
        calls.extend((m.queue_offset, m.reconsume_times) for m in batch)
        return ConsumeStatus.RECONSUME_LATER if batch[0].queue_offset == 1 else ConsumeStatus.CONSUME_SUCCESS

    async def send_back(m: MessageExt, delay_level: int, q: MessageQueue | None) -> bool:
        sends.append(m.queue_offset)
        if len(sends) == 1:
            raise RuntimeError("a send-back bug")
        return True

    class Offsets:
        def update_offset(self, q: MessageQueue, offset: int, increase_only: bool = True) -> None:
            committed[q] = offset
            if offset == 3:
                settled.set()

    pq = ProcessQueue()
    service = ConcurrentConsumeService(config=ConsumerConfig(consume_thread_min=1, consume_thread_max=1),
                                       group="g", listener=listener, life=Lifecycle(), offsets=Offsets(),
                                       send_back=send_back, table={mq: pq}, stats=ConsumeStatsTable())
    try:
        pq.put_messages(msgs)
        service.submit(msgs, pq, mq)
        await asyncio.wait_for(settled.wait(), 10)
    finally:
        await service.close()
    # offset 1 failed; its first send-back raised, so it was consumed again (reconsume 1), failed
    # again and was then sent back for real; the offset moved past it
    assert calls[:3] == [(0, 0), (1, 0), (2, 0)] and (1, 1) in calls[3:]
    assert sends == [1, 1] and committed[mq] == 3
