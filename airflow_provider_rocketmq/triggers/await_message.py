"""RocketMQAwaitMessageTrigger: consume a group until ``apply_function`` returns a value.

The trigger is a member of ``consumer_group`` (a push consumer in orderly mode, one message
per call). Every message is handed to ``apply_function(message, *args, **kwargs)``, one at a
time across all queues. Messages for which it returns ``None`` are consumed (committed) and
skipped; the first message for which it returns anything else ends the wait: that message is
committed too, every message after it is left on the broker, and the event carries the value.

What holds, and under which conditions:

- exactly the messages ``apply_function`` was called on are committed (the consumer's
  shutdown persists their offsets; a failure there is logged, and those messages are offered
  again to the next reader of the group);
- if ``apply_function`` raises, the message is not committed and the trigger reports the error;
- if the broker's ACL refuses a request the consumer needs (heartbeat, rebalance, pull, offset
  commit...), the wait ends at once with that error (an error event naming the user, the resource
  and the missing action), never a wait that silently reads nothing;
- other members of the group (another sensor, a push consumer) share the queues by
  rebalancing, as any consumer of a group does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from airflow_provider_rocketmq.airflow_compat import BaseEventTrigger, TriggerEvent, default_conn_id
from airflow_provider_rocketmq.client import AsyncPushConsumer, ConfigError, ConsumerConfig, OrderlyStatus
from airflow_provider_rocketmq.hooks.callables import resolve_callable
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

# the trigger owns these: one message per call, so "what it read" is exactly what it committed
FORCED_OVERRIDES = {"consume_message_batch_max_size": 1, "enable_offset_commit": True,
                    "message_model": "CLUSTERING"}


def dotted_path_checked(apply_function: Any) -> str:
    """``apply_function`` as the trigger needs it: a dotted path the triggerer can import."""
    if not isinstance(apply_function, str) or "." not in apply_function:
        raise ConfigError("apply_function", "expected the dotted path of a function importable in the "
                          f"triggerer ('module.function'), got {apply_function!r}")
    return apply_function


def consumer_overrides_checked(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(overrides or {})
    for name in out:
        if name in FORCED_OVERRIDES:
            raise ConfigError(f"consumer_overrides.{name}", "is set by the await-message trigger")
    return out


def message_summary(msg: Any) -> dict[str, Any]:
    """Where the matching message was (JSON-serializable)."""
    return {"topic": msg.topic, "broker": msg.broker_name, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "msg_id": msg.msg_id, "tags": msg.tags, "keys": msg.keys}


async def wait_for_message(config: ConsumerConfig, group: str, topic: str, expression: str,
                           apply: Callable[[Any], Any]) -> tuple[Any, dict[str, Any]]:
    """Consume until ``apply`` returns a value; returns (value, where the message was)."""
    loop = asyncio.get_running_loop()
    found: asyncio.Future[tuple[Any, dict[str, Any]]] = loop.create_future()
    lock = threading.Lock()  # listeners run in the consumer's thread pool: one apply at a time
    done = False

    def settle(result: Any = None, error: BaseException | None = None) -> None:
        if found.done():
            return
        if error is not None:
            found.set_exception(error)
        else:
            found.set_result(result)

    def listener(msgs: list[Any], ctx: Any) -> OrderlyStatus:
        nonlocal done
        with lock:
            if done:  # left on the broker, uncommitted
                ctx.suspend_current_queue_time = 1.0
                return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            (msg,) = msgs
            try:
                value = apply(msg)
            except Exception as exc:
                done = True
                loop.call_soon_threadsafe(settle, None, exc)
                ctx.suspend_current_queue_time = 1.0
                return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if value is not None:
                done = True
                loop.call_soon_threadsafe(settle, (value, message_summary(msg)))
            return OrderlyStatus.SUCCESS

    consumer = AsyncPushConsumer(group, config)
    consumer.subscribe(topic, expression)
    consumer.register_listener(listener, orderly=True)
    await consumer.start()  # raises a refusal of the first heartbeat itself
    consumer.on_failure(lambda exc: settle(None, exc))  # a later one (on this loop) ends the wait
    try:
        return await asyncio.shield(found)
    finally:
        # drains the listener call in flight and persists the offsets of what was consumed
        await consumer.shutdown()


class RocketMQAwaitMessageTrigger(BaseEventTrigger):
    """Wait in the triggerer for a message for which ``apply_function`` returns a value.

    Event: ``{"status": "success", "value": <the return value>, "message": {"topic", "broker",
    "queue_id", "queue_offset", "msg_id", "tags", "keys"}}``, or ``{"status": "error",
    "message": ...}`` (bad connection, ``apply_function`` not importable or raising).

    :param topic: topic to read.
    :param consumer_group: the group the trigger consumes (and commits) as.
    :param apply_function: dotted path of ``f(message, *args, **kwargs)``, importable in the
        triggerer; ``message`` is a `MessageExt` (``body``, ``tags``, ``keys``, ``properties``,
        ``queue_offset``...). Its return value must be serializable (it becomes the event).
    :param apply_function_args: extra positional arguments.
    :param apply_function_kwargs: extra keyword arguments.
    :param expression: tag expression (``"*"``, ``"TagA || TagB"``), filtered by the broker.
    :param consumer_overrides: `ConsumerConfig` knobs (e.g. ``consume_from_where`` for a new group).
    :param rocketmq_conn_id: the `rocketmq` connection (default ``[rocketmq] default_conn_id``).
    """

    def __init__(
        self,
        topic: str,
        consumer_group: str,
        apply_function: str,
        apply_function_args: Sequence[Any] | None = None,
        apply_function_kwargs: Mapping[str, Any] | None = None,
        expression: str = "*",
        consumer_overrides: Mapping[str, Any] | None = None,
        rocketmq_conn_id: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0
        self.topic = topic
        self.consumer_group = consumer_group
        self.apply_function = dotted_path_checked(apply_function)
        self.apply_function_args = list(apply_function_args or ())
        self.apply_function_kwargs = dict(apply_function_kwargs or {})
        self.expression = expression
        self.consumer_overrides = consumer_overrides_checked(consumer_overrides)
        self.rocketmq_conn_id = rocketmq_conn_id or default_conn_id()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "consumer_group": self.consumer_group,
                "apply_function": self.apply_function,
                "apply_function_args": self.apply_function_args,
                "apply_function_kwargs": self.apply_function_kwargs,
                "expression": self.expression,
                "consumer_overrides": self.consumer_overrides,
                "rocketmq_conn_id": self.rocketmq_conn_id,
            },
        )

    def apply(self) -> Callable[[Any], Any]:
        fn = resolve_callable("apply_function", self.apply_function)
        return partial(fn, *self.apply_function_args, **self.apply_function_kwargs)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            apply = self.apply()
            config = await RocketMQHook(self.rocketmq_conn_id).aget_consumer_config(
                **{**self.consumer_overrides, **FORCED_OVERRIDES})
            value, where = await wait_for_message(config, self.consumer_group, self.topic, self.expression,
                                                  apply)
        except Exception as exc:
            yield TriggerEvent(  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0  # untyped in Airflow 3.0
                {"status": "error", "message": f"{type(exc).__name__}: {exc}"})
            return
        yield TriggerEvent(  # type: ignore[no-untyped-call,unused-ignore]  # untyped in Airflow 3.0
            {"status": "success", "value": value, "message": where})
