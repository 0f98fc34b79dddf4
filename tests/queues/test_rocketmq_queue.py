"""The common-messaging integration: MessageQueueTrigger(scheme="rocketmq") builds the arrival watcher."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.protocol.errors import ConfigError
from airflow_provider_rocketmq.queues.rocketmq import RocketMQMessageQueueProvider
from airflow_provider_rocketmq.triggers.watch import RocketMQWatchTrigger


def test_message_queue_trigger_resolves_the_rocketmq_scheme() -> None:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    trigger = MessageQueueTrigger(scheme="rocketmq", topic="orders", consumer_group="loader", poll_interval=7)
    assert isinstance(trigger.trigger, RocketMQWatchTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_rocketmq.triggers.watch.RocketMQWatchTrigger"
    assert kwargs == {"topic": "orders", "consumer_group": "loader", "min_messages": 1, "poll_interval": 7.0,
                      "watcher_group": "loader-watcher", "rocketmq_conn_id": "rocketmq_default"}


def test_queue_uri_form() -> None:
    provider = RocketMQMessageQueueProvider()
    uri = "rocketmq://rmq_prod/orders?consumer_group=loader&min_messages=100&poll_interval=30"
    assert provider.queue_matches(uri) and not provider.queue_matches("kafka://x/y")
    assert provider.trigger_kwargs(uri) == {"topic": "orders", "rocketmq_conn_id": "rmq_prod",
                                            "consumer_group": "loader", "min_messages": 100, "poll_interval": 30.0}
    with pytest.raises(ConfigError) as err:
        provider.trigger_kwargs("rocketmq://c/orders")
    assert err.value.field == "queue.consumer_group"
    for bad, field in (("min_messages=lots", "queue.min_messages"), ("poll_interval=soon", "queue.poll_interval"),
                       ("poll_interval=0", "queue.poll_interval"), ("colour=red", "queue.colour")):
        with pytest.raises(ConfigError) as err:
            provider.trigger_kwargs(f"rocketmq://c/orders?consumer_group=g&{bad}")
        assert err.value.field == field
    # the lag bounds that used to flood the scheduler are refused with a pointer to min_messages
    with pytest.raises(ConfigError, match="min_messages") as err:
        provider.trigger_kwargs("rocketmq://c/orders?consumer_group=g&min_lag=1")
    assert err.value.field == "queue.min_lag"
