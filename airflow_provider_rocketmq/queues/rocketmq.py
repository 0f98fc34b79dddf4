"""RocketMQ for the common-messaging provider: ``MessageQueueTrigger(scheme="rocketmq", ...)``.

Event-driven scheduling (``AssetWatcher``) on a consumer group's lag::

    trigger = MessageQueueTrigger(scheme="rocketmq", topic="orders", consumer_group="loader",
                                  min_lag=1000, poll_interval=30)
    asset = Asset("rocketmq_orders", watchers=[AssetWatcher(name="orders_backlog", trigger=trigger)])

The keyword arguments are those of `RocketMQLagTrigger`. The trigger fires while the
group's lag meets the bound, so the DAG it schedules should consume the backlog (e.g.
`RocketMQConsumeWindowOperator` with ``commit="after_staging"``) and use
``max_active_runs=1``. The deprecated queue-URI form
``rocketmq://<conn_id>/<topic>?consumer_group=G&min_lag=N`` is understood too.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider

from airflow_provider_rocketmq.client.errors import ConfigError
from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger

_INT_KEYS = ("min_lag", "max_lag")


class RocketMQMessageQueueProvider(BaseMessageQueueProvider):
    """Maps the ``rocketmq`` scheme (and ``rocketmq://`` queue URIs) to `RocketMQLagTrigger`."""

    scheme = "rocketmq"

    def queue_matches(self, queue: str) -> bool:
        return queue.startswith("rocketmq://")

    def trigger_class(self) -> type[RocketMQLagTrigger]:
        return RocketMQLagTrigger

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        """``rocketmq://conn_id/topic?consumer_group=G&min_lag=N`` -> trigger keyword arguments."""
        parts = urlsplit(queue)
        topic = parts.path.lstrip("/")
        if not topic or "/" in topic:
            raise ConfigError("queue", f"{queue!r}: expected rocketmq://<conn_id>/<topic>?consumer_group=...")
        out: dict[str, Any] = {"topic": topic}
        if parts.netloc:
            out["rocketmq_conn_id"] = parts.netloc
        for key, value in parse_qsl(parts.query):
            if key in _INT_KEYS:
                try:
                    out[key] = int(value)
                except ValueError:
                    raise ConfigError(f"queue.{key}", f"expected an integer, got {value!r}") from None
            elif key == "per_queue":
                if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
                    raise ConfigError(f"queue.{key}", f"expected true or false, got {value!r}")
                out[key] = value.lower() in ("1", "true", "yes")
            elif key == "poll_interval":
                try:
                    out[key] = float(value)
                except ValueError:
                    raise ConfigError(f"queue.{key}", f"expected seconds, got {value!r}") from None
                if not out[key] > 0:
                    raise ConfigError(f"queue.{key}", f"must be > 0 seconds, got {value!r}")
            elif key == "consumer_group":
                out[key] = value
            else:
                raise ConfigError(f"queue.{key}", "unknown parameter")
        if "consumer_group" not in out:
            raise ConfigError("queue.consumer_group", "missing in the queue URI")
        return out
