"""RocketMQ for the common-messaging provider: ``MessageQueueTrigger(scheme="rocketmq", ...)``.

Event-driven scheduling (``AssetWatcher``), one event per arrival of messages::

    trigger = MessageQueueTrigger(scheme="rocketmq", topic="orders", consumer_group="loader",
                                  poll_interval=30)
    asset = Asset("rocketmq_orders", watchers=[AssetWatcher(name="orders_arrivals", trigger=trigger)])

The keyword arguments are those of `RocketMQWatchTrigger` (``topic``, ``consumer_group``,
``min_messages``, ``poll_interval``, ``watcher_group``, ``rocketmq_conn_id``). The deprecated
queue-URI form ``rocketmq://<conn_id>/<topic>?consumer_group=G&min_messages=N`` is understood
too. For a sensor that waits on a lag bound, use `RocketMQLagSensor` (`RocketMQLagTrigger`
fires while the bound holds, so it is no event source).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider

from airflow_provider_rocketmq.client import ConfigError
from airflow_provider_rocketmq.triggers.watch import RocketMQWatchTrigger

_LAG_KEYS = ("min_lag", "max_lag", "per_queue")


class RocketMQMessageQueueProvider(BaseMessageQueueProvider):
    """Maps the ``rocketmq`` scheme (and ``rocketmq://`` queue URIs) to `RocketMQWatchTrigger`."""

    scheme = "rocketmq"

    def queue_matches(self, queue: str) -> bool:
        return queue.startswith("rocketmq://")

    def trigger_class(self) -> type[RocketMQWatchTrigger]:
        return RocketMQWatchTrigger

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        """``rocketmq://conn_id/topic?consumer_group=G&min_messages=N`` -> trigger keyword arguments."""
        parts = urlsplit(queue)
        topic = parts.path.lstrip("/")
        if not topic or "/" in topic:
            raise ConfigError("queue", f"{queue!r}: expected rocketmq://<conn_id>/<topic>?consumer_group=...")
        out: dict[str, Any] = {"topic": topic}
        if parts.netloc:
            out["rocketmq_conn_id"] = parts.netloc
        for key, value in parse_qsl(parts.query):
            if key == "min_messages":
                try:
                    out[key] = int(value)
                except ValueError:
                    raise ConfigError(f"queue.{key}", f"expected an integer, got {value!r}") from None
            elif key == "poll_interval":
                try:
                    out[key] = float(value)
                except ValueError:
                    raise ConfigError(f"queue.{key}", f"expected seconds, got {value!r}") from None
                if not out[key] > 0:
                    raise ConfigError(f"queue.{key}", f"must be > 0 seconds, got {value!r}")
            elif key in ("consumer_group", "watcher_group"):
                out[key] = value
            elif key in _LAG_KEYS:
                raise ConfigError(f"queue.{key}", "the message-queue trigger fires once per arrival; use "
                                  "min_messages (lag bounds belong to RocketMQLagSensor)")
            else:
                raise ConfigError(f"queue.{key}", "unknown parameter")
        if "consumer_group" not in out:
            raise ConfigError("queue.consumer_group", "missing in the queue URI")
        return out
