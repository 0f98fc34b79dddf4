"""RocketMQAwaitMessageSensor: wait for a message for which a function returns a value."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_rocketmq.airflow_compat import (
    BaseOperator,
    Context,
    default_conn_id,
    default_deferrable,
)
from airflow_provider_rocketmq.client import ConfigError, RocketMQError
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook
from airflow_provider_rocketmq.triggers.await_message import (
    FORCED_OVERRIDES,
    RocketMQAwaitMessageTrigger,
    dotted_path_checked,
    wait_for_message,
)


class RocketMQAwaitMessageSensor(BaseOperator):
    """Consume ``consumer_group`` until ``apply_function`` returns a value; return that value (XCom).

    Deferrable (the default when ``[operators] default_deferrable`` is true): the wait runs in
    the triggerer as `RocketMQAwaitMessageTrigger`. Otherwise the same wait runs in the worker.
    Either way the messages ``apply_function`` was called on are committed and the ones after
    the match are not (see `RocketMQAwaitMessageTrigger`).

    :param topic: topic to read (templated).
    :param consumer_group: group to consume as (templated).
    :param apply_function: dotted path of ``f(message, *args, **kwargs)`` (templated), importable
        in the triggerer and the worker; ``None`` means "not this one", anything else ends the
        wait and becomes the XCom (so it must be serializable).
    :param apply_function_args: extra positional arguments (templated).
    :param apply_function_kwargs: extra keyword arguments (templated).
    :param expression: tag expression (templated).
    :param consumer_overrides: `ConsumerConfig` knobs (templated), e.g.
        ``{"consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}`` for a new group.
    :param timeout: seconds to wait before failing (``None``: no limit).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param xcom_push_key: also push the value under this key.
    :param rocketmq_conn_id: the `rocketmq` connection (templated; default ``[rocketmq] default_conn_id``).
    """

    template_fields: Sequence[str] = ("topic", "consumer_group", "apply_function", "apply_function_args",
                                      "apply_function_kwargs", "expression", "consumer_overrides",
                                      "rocketmq_conn_id")
    ui_color = "#d7f5e8"

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        apply_function: str,
        apply_function_args: Sequence[Any] | None = None,
        apply_function_kwargs: Mapping[str, Any] | None = None,
        expression: str = "*",
        consumer_overrides: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deferrable: bool | None = None,
        xcom_push_key: str | None = None,
        rocketmq_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise ConfigError("timeout", f"must be > 0 seconds or None, got {timeout!r}")
        self.topic = topic
        self.consumer_group = consumer_group
        self.apply_function = dotted_path_checked(apply_function)
        self.apply_function_args = apply_function_args
        self.apply_function_kwargs = apply_function_kwargs
        self.expression = expression
        self.consumer_overrides = consumer_overrides
        self.timeout = timeout
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.xcom_push_key = xcom_push_key
        self.rocketmq_conn_id = rocketmq_conn_id

    def _trigger(self) -> RocketMQAwaitMessageTrigger:
        trigger = RocketMQAwaitMessageTrigger(
            topic=self.topic,
            consumer_group=self.consumer_group,
            apply_function=self.apply_function,
            apply_function_args=self.apply_function_args,
            apply_function_kwargs=self.apply_function_kwargs,
            expression=self.expression,
            consumer_overrides=self.consumer_overrides,
            rocketmq_conn_id=self.rocketmq_conn_id or default_conn_id(),
        )
        trigger.apply()  # fail here, in the worker, when the function cannot be imported
        return trigger

    def execute(self, context: Context) -> Any:
        trigger = self._trigger()
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete",
                       timeout=timedelta(seconds=self.timeout) if self.timeout else None)
        config = RocketMQHook(trigger.rocketmq_conn_id).get_consumer_config(
            **{**trigger.consumer_overrides, **FORCED_OVERRIDES})
        wait = wait_for_message(config, trigger.consumer_group, trigger.topic, trigger.expression,
                                trigger.apply())
        try:
            value, where = asyncio.run(asyncio.wait_for(wait, self.timeout))
        except asyncio.TimeoutError:
            raise RocketMQError(f"no matching message on {self.topic} within {self.timeout} s") from None
        return self.execute_complete(context, {"status": "success", "value": value, "message": where})

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: fail on an error event, else return the value (XCom)."""
        if event.get("status") != "success":
            raise RocketMQError(f"await-message trigger failed: {event.get('message', event)}")
        where = event["message"]
        self.log.info("matching message %s at %s/%s offset %s", where.get("msg_id"), where.get("broker"),
                      where.get("queue_id"), where.get("queue_offset"))
        if self.xcom_push_key:
            context["ti"].xcom_push(key=self.xcom_push_key, value=event["value"])
        return event["value"]
