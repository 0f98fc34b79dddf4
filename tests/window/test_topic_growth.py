"""Windows over a topic that grows from 8 to 16 queues (``mqadmin updateTopic -r 16 -w 16``), against the
embedded broker: every message written to the new queues, before and after the expansion, is staged by
exactly one window.

The broker answers "no offset" for a queue the group never committed (``first-on-disk``: what a real broker
does once the queue's first message left its memory), and the group reads from the last offset: the case
where a queue added to the topic would otherwise start at its end and lose what was written to it first.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_rocketmq.client import (
    Admin,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere, ConsumerConfig
from airflow_provider_rocketmq.embedded import EmbeddedCluster, OffsetFaults
from airflow_provider_rocketmq.window.manifest import read_manifest
from airflow_provider_rocketmq.window.runner import (
    WINDOW_CONSUMER_DEFAULTS,
    Listener,
    WindowResult,
    WindowSpec,
    register_window_listener,
    run_window,
)
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window

pytestmark = pytest.mark.timeout(180)
TOPIC, GROUP = "Grows", "g_grows"
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET


@pytest.fixture
def cluster(embedded_cluster_factory: Any) -> EmbeddedCluster:
    c: EmbeddedCluster = embedded_cluster_factory(queues=8)
    c.create_topic(TOPIC, 8)
    c.set_offset_faults(OffsetFaults(first_on_disk=True))
    return c


def produce(namesrv: str, per_queue: int, queues: int, tag: str) -> set[bytes]:
    """``per_queue`` messages into each of the first ``queues`` queues; their bodies."""
    sent: set[bytes] = set()
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for q in range(queues):
            batch = [Message(TOPIC, f"{tag}-{q}-{i}".encode()) for i in range(per_queue)]
            producer.send_batch(batch, queue=MessageQueue(TOPIC, "broker-a", q))
            sent |= {m.body for m in batch}
    return sent


def grow(namesrv: str, queues: int = 16) -> None:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic(TOPIC, queues)  # UPDATE_AND_CREATE_TOPIC with more queues, as mqadmin updateTopic


def window(namesrv: str, staging: Path, admin: Any | None = None) -> WindowResult:
    config = ConsumerConfig(namesrv_addr=namesrv, **WINDOW_CONSUMER_DEFAULTS, enable_offset_commit=False,
                            consume_from_where=LAST, poll_name_server_interval=1.0, rebalance_interval=0.5)

    def factory(listener: Listener) -> Any:
        consumer = PushConsumer(GROUP, config)
        consumer.subscribe(TOPIC, "*")
        register_window_listener(consumer, listener)
        return consumer

    spec = WindowSpec(topic=TOPIC, consumer_group=GROUP, staging_dir=str(staging), assignment_timeout=30,
                      idle_timeout=30, consume_from_where=LAST)
    if admin is not None:
        return run_window(spec, admin, factory)
    with Admin(ClientConfig(namesrv_addr=namesrv)) as own:
        return run_window(spec, own, factory)


def staged(result: WindowResult) -> list[bytes]:
    manifest = read_manifest(result.manifest)
    base = Path(result.manifest).parent
    return [row["body"] for f in manifest.files for row in pq.read_table(base / f.path).to_pylist()]


def committed(namesrv: str) -> dict[int, int]:
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        return {mq.queue_id: admin.committed_offset(GROUP, mq) for mq in admin.topic_queues(TOPIC)}


def seed(namesrv: str, tmp_path: Path) -> None:
    """The group's first window: it reads from the last offset, so it stages nothing but commits the
    high-water marks of the 8 queues (the group now consumes the topic)."""
    produce(namesrv, 3, 8, "before-group")
    first = window(namesrv, tmp_path / "w0")
    assert first.messages == 0 and set(committed(namesrv).values()) == {3}


def test_queues_added_between_two_windows(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    ns = cluster.namesrv_addr
    seed(ns, tmp_path)
    sent = produce(ns, 5, 8, "old")
    grow(ns)
    sent |= produce(ns, 4, 16, "grown")  # the 8 new queues get their first messages
    result = window(ns, tmp_path / "w1")
    assert Counter(staged(result)) == Counter(sent)  # all of them, each once, none of the seed
    assert {q: off for q, off in committed(ns).items() if q >= 8} == {q: 4 for q in range(8, 16)}
    again = window(ns, tmp_path / "w2")
    assert again.messages == 0


class GrowAfterSnapshot:
    """The window's admin: right after the high-water marks were read, the topic grows and messages
    arrive in every queue (the expansion happens during the window)."""

    def __init__(self, admin: Admin, namesrv: str) -> None:
        self.admin, self.namesrv = admin, namesrv
        self.sent: set[bytes] = set()

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        marks = self.admin.high_water_marks(topic)
        grow(self.namesrv)
        self.sent = produce(self.namesrv, 4, 16, "during")
        return marks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)


def test_queues_added_during_a_window_are_taken_by_the_next_one(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    ns = cluster.namesrv_addr
    seed(ns, tmp_path)
    before = produce(ns, 5, 8, "old")
    with Admin(ClientConfig(namesrv_addr=ns)) as admin:
        growing = GrowAfterSnapshot(admin, ns)
        first = window(ns, tmp_path / "w1", growing)
    # the window holds what its 8 queues had at its snapshot; the new queues are not in its manifest
    assert Counter(staged(first)) == Counter(before)
    assert {q.queue_id for q in read_manifest(first.manifest).queues} == set(range(8))
    second = window(ns, tmp_path / "w2")
    assert Counter(staged(second)) == Counter(growing.sent)  # the rest: new queues from their first message
    assert Counter(staged(first) + staged(second)) == Counter(before | growing.sent)


def test_the_offsets_handoff_starts_added_queues_at_their_min_offset(cluster: EmbeddedCluster,
                                                                     tmp_path: Path) -> None:
    ns = cluster.namesrv_addr
    seed(ns, tmp_path)
    produce(ns, 5, 8, "old")
    grow(ns)
    produce(ns, 4, 16, "grown")
    with Admin(ClientConfig(namesrv_addr=ns)) as admin:
        result = snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "o1"), consume_from_where=LAST), admin)
        fresh = snapshot_window(OffsetsWindow(TOPIC, "g_fresh", str(tmp_path / "o2"), consume_from_where=LAST), admin)
    ranges = {q.queue_id: (q.start_offset, q.end_offset) for q in read_manifest(result.manifest).queues}
    assert ranges == {**{q: (3, 12) for q in range(8)}, **{q: (0, 4) for q in range(8, 16)}}
    # a group that never consumed the topic reads from the last offset, old queues and new ones alike
    assert fresh.messages == 0
