"""The offsets hand-off against the embedded broker: [committed, high-water) per queue, nothing
consumed; the manifest's handoff field and its invariants."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.window.manifest import (
    FileEntry,
    ManifestError,
    QueueRange,
    WindowManifest,
    read_manifest,
    write_manifest,
)
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, cap_ranges, snapshot_window

TOPIC, GROUP = "SnapT", "snap_group"


@pytest.fixture
def cluster(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> EmbeddedCluster:
    c = embedded_cluster_factory(brokers=2, queues=2)
    c.create_topic(TOPIC, 2)
    with Producer(ClientConfig(namesrv_addr=c.namesrv_addr), group="snap_p") as producer:
        for i, mq in enumerate(producer.publish_queues(TOPIC)):  # 10, 20, 30, 40 messages
            producer.send_batch([Message(TOPIC, f"m{i}-{j}".encode()) for j in range(10 * (i + 1))], queue=mq)
    return c


def _ranges(manifest: WindowManifest) -> dict[tuple[str, int], tuple[int, int, int]]:
    return {(q.broker, q.queue_id): (q.start_offset, q.end_offset, q.high_water) for q in manifest.queues}


def test_snapshot_reads_committed_offsets_and_consumes_nothing(cluster: EmbeddedCluster, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as admin:
        admin.update_consumer_offset(GROUP, MessageQueue(TOPIC, "broker-a", 1), 15)
        admin.update_consumer_offset(GROUP, MessageQueue(TOPIC, "broker-b", 0), 5)
        cluster.broker("broker-b").store.delete_before(TOPIC, 0, 12)  # retention passed the committed 5
        spec = OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w"), window_id="w1", expression="TagA")
        with caplog.at_level(logging.WARNING):
            result = snapshot_window(spec, admin, namesrv=cluster.namesrv_addr)
        manifest = read_manifest(result.manifest)
        assert manifest.handoff == "offsets" and manifest.files == [] and manifest.messages == 0
        assert (manifest.window_id, manifest.expression, manifest.namesrv) == ("w1", "TagA", cluster.namesrv_addr)
        assert _ranges(manifest) == {("broker-a", 0): (0, 10, 10), ("broker-a", 1): (15, 20, 20),
                                     ("broker-b", 0): (12, 30, 30), ("broker-b", 1): (0, 40, 40)}
        assert result.messages == 10 + 5 + 18 + 40 and result.bytes == 0
        assert any("below the queue's min offset 12" in r.getMessage() for r in caplog.records)
        # nothing consumed, nothing committed by the snapshot
        assert cluster.committed_offsets(GROUP, TOPIC)[("broker-a", 0)] in (-1, 0)
        assert admin.committed_offset(GROUP, MessageQueue(TOPIC, "broker-a", 1)) == 15

        # a re-run returns the same window even though the topic grew meanwhile
        with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr), group="snap_p") as producer:
            producer.send(Message(TOPIC, b"late"), queue=MessageQueue(TOPIC, "broker-a", 0))
        again = snapshot_window(spec, admin)
        assert again.reused and again.manifest == result.manifest and again.messages == result.messages
        assert _ranges(read_manifest(again.manifest)) == _ranges(manifest)
        with pytest.raises(ManifestError, match="belongs to window 'w1'"):
            snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w"), window_id="w2"), admin)


def test_new_group_start_and_max_messages(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    # like a real broker, the embedded one answers a group without offsets with 0 while the queue still
    # starts at 0 (consumers then read from the start whatever consume_from_where says), and with
    # QUERY_NOT_FOUND once retention moved the min offset: only then does consume_from_where decide
    cluster.broker("broker-b").store.delete_before(TOPIC, 0, 12)
    with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as admin:
        last = snapshot_window(OffsetsWindow(TOPIC, "fresh", str(tmp_path / "last"),
                                             consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET), admin)
        assert _ranges(read_manifest(last.manifest)) == {("broker-a", 0): (0, 10, 10), ("broker-a", 1): (0, 20, 20),
                                                         ("broker-b", 0): (30, 30, 30), ("broker-b", 1): (0, 40, 40)}
        first = snapshot_window(OffsetsWindow(TOPIC, "fresh", str(tmp_path / "first")), admin)
        assert _ranges(read_manifest(first.manifest))[("broker-b", 0)] == (12, 30, 30)
        capped = snapshot_window(OffsetsWindow(TOPIC, "fresh", str(tmp_path / "cap"), max_messages=25), admin)
        ranges = _ranges(read_manifest(capped.manifest))
        assert capped.messages == sum(e - s for s, e, _ in ranges.values()) <= 25
        assert all(e - s >= 1 for s, e, _ in ranges.values())  # every queue moves


def test_cap_ranges_is_proportional_and_within_budget() -> None:
    assert cap_ranges([(0, 10), (5, 5), (0, 90)], None) == [(0, 10), (5, 5), (0, 90)]
    assert cap_ranges([(0, 10), (5, 5), (0, 90)], 50) == [(0, 5), (5, 5), (0, 45)]
    assert cap_ranges([(0, 1), (0, 1), (0, 1)], 2) == [(0, 1), (0, 1), (0, 0)]
    with pytest.raises(ConfigError, match="max_messages"):
        OffsetsWindow(TOPIC, GROUP, "d", max_messages=0).validate()


def test_handoff_field_and_its_invariants(tmp_path: Path) -> None:
    offsets = WindowManifest(window_id="w", topic="T", consumer_group="G", handoff="offsets",
                             queues=[QueueRange("broker-a", 0, 3, 9, 9, 0)])
    path = write_manifest(offsets, tmp_path)
    assert json.loads(path.read_text())["handoff"] == "offsets"
    assert read_manifest(path).handoff == "offsets"
    # a manifest written before the field existed is a staging one
    data = json.loads(path.read_text())
    del data["handoff"]
    path.write_text(json.dumps(data))
    assert read_manifest(path).handoff == "staging"
    bad = [WindowManifest(window_id="w", topic="T", consumer_group="G", handoff="s3"),
           WindowManifest(window_id="w", topic="T", consumer_group="G", handoff="offsets",
                          files=[FileEntry("f.parquet", 0, 1, "0" * 64)])]
    for manifest in bad:
        with pytest.raises(ManifestError) as info:
            write_manifest(manifest, tmp_path / "bad")
        assert info.value.field == "handoff"
