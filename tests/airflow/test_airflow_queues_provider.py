"""The common-messaging integration: MessageQueueTrigger(scheme="rocketmq") builds our lag trigger."""

from __future__ import annotations

import pytest

from airflow_provider_rocketmq.client.errors import ConfigError
from airflow_provider_rocketmq.queues.rocketmq import RocketMQMessageQueueProvider
from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger


def test_message_queue_trigger_resolves_the_rocketmq_scheme() -> None:
    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger

    trigger = MessageQueueTrigger(scheme="rocketmq", topic="orders", consumer_group="loader", min_lag=10)
    assert isinstance(trigger.trigger, RocketMQLagTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath.endswith("RocketMQLagTrigger")
    assert (kwargs["topic"], kwargs["consumer_group"], kwargs["min_lag"]) == ("orders", "loader", 10)


def test_queue_uri_form() -> None:
    provider = RocketMQMessageQueueProvider()
    uri = "rocketmq://rmq_prod/orders?consumer_group=loader&max_lag=0&per_queue=true"
    assert provider.queue_matches(uri) and not provider.queue_matches("kafka://x/y")
    assert provider.trigger_kwargs(uri) == {"topic": "orders", "rocketmq_conn_id": "rmq_prod",
                                            "consumer_group": "loader", "max_lag": 0, "per_queue": True}
    with pytest.raises(ConfigError) as err:
        provider.trigger_kwargs("rocketmq://c/orders?consumer_group=g&min_lag=lots")
    assert err.value.field == "queue.min_lag"
    with pytest.raises(ConfigError) as err:
        provider.trigger_kwargs("rocketmq://c/orders")
    assert err.value.field == "queue.consumer_group"
    for bad, field in (("per_queue=maybe", "queue.per_queue"), ("poll_interval=soon", "queue.poll_interval"),
                       ("poll_interval=0", "queue.poll_interval")):
        with pytest.raises(ConfigError) as err:
            provider.trigger_kwargs(f"rocketmq://c/orders?consumer_group=g&min_lag=1&{bad}")
        assert err.value.field == field
