"""RocketMQLagTrigger: wait in the triggerer until a consumer group's lag meets a condition."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow_provider_rocketmq import metrics
from airflow_provider_rocketmq.airflow_compat import BaseEventTrigger, TriggerEvent, default_conn_id
from airflow_provider_rocketmq.client import RocketMQError
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.triggers.lag_condition import LagCondition


def _event(payload: dict[str, Any]) -> TriggerEvent:
    return TriggerEvent(payload)  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0

class RocketMQLagTrigger(BaseEventTrigger):
    """Poll a group's lag with the async admin API (never joining the group) until the condition holds.

    Fires one event: ``{"status": "success", "lag": <LagSnapshot.to_dict()>}``, or
    ``{"status": "error", "message": ...}`` on a non-retriable error (bad connection,
    unknown topic...). Retriable errors (timeouts, closed connections, busy broker) are
    logged and retried at the next poll.

    :param topic: topic whose queues are measured.
    :param consumer_group: group whose committed offsets are compared to the brokers' max offsets.
    :param min_lag: fire when at least this many messages wait (exclusive with ``max_lag``).
    :param max_lag: fire when at most this many messages wait (the group caught up).
    :param per_queue: apply the bound to each queue instead of the total (see `LagCondition`).
    :param poll_interval: seconds between two lag snapshots.
    :param rocketmq_conn_id: the `rocketmq` connection (default ``[rocketmq] default_conn_id``).
    """

    def __init__(
        self,
        topic: str,
        consumer_group: str,
        min_lag: int | None = None,
        max_lag: int | None = None,
        per_queue: bool = False,
        poll_interval: float = 5.0,
        rocketmq_conn_id: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0
        self.topic = topic
        self.consumer_group = consumer_group
        self.min_lag = min_lag
        self.max_lag = max_lag
        self.per_queue = per_queue
        self.poll_interval = float(poll_interval)
        self.rocketmq_conn_id = rocketmq_conn_id or default_conn_id()
        self.condition = LagCondition(min_lag=min_lag, max_lag=max_lag, per_queue=per_queue)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "consumer_group": self.consumer_group,
                "min_lag": self.min_lag,
                "max_lag": self.max_lag,
                "per_queue": self.per_queue,
                "poll_interval": self.poll_interval,
                "rocketmq_conn_id": self.rocketmq_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            admin = await RocketMQHook(self.rocketmq_conn_id).aget_async_admin()
        except Exception as exc:
            yield _event({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
            return
        async with admin:
            while True:
                try:
                    snapshot = (await admin.lag(self.consumer_group, self.topic)).to_dict()
                except RocketMQError as exc:
                    if not exc.retriable:
                        yield _event({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                        return
                    self.log.warning("lag of %s on %s not available yet: %s", self.consumer_group,
                                     self.topic, exc)
                else:
                    metrics.lag_metrics(snapshot)
                    if self.condition.is_met(snapshot):
                        yield _event({"status": "success", "lag": snapshot})
                        return
                    self.log.info("lag %s of %s on %s: waiting for %s", snapshot.get("total_lag"),
                                  self.consumer_group, self.topic, self.condition.describe())
                await asyncio.sleep(self.poll_interval)
