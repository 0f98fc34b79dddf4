"""RocketMQLagSensor: gate downstream tasks on a consumer group's lag."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_rocketmq import metrics
from airflow_provider_rocketmq.airflow_compat import (
    BaseSensorOperator,
    Context,
    PokeReturnValue,
    default_conn_id,
    default_deferrable,
)
from airflow_provider_rocketmq.client import ConfigError, RocketMQError
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.triggers.lag import RocketMQLagTrigger
from airflow_provider_rocketmq.triggers.lag_condition import LagCondition


class RocketMQLagSensor(BaseSensorOperator):
    """Wait until a consumer group's lag on a topic meets a bound, using admin calls only.

    The sensor never joins the group (a member would take queues from the real
    consumers). Its XCom is the lag snapshot (``LagSnapshot.to_dict()``:
    ``total_lag`` and per-queue ``broker_offset``/``consumer_offset``/``lag``).

    :param topic: topic to measure (templated).
    :param consumer_group: group to measure (templated).
    :param min_lag: succeed once at least this many messages wait (enough for a batch; templated,
        an integer once rendered).
    :param max_lag: succeed once at most this many messages wait (the group caught up; templated).
    :param per_queue: judge each queue instead of the total (``min_lag``: any queue,
        ``max_lag``: every queue).
    :param deferrable: defer at once to `RocketMQLagTrigger` (frees the worker slot);
        ``poke_interval`` becomes the trigger's poll interval. Default: ``[operators]
        default_deferrable``.
    :param rocketmq_conn_id: the `rocketmq` connection (templated; default ``[rocketmq]
        default_conn_id``).
    """

    template_fields: Sequence[str] = ("topic", "consumer_group", "min_lag", "max_lag", "rocketmq_conn_id")
    ui_color = "#d7e8f5"

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        min_lag: int | None = None,
        max_lag: int | None = None,
        per_queue: bool = False,
        deferrable: bool | None = None,
        rocketmq_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not (_is_template(min_lag) or _is_template(max_lag)):  # else checked once rendered
            LagCondition(min_lag=min_lag, max_lag=max_lag, per_queue=per_queue)
        self.topic = topic
        self.consumer_group = consumer_group
        self.min_lag = min_lag
        self.max_lag = max_lag
        self.per_queue = per_queue
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.rocketmq_conn_id = rocketmq_conn_id

    @property
    def condition(self) -> LagCondition:
        """The bound, from the (rendered) fields; a rendered bound must be an integer."""
        return LagCondition(min_lag=_as_int("min_lag", self.min_lag),
                            max_lag=_as_int("max_lag", self.max_lag), per_queue=self.per_queue)

    def execute(self, context: Context) -> Any:
        condition = self.condition  # a bad rendered bound fails here, before any wait
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=RocketMQLagTrigger(
                topic=self.topic,
                consumer_group=self.consumer_group,
                min_lag=condition.min_lag,
                max_lag=condition.max_lag,
                per_queue=self.per_queue,
                poll_interval=self.poke_interval,
                rocketmq_conn_id=self.rocketmq_conn_id or default_conn_id(),
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
        lag: dict[str, Any] = event["lag"]
        return lag

    def poke(self, context: Context) -> PokeReturnValue:
        with RocketMQHook(self.rocketmq_conn_id).get_admin() as admin:
            snapshot = admin.lag(self.consumer_group, self.topic).to_dict()
        metrics.lag_metrics(snapshot)
        condition = self.condition
        done = condition.is_met(snapshot)
        self.log.info("lag %s of %s on %s (%s): %s", snapshot.get("total_lag"), self.consumer_group,
                      self.topic, condition.describe(), "met" if done else "waiting")
        return PokeReturnValue(is_done=done, xcom_value=snapshot if done else None)


def _is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _as_int(name: str, value: Any) -> Any:
    """A rendered bound (Jinja renders to text) as an int; anything else is left to LagCondition."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigError(name, f"must be an integer, got {value!r}") from None
    return value
