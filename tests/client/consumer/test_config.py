"""ConsumerConfig: Java defaults, checkConfig ranges, clear errors naming the knob."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.consumer.client_handlers import parse_reset_body
from airflow_provider_rocketmq.client.consumer.config import (
    ConsumeFromWhere,
    ConsumerConfig,
    MessageModel,
)
from airflow_provider_rocketmq.client.consumer.core import check_group
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.consumer.subscription import build_subscription
from airflow_provider_rocketmq.client.protocol.errors import ConfigError, ProtocolError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue


def test_java_defaults():
    c = ConsumerConfig()
    c.validate()
    assert (c.message_model, c.consume_from_where) == (MessageModel.CLUSTERING,
                                                       ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    assert (c.consume_thread_min, c.consume_thread_max, c.pull_threshold_for_queue) == (20, 20, 1000)
    assert (c.pull_threshold_size_for_queue, c.pull_threshold_for_topic, c.pull_threshold_size_for_topic) == \
        (100, -1, -1)
    assert (c.consume_concurrently_max_span, c.pull_batch_size, c.consume_message_batch_max_size) == (2000, 32, 1)
    assert (c.consume_timeout, c.persist_consumer_offset_interval, c.heartbeat_broker_interval) == \
        (900.0, 5.0, 30.0)
    assert (c.rebalance_interval, c.poll_name_server_interval, c.max_reconsume_times) == (20.0, 30.0, -1)
    assert c.enable_offset_commit is True and c.post_subscription_when_pull is False


@pytest.mark.parametrize("knob,value,needle", [
    ("consume_thread_min", 0, "[1, 1000]"),
    ("consume_thread_max", 1001, "[1, 1000]"),
    ("pull_threshold_for_queue", 65536, "[1, 65535]"),
    ("pull_threshold_size_for_queue", 0, "[1, 1024]"),
    ("pull_threshold_for_topic", 0, "-1 (off) or [1, 6553500]"),
    ("pull_threshold_size_for_topic", 102401, "-1 (off) or [1, 102400]"),
    ("consume_concurrently_max_span", 0, "[1, 65535]"),
    ("pull_batch_size", 1025, "[1, 1024]"),
    ("consume_message_batch_max_size", 0, "[1, 1024]"),
    ("pull_interval", -1, "[0, 65.535]"),
    ("consume_timestamp", "2024-01-01", "yyyyMMddHHmmss"),
    ("message_model", "CLUSTER", "CLUSTERING, BROADCASTING"),
    ("consume_from_where", "nowhere", "CONSUME_FROM_LAST_OFFSET"),
    ("allocate_strategy", "random", "unknown strategy"),
    ("enable_offset_commit", "yes", "true or false"),
])
def test_invalid_values_name_the_knob_and_range(knob, value, needle):
    with pytest.raises(ConfigError) as err:
        ConsumerConfig(**{knob: value}).validate()
    assert err.value.field == knob
    assert needle in str(err.value)


def test_thread_min_above_max_is_rejected():
    with pytest.raises(ConfigError, match="consume_thread_min.*<= consume_thread_max"):
        ConsumerConfig(consume_thread_min=30, consume_thread_max=20).validate()


@pytest.mark.parametrize("knobs,field,needle", [
    ({"lock_interval": 30.0}, "lock_interval", "less than lock_max_live_time (30.0s)"),
    ({"lock_interval": 5.0, "lock_max_live_time": 5.0}, "lock_interval", "less than lock_max_live_time"),
    ({"lock_max_live_time": 60.0}, "lock_max_live_time", "less than the broker's lock expiry (60s)"),
    ({"lock_interval": 50.0, "lock_max_live_time": 90.0}, "lock_max_live_time", "broker's lock expiry"),
])
def test_lock_timings_must_renew_before_the_locks_lapse(knobs, field, needle):
    # renew (lock_interval) before the client stops trusting its lock (lock_max_live_time), and
    # stop trusting it before the broker hands it to another member (60 s after the last renewal)
    with pytest.raises(ConfigError) as err:
        ConsumerConfig(**knobs).validate()
    assert err.value.field == field
    assert needle in str(err.value)
    ConsumerConfig(lock_interval=0.5, lock_max_live_time=59.0).validate()


def test_enum_names_accepted_case_insensitively():
    c = ConsumerConfig(message_model="broadcasting", consume_from_where="first_offset")
    assert c.message_model is MessageModel.BROADCASTING
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.mark.parametrize("group", ["", "DEFAULT_CONSUMER", "bad group", "x" * 256])
def test_bad_group_names(group):
    with pytest.raises(ConfigError) as err:
        check_group(group)
    assert err.value.field == "group"


def test_push_consumer_rejects_unknown_option_and_bad_values():
    with pytest.raises(ConfigError, match="pull_batch_size"):
        PushConsumer("g", pull_batch_size=0)
    with pytest.raises(ConfigError, match="pul_batch_size: unknown"):
        PushConsumer("g", pul_batch_size=1)


def test_subscription_expression_parsing_and_java_hashes():
    sub = build_subscription("T", "TagA || TagB ||  || TagA")
    assert sub.tags_order == ("TagA", "TagB") and sub.code_set == (2598919, 2598920)
    assert build_subscription("T", "*").match_all and build_subscription("T", "").sub_string == "*"
    assert build_subscription("T", "标签").code_set == (857175,)
    with pytest.raises(ConfigError, match="expression"):
        build_subscription("T", " || ")
    js = sub.to_json()
    assert js["codeSet"] == [2598919, 2598920] and js["expressionType"] == "TAG" and js["classFilterMode"] is False


def test_reset_body_both_forms():
    fast = (b'{"offsetTable":{{"brokerName":"RaftNode00","queueId":0,"topic":"topicB"}:11110,'
            b'{"brokerName":"RaftNode00","queueId":1,"topic":"topicB"}:0}}')
    assert parse_reset_body(fast) == {MessageQueue("topicB", "RaftNode00", 0): 11110,
                                      MessageQueue("topicB", "RaftNode00", 1): 0}
    gson = b'{"offsetTable":[[{"topic":"zx","brokerName":"b","queueId":5},23354233]]}'
    assert parse_reset_body(gson) == {MessageQueue("zx", "b", 5): 23354233}
    cpp = b'{"offsetTable":[{"brokerName":"b","queueId":2,"topic":"t","offset":9}]}'
    assert parse_reset_body(cpp) == {MessageQueue("t", "b", 2): 9}
    for bad in (None, b"[]", b'{"offsetTable":[[1]]}', b'{"offsetTable":{{"topic":"t"}:1}}'):
        with pytest.raises(ProtocolError):
            parse_reset_body(bad)
