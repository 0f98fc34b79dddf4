"""A topic grows from 8 to 16 queues (``mqadmin updateTopic -r 16 -w 16``, here UPDATE_AND_CREATE_TOPIC with
more queues) between two windows, during a window, and while a push consumer group runs: every message
written to the new queues, before and after the expansion, is staged or consumed exactly once.

A real broker answers QUERY_CONSUMER_OFFSET of a never-committed queue with 0 while the queue's first
message is in its memory, so here the new queues start at 0 whatever the client decides; the embedded
tests (tests/window/test_topic_growth.py, tests/client/consumer/test_topic_growth.py) cover the broker that
answers "no offset" (the client's own rule: a queue added to a topic the group consumes starts at its
minimum offset).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import ConsumeStatus, Message, MessageQueue, PushConsumer
from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere, ConsumerConfig

from .backends import IntegrationCluster, wait_until
from .helpers import consumer_config, stop_consumers

pytestmark = pytest.mark.timeout(300)
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET


def produce(cluster: IntegrationCluster, topic: str, per_queue: int, queues: range, tag: str) -> list[bytes]:
    """``per_queue`` messages into each queue of ``queues`` (of the first broker), once the broker's
    high-water marks show them; their bodies. (A real broker acknowledges a send when its commit log holds
    it and dispatches it to the queue's index a moment later: only then does GET_MAX_OFFSET count it.)"""
    broker = cluster.queues(topic)[0].broker_name
    sent: list[bytes] = []
    ends: dict[MessageQueue, int] = {}
    with cluster.producer() as producer:
        for q in queues:
            batch = [Message(topic, f"{tag}-{q}-{i}".encode()) for i in range(per_queue)]
            result = producer.send_batch(batch, queue=MessageQueue(topic, broker, q))
            ends[result.queue] = result.queue_offset + len(batch)
            sent += [m.body for m in batch]

    def dispatched() -> bool:
        marks = cluster.admin.high_water_marks(topic)
        return all(marks.get(mq, 0) >= end for mq, end in ends.items())

    wait_until(dispatched, 30, f"the high-water marks of {topic} past the messages sent")
    return sent


def grow(cluster: IntegrationCluster, topic: str, queues: int = 16) -> None:
    cluster.admin.create_topic(topic, queues=queues)
    wait_until(lambda: len(cluster.admin.high_water_marks(topic)) == queues, 30, f"route of {topic} with {queues} queues")


def window(cluster: IntegrationCluster, topic: str, group: str, staging: Path, admin: Any | None = None) -> list[bytes]:
    """One consumed window of ``group`` (reading from the last offset when new); the bodies it staged."""
    import pyarrow.parquet as pq

    from airflow_provider_rocketmq.window.manifest import read_manifest
    from airflow_provider_rocketmq.window.runner import (
        WINDOW_CONSUMER_DEFAULTS,
        Listener,
        WindowSpec,
        register_window_listener,
        run_window,
    )

    config = ConsumerConfig(namesrv_addr=cluster.namesrv_addr, **WINDOW_CONSUMER_DEFAULTS, enable_offset_commit=False,
                            consume_from_where=LAST, poll_name_server_interval=1.0, rebalance_interval=0.5)

    def factory(listener: Listener) -> Any:
        consumer = PushConsumer(group, config)
        consumer.subscribe(topic, "*")
        register_window_listener(consumer, listener)
        return consumer

    spec = WindowSpec(topic=topic, consumer_group=group, staging_dir=str(staging), assignment_timeout=60,
                      idle_timeout=60, consume_from_where=LAST)
    result = run_window(spec, admin if admin is not None else cluster.admin, factory)
    manifest = read_manifest(result.manifest)
    base = Path(result.manifest).parent
    return [row["body"] for f in manifest.files for row in pq.read_table(base / f.path).to_pylist()]


def committed(cluster: IntegrationCluster, topic: str, group: str) -> dict[int, int]:
    return {mq.queue_id: cluster.admin.committed_offset(group, mq) for mq in cluster.queues(topic)}


def seed(cluster: IntegrationCluster, topic: str, group: str, tmp_path: Path) -> list[bytes]:
    """The group's first window over 3 messages per queue. A broker answers 0 for the never-committed
    queues of a new group while their first message is in memory (a real one here: they are staged),
    else the window reads from the last offset (nothing staged); either way it commits its high-water
    marks, and from then on the group consumes the topic."""
    produce(cluster, topic, 3, range(8), "first")
    staged = window(cluster, topic, group, tmp_path / "w0")
    assert set(committed(cluster, topic, group).values()) == {3}
    return staged


def test_queues_added_between_two_windows(cluster: IntegrationCluster, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    topic, group = cluster.new_topic("grow_between", queues=8), cluster.new_group("grow_between")
    staged = seed(cluster, topic, group, tmp_path)
    sent = produce(cluster, topic, 5, range(8), "old")
    grow(cluster, topic)
    sent += produce(cluster, topic, 4, range(16), "grown")
    staged += window(cluster, topic, group, tmp_path / "w1")
    staged += window(cluster, topic, group, tmp_path / "w2")
    assert Counter(b for b in staged if not b.startswith(b"first-")) == Counter(sent)  # each once
    assert max(Counter(staged).values()) == 1
    assert {q: off for q, off in committed(cluster, topic, group).items() if q >= 8} == {q: 4 for q in range(8, 16)}


class GrowAfterSnapshot:
    """The window's admin: right after the high-water marks were read, the topic grows and messages
    arrive in every queue (the expansion happens during the window)."""

    def __init__(self, cluster: IntegrationCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.sent: list[bytes] = []

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        marks = self.cluster.admin.high_water_marks(topic)
        grow(self.cluster, self.topic)
        self.sent = produce(self.cluster, self.topic, 4, range(16), "during")
        return marks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster.admin, name)


def test_queues_added_during_a_window_are_taken_by_the_next_one(cluster: IntegrationCluster, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    topic, group = cluster.new_topic("grow_during", queues=8), cluster.new_group("grow_during")
    seed(cluster, topic, group, tmp_path)
    before = produce(cluster, topic, 5, range(8), "old")
    growing = GrowAfterSnapshot(cluster, topic)
    first = window(cluster, topic, group, tmp_path / "w1", growing)
    assert Counter(first) == Counter(before)  # its snapshot's 8 queues up to their marks, nothing of the new ones
    second = window(cluster, topic, group, tmp_path / "w2")
    assert Counter(first + second) == Counter(before + growing.sent)


def test_queues_added_while_a_push_group_runs(cluster: IntegrationCluster) -> None:
    topic, group = cluster.new_topic("grow_push", queues=8), cluster.new_group("grow_push")
    got: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        with lock:
            got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    members = []
    for _ in range(2):
        member = PushConsumer(group, consumer_config(cluster, consume_from_where=LAST, poll_name_server_interval=1.0,
                                                     rebalance_interval=0.5))
        member.subscribe(topic, "*")
        member.register_listener(listener)
        member.start()
        members.append(member)
    try:
        wait_until(lambda: sum(len(m.assigned_queues()) for m in members) == 8, 60, "8 queues shared")
        sent = produce(cluster, topic, 5, range(8), "old")
        wait_until(lambda: len(got) >= len(sent), 60, "the messages of the 8 queues")
        grow(cluster, topic)
        sent += produce(cluster, topic, 4, range(16), "grown")  # before the members noticed the new queues
        wait_until(lambda: len(got) >= len(sent), 90, "every message, the new queues' first ones included")
        wait_until(lambda: sum(len(m.assigned_queues()) for m in members) == 16, 60, "16 queues shared")
    finally:
        stop_consumers(*members)
    with lock:
        assert Counter(got) == Counter(sent)
    assert {q: off for q, off in committed(cluster, topic, group).items() if q >= 8} == {q: 4 for q in range(8, 16)}
