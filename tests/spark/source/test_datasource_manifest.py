"""An offsets window read through the data source's reader classes (driver and task sides called
directly, no JVM): the manifest's ranges and tag expression, and where the Spark job finds the
brokers and credentials."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_rocketmq.client import Admin, ClientConfig, Message, Producer
from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.spark.load.handoff import offsets_source_options
from airflow_provider_rocketmq.spark.source.datasource import RocketMQBatchReader
from airflow_provider_rocketmq.spark.source.options import parse_options
from airflow_provider_rocketmq.window.manifest import WindowManifest
from airflow_provider_rocketmq.window.snapshot import OffsetsWindow, snapshot_window

TOPIC, GROUP = "ManT", "man_group"


def test_reader_reads_exactly_the_manifest_with_its_expression(
        embedded_cluster_factory: Callable[..., EmbeddedCluster], tmp_path: Path) -> None:
    cluster = embedded_cluster_factory(brokers=2, queues=2)
    cluster.create_topic(TOPIC, 2)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv_addr)
    with Producer(cfg, group="man_p") as producer:
        for mq in producer.publish_queues(TOPIC):
            producer.send_batch([Message(TOPIC, f"{mq.broker_name}/{mq.queue_id}/{i}".encode(),
                                         tags="A" if i % 3 else "B") for i in range(30)], queue=mq)
    with Admin(cfg) as admin:
        admin.update_consumer_offset(GROUP, MessageQueue(TOPIC, "broker-a", 1), 12)
        window = snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w"), expression="A"), admin,
                                 namesrv=cluster.namesrv_addr)
    with Producer(cfg, group="man_p") as producer:  # after the snapshot: not in the window
        producer.send(Message(TOPIC, b"late", tags="A"), queue=MessageQueue(TOPIC, "broker-a", 0))

    reader = RocketMQBatchReader(parse_options({"namesrv": cluster.namesrv_addr, "manifest": window.manifest,
                                                "minPartitions": "6"}))
    assert reader.opts.expression == "A"  # the window's expression, resolved before the reader is pickled
    parts = reader.partitions()
    spans = sorted(p.span for p in parts)  # type: ignore[attr-defined]
    assert len(spans) >= 6 and sum(s.size for s in spans) == 30 * 4 - 12
    rows = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    expected = sorted((b, q, i) for b in ("broker-a", "broker-b") for q in (0, 1) for i in range(30)
                      if i % 3 and not (b == "broker-a" and q == 1 and i < 12))
    assert sorted((r["broker"], r["queue_id"], r["queue_offset"]) for r in rows) == expected
    assert {r["body"] for r in rows} == {f"{b}/{q}/{i}".encode() for b, q, i in expected}
    # an explicit expression overrides the window's
    everything = RocketMQBatchReader(parse_options({"namesrv": cluster.namesrv_addr, "manifest": window.manifest,
                                                    "expression": "*"}))
    assert sum(b.num_rows for p in everything.partitions() for b in everything.read(p)) == 30 * 4 - 12


def test_offsets_source_options_from_manifest_and_environment(tmp_path: Path) -> None:
    manifest = WindowManifest(window_id="w", topic="T", consumer_group="G", namesrv="10.0.0.1:9876",
                              handoff="offsets")
    assert offsets_source_options("/m.json", manifest, {}) == {
        "namesrv": "10.0.0.1:9876", "manifest": "/m.json", "namespace": ""}
    env = {"NAMESRV_ADDR": "spark-side:9876", "ROCKETMQ_ACCESS_KEY": "ak", "ROCKETMQ_SECRET_KEY": "sk",
           "ROCKETMQ_NAMESPACE": "prod"}
    assert offsets_source_options("/m.json", manifest, env) == {
        "namesrv": "spark-side:9876", "manifest": "/m.json", "namespace": "prod", "accessKey": "ak", "secretKey": "sk"}
    with pytest.raises(ConfigError) as info:
        offsets_source_options("/m.json", manifest, {"ROCKETMQ_ACCESS_KEY": "ak-only-value"})
    assert info.value.field == "ROCKETMQ_SECRET_KEY" and "ak-only-value" not in str(info.value)
    staged = WindowManifest(window_id="w", topic="T", consumer_group="G", namesrv="n:1")
    with pytest.raises(ConfigError, match="is a staging manifest"):
        offsets_source_options("/m.json", staged, {})
    with pytest.raises(ConfigError) as info:
        offsets_source_options("/m.json", WindowManifest(window_id="w", topic="T", consumer_group="G",
                                                         handoff="offsets"), {})
    assert info.value.field == "NAMESRV_ADDR"


def test_manifest_topic_must_match(embedded_cluster_factory: Callable[..., EmbeddedCluster], tmp_path: Path) -> None:
    cluster = embedded_cluster_factory(queues=1)
    cluster.create_topic(TOPIC, 1)
    with Admin(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as admin:
        window = snapshot_window(OffsetsWindow(TOPIC, GROUP, str(tmp_path / "w")), admin)
    reader = RocketMQBatchReader(parse_options({"namesrv": cluster.namesrv_addr, "manifest": window.manifest,
                                                "topic": "Other"}))
    with pytest.raises(ConfigError, match="differs from the manifest's topic 'ManT'"):
        reader.partitions()
