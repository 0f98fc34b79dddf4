"""RocketMQLagSensor: gate downstream tasks on a consumer group's lag."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_provider_rocketmq.client.errors import RocketMQError
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.sensors.lag_condition import LagCondition
from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger


class RocketMQLagSensor(BaseSensorOperator):
    """Wait until a consumer group's lag on a topic meets a bound, using admin calls only.

    The sensor never joins the group (a member would take queues from the real
    consumers). Its XCom is the lag snapshot (``LagSnapshot.to_dict()``:
    ``total_lag`` and per-queue ``broker_offset``/``consumer_offset``/``lag``).

    :param topic: topic to measure (templated).
    :param consumer_group: group to measure (templated).
    :param min_lag: succeed once at least this many messages wait (enough for a batch).
    :param max_lag: succeed once at most this many messages wait (the group caught up).
    :param per_queue: judge each queue instead of the total (``min_lag``: any queue,
        ``max_lag``: every queue).
    :param deferrable: defer at once to `RocketMQLagTrigger` (frees the worker slot);
        ``poke_interval`` becomes the trigger's poll interval.
    :param rocketmq_conn_id: the `rocketmq` connection.
    """

    template_fields: Sequence[str] = ("topic", "consumer_group")
    ui_color = "#d7e8f5"

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        min_lag: int | None = None,
        max_lag: int | None = None,
        per_queue: bool = False,
        deferrable: bool = False,
        rocketmq_conn_id: str = RocketMQHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.condition = LagCondition(min_lag=min_lag, max_lag=max_lag, per_queue=per_queue)
        self.topic = topic
        self.consumer_group = consumer_group
        self.min_lag = min_lag
        self.max_lag = max_lag
        self.per_queue = per_queue
        self.deferrable = deferrable
        self.rocketmq_conn_id = rocketmq_conn_id

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=RocketMQLagTrigger(
                topic=self.topic,
                consumer_group=self.consumer_group,
                min_lag=self.min_lag,
                max_lag=self.max_lag,
                per_queue=self.per_queue,
                poll_interval=self.poke_interval,
                rocketmq_conn_id=self.rocketmq_conn_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: fail on an error event, else return the snapshot (XCom)."""
        if event.get("status") != "success":
            raise RocketMQError(f"lag trigger failed: {event.get('message', event)}")
        self.log.info("lag condition %s met: total lag %s", self.condition.describe(),
                      event["lag"].get("total_lag"))
        return event["lag"]

    def poke(self, context: Context) -> PokeReturnValue:
        with RocketMQHook(self.rocketmq_conn_id).get_admin() as admin:
            snapshot = admin.lag(self.consumer_group, self.topic).to_dict()
        done = self.condition.is_met(snapshot)
        self.log.info("lag %s of %s on %s (%s): %s", snapshot.get("total_lag"), self.consumer_group,
                      self.topic, self.condition.describe(), "met" if done else "waiting")
        return PokeReturnValue(is_done=done, xcom_value=snapshot if done else None)
