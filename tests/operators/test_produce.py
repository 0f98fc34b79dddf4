"""RocketMQProduceOperator's pipelined sends against the embedded broker: order per key, the summary
counted from one result per message, and a failure in the middle of the stream."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_rocketmq.client import ClientConfig, Producer
from airflow_provider_rocketmq.client.protocol.errors import BrokerError, ConfigError
from airflow_provider_rocketmq.client.protocol.send_wire import select_by_key
from airflow_provider_rocketmq.embedded import EmbeddedCluster
from airflow_provider_rocketmq.operators.produce import RocketMQProduceOperator

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(embedded_cluster: EmbeddedCluster, airflow_conn: Any) -> Iterator[EmbeddedCluster]:
    with airflow_conn("rocketmq_default", host=embedded_cluster.namesrv_addr):
        yield embedded_cluster


def test_keyed_items_are_stored_in_the_order_yielded_and_counted(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("op_keys", 4)
    keys = [f"account-{i}" for i in range(5)]

    def events() -> Iterator[Any]:
        for i in range(1000):
            key = keys[i % 5]
            yield (f"{key}:{i // 5:03d}", "Ev", None, {"i": str(i)}, key)

    out = RocketMQProduceOperator(task_id="p", topic="op_keys", producer_function=events, max_in_flight=8,
                                  max_batch=16).execute({})
    assert out["messages"] == 1000 and out["status"] == {"SEND_OK": 1000} and sum(out["queues"].values()) == 1000
    assert out["bytes"] == sum(len(f"{keys[i % 5]}:{i // 5:03d}") for i in range(1000))
    assert 1000 / 16 <= out["requests"] < 1000  # batched, each message still counted on its own
    assert out["first"]["msg_id"] and out["last"]["queue_offset"] >= 0
    with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr)) as p:
        queues = p.publish_queues("op_keys")
    per_queue: dict[int, list[str]] = defaultdict(list)
    for m in sorted(cluster.messages("op_keys"), key=lambda m: (m.queue_id, m.queue_offset)):
        per_queue[m.queue_id].append(m.body.decode())
    for key in keys:
        mine = [b for b in per_queue[select_by_key(queues, key).queue_id] if b.startswith(key + ":")]
        assert mine == [f"{key}:{n:03d}" for n in range(200)]
    first = next(m for m in cluster.messages("op_keys") if m.msg_id == out["first"]["msg_id"])
    assert first.body == b"account-0:000" and first.tags == "Ev" and first.properties["i"] == "0"
    # counted per message, though read from one result per request: what the broker holds
    assert out["queues"] == dict(Counter(f"{m.broker_name}/{m.queue_id}" for m in cluster.messages("op_keys")))
    last = next(m for m in cluster.messages("op_keys") if m.msg_id == out["last"]["msg_id"])
    assert last.body == b"account-4:199" and (last.queue_id, last.queue_offset) == (
        out["last"]["queue_id"], out["last"]["queue_offset"])


def test_unkeyed_rows_summary_is_what_the_broker_stored(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("op_rows", 4)
    out = RocketMQProduceOperator(task_id="p", topic="op_rows", producer_function=lambda: (f"r{i}" for i in range(700)),
                                  max_in_flight=4, max_batch=32).execute({})
    stored = cluster.messages("op_rows")
    assert out["messages"] == len(stored) == 700 and out["status"] == {"SEND_OK": 700}
    assert out["queues"] == dict(Counter(f"{m.broker_name}/{m.queue_id}" for m in stored))
    assert out["bytes"] == sum(len(m.body) for m in stored) and 700 / 32 <= out["requests"] < 700
    by_id = {m.msg_id: m for m in stored}
    assert by_id[out["first"]["msg_id"]].body == b"r0" and by_id[out["last"]["msg_id"]].body == b"r699"
    assert by_id[out["last"]["msg_id"]].queue_offset == out["last"]["queue_offset"]


def test_a_failure_mid_stream_fails_the_task_and_says_how_many_were_sent(
        cluster: EmbeddedCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.create_topic("op_fail", 4)
    cluster.brokers[0].settings.max_message_size = 5000  # a broker with a smaller maxMessageSize

    def rows() -> Iterator[Any]:
        for i in range(3000):
            yield os.urandom(6000) if i == 1500 else f"row-{i}"  # refused: MESSAGE_ILLEGAL, not retried

    op = RocketMQProduceOperator(task_id="p", topic="op_fail", producer_function=rows, max_in_flight=16)
    with pytest.raises(BrokerError) as info:
        op.execute({})
    assert info.value.code == 13
    stored = cluster.messages("op_fail")
    bodies = {m.body for m in stored}
    assert {f"row-{i}".encode() for i in range(1500)} <= bodies  # everything before the refused one
    assert len(stored) < 2999  # nothing after the in-flight ones
    log = capsys.readouterr().out  # the task log (Airflow's structured logger writes to stdout here)
    assert f"{len(stored)} message(s) sent to op_fail before the failure, 1 failed, " in log


def test_bad_pipeline_settings_fail_when_the_dag_is_parsed() -> None:
    for kwargs, field in (({"max_in_flight": 0}, "max_in_flight"), ({"max_batch": 5000}, "max_batch"),
                          ({"max_in_flight": "64"}, "max_in_flight")):
        with pytest.raises(ConfigError) as info:
            RocketMQProduceOperator(task_id="p", topic="t", producer_function=list, **kwargs)
        assert info.value.field == field


def test_a_bad_key_names_the_item(cluster: EmbeddedCluster) -> None:
    def bad() -> Iterator[Any]:
        yield ("fine", None, None, None, "k")
        yield ("body", None, None, None, 42)

    with pytest.raises(ConfigError) as info:
        RocketMQProduceOperator(task_id="p", topic="op_badkey", producer_function=bad).execute({})
    assert info.value.field == "producer_function[1].key"
    assert [m.body for m in cluster.messages("op_badkey")] == [b"fine"]
