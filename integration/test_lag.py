"""Lag figures (admin API and CLI) against the broker's own consume stats."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .backends import IntegrationCluster, wait_until
from .helpers import (
    Collector,
    airflow_connection_env,
    produce,
    run_cli,
    start_consumer,
    stop_consumers,
    wait_offsets_committed,
)

TIMEOUT = 60.0


def _lagging_group(cluster: IntegrationCluster) -> tuple[str, str, int]:
    """A group that consumed 40 messages, then fell behind by 25 new ones and one rewound queue."""
    topic = cluster.new_topic("lag", queues=4)
    group = cluster.new_group("lag")
    collector = Collector()
    with cluster.producer() as producer:
        produce(producer, topic, range(40))
        consumer = start_consumer(cluster, group, topic, collector.listener("c1"))
        try:
            collector.wait_for_seqs(range(40), TIMEOUT)
        finally:
            stop_consumers(consumer)
        wait_offsets_committed(cluster, group, topic)
        produce(producer, topic, range(40, 65))
    # rewind one queue by 3 so that the per-queue lags differ
    first = cluster.queues(topic)[0]
    committed = cluster.admin.committed_offset(group, first)
    assert committed >= 3
    cluster.admin.update_consumer_offset(group, first, committed - 3)
    wait_until(lambda: cluster.admin.committed_offset(group, first) == committed - 3, TIMEOUT, "rewind")
    return topic, group, 25 + 3


def test_lag_equals_the_brokers_consume_stats(cluster: IntegrationCluster) -> None:
    topic, group, expected = _lagging_group(cluster)
    admin = cluster.admin

    stats = admin.consume_stats(group, topic)
    broker_rows = {mq: w for mq, w in stats.offset_table.items() if mq.topic == topic}
    assert set(broker_rows) == set(cluster.queues(topic))
    assert sum(w.broker_offset - w.consumer_offset for w in broker_rows.values()) == expected

    snapshot = admin.lag(group, topic)
    assert snapshot.total_lag == expected
    rows = {(q.topic, q.broker, q.queue_id): q for q in snapshot.queues}
    assert len(rows) == len(broker_rows)
    for mq, w in broker_rows.items():
        row = rows[(mq.topic, mq.broker_name, mq.queue_id)]
        assert (row.broker_offset, row.consumer_offset, row.lag) == (
            w.broker_offset, w.consumer_offset, w.broker_offset - w.consumer_offset), mq
    # the high-water marks agree with the broker's offsets too
    for mq, end in admin.high_water_marks(topic).items():
        assert broker_rows[mq].broker_offset == end


def test_cli_lag_reports_the_same_figures(cluster: IntegrationCluster) -> None:
    topic, group, expected = _lagging_group(cluster)
    proc = run_cli("lag", "--namesrv", cluster.namesrv_addr, "--group", group, "--topic", topic, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["total_lag"] == expected
    per_queue = {(q["broker"], q["queue_id"]): q["lag"] for q in report["queues"]}
    stats = cluster.admin.consume_stats(group, topic)
    assert per_queue == {(mq.broker_name, mq.queue_id): w.broker_offset - w.consumer_offset
                         for mq, w in stats.offset_table.items() if mq.topic == topic}



def test_lag_sensor_pokes_on_the_same_figures(cluster: IntegrationCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("airflow")
    from airflow_provider_rocketmq.sensors.lag import RocketMQLagSensor

    topic, group, expected = _lagging_group(cluster)
    monkeypatch.setenv(*airflow_connection_env(cluster, "rocketmq_integration"))

    def poke(min_lag: int) -> Any:
        sensor = RocketMQLagSensor(task_id="lag", topic=topic, consumer_group=group, min_lag=min_lag,
                                   rocketmq_conn_id="rocketmq_integration")
        return sensor.poke({})

    met = poke(expected)
    assert met.is_done and met.xcom_value["total_lag"] == expected
    assert not poke(expected + 1).is_done
