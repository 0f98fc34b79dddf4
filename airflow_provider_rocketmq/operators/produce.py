"""RocketMQProduceOperator: send what a Python function yields to a topic."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_rocketmq.airflow_compat import BaseOperator, Context
from airflow_provider_rocketmq.client.errors import ConfigError
from airflow_provider_rocketmq.client.message import Message
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

DEFAULT_PRODUCER_GROUP = "AIRFLOW_PRODUCER"


def resolve_callable(field: str, fn: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable, or the dotted path of one (``"my_pkg.my_module.my_function"``)."""
    if callable(fn):
        return fn
    if not isinstance(fn, str) or "." not in fn:
        raise ConfigError(field, f"expected a callable or a dotted path 'module.function', got {fn!r}")
    from importlib import import_module

    module, _, name = fn.rpartition(".")
    try:
        found = getattr(import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(field, f"cannot import {fn!r}: {exc}") from None
    if not callable(found):
        raise ConfigError(field, f"{fn!r} is not callable")
    return found  # type: ignore[no-any-return]  # getattr of an imported module: checked callable above


def to_message(topic: str, item: Any, index: int) -> Message:
    """One item the producer function yielded -> a `Message` for ``topic``.

    Accepted: a `Message` for ``topic``; ``body`` (bytes or str); or a tuple
    ``(body, tags, keys, properties)`` of which trailing parts may be left out or None
    (``keys``: a string or a list of strings, ``properties``: a mapping of strings).
    """
    field = f"producer_function[{index}]"
    if isinstance(item, Message):
        if item.topic != topic:
            raise ConfigError(f"{field}.topic",
                              f"the operator sends to {topic!r}, the message is for {item.topic!r}")
        return item
    if isinstance(item, (bytes, bytearray, memoryview, str)):
        item = (item,)
    if not isinstance(item, tuple) or not 1 <= len(item) <= 4:
        raise ConfigError(field, "expected a Message, a body, or a tuple (body, tags, keys, properties), "
                          f"got {type(item).__name__}")
    body, tags, keys, properties = (*item, None, None, None)[:4]
    if tags is not None and not isinstance(tags, str):
        raise ConfigError(f"{field}.tags", f"must be a string, got {type(tags).__name__}")
    if keys is not None and not isinstance(keys, str) and not (
            isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys)):
        raise ConfigError(f"{field}.keys", "must be a string or a list of strings")
    if properties is not None and not isinstance(properties, Mapping):
        raise ConfigError(f"{field}.properties", f"must be a mapping, got {type(properties).__name__}")
    try:
        return Message(topic, body, tags=tags, keys=keys, properties=properties)
    except ConfigError as exc:
        raise ConfigError(f"{field}.{exc.field}", str(exc).split(": ", 1)[-1]) from None


class RocketMQProduceOperator(BaseOperator):
    """Send every message ``producer_function`` yields to ``topic``, one synchronous send each.

    Messages are sent as they are yielded (a generator may yield millions); a send that fails
    after the client's bounded retries fails the task, and the messages sent before it stay sent
    (a retry of the task sends them again: at-least-once). A bad item fails the task with a
    `ConfigError` naming it (``producer_function[7].tags``).

    XCom: ``{"topic", "messages", "bytes", "status": {"SEND_OK": n, ...},
    "queues": {"<broker>/<queue id>": n, ...}, "first": <send result>, "last": <send result>}``
    where a send result is ``{"msg_id", "broker", "queue_id", "queue_offset", "status", ...}``.

    :param topic: topic to send to (templated).
    :param producer_function: a callable, or the dotted path of one, returning an iterable of
        `Message` (for ``topic``), bodies (bytes/str) or ``(body, tags, keys, properties)`` tuples.
    :param producer_function_args: positional arguments for it (templated).
    :param producer_function_kwargs: keyword arguments for it (templated).
    :param producer_group: the producer group the messages are sent under (templated).
    :param rocketmq_conn_id: the `rocketmq` connection (templated; default ``[rocketmq] default_conn_id``).
    """

    template_fields: Sequence[str] = ("topic", "producer_function_args", "producer_function_kwargs",
                                      "producer_group", "rocketmq_conn_id")
    ui_color = "#e8d5f5"

    def __init__(
        self,
        *,
        topic: str,
        producer_function: Callable[..., Iterable[Any]] | str,
        producer_function_args: Sequence[Any] | None = None,
        producer_function_kwargs: Mapping[str, Any] | None = None,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        rocketmq_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(producer_function, str):
            resolve_callable("producer_function", producer_function)  # a dotted path is imported at run time
        elif "." not in producer_function:
            raise ConfigError("producer_function",
                              f"expected a dotted path 'module.function', got {producer_function!r}")
        self.topic = topic
        self.producer_function = producer_function
        self.producer_function_args = producer_function_args or ()
        self.producer_function_kwargs = producer_function_kwargs or {}
        self.producer_group = producer_group
        self.rocketmq_conn_id = rocketmq_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        fn = resolve_callable("producer_function", self.producer_function)
        items = fn(*self.producer_function_args, **self.producer_function_kwargs)
        if items is None or isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise ConfigError("producer_function",
                              f"must return an iterable of messages, got {type(items).__name__}")
        statuses: Counter[str] = Counter()
        queues: Counter[str] = Counter()
        first: dict[str, Any] | None = None
        last: dict[str, Any] | None = None
        sent = size = 0
        with RocketMQHook(self.rocketmq_conn_id).get_producer(self.producer_group) as producer:
            for index, item in enumerate(items):
                try:
                    msg = to_message(self.topic, item, index)
                except ConfigError:
                    self.log.error("%d message(s) were sent to %s before the bad item %d", sent, self.topic,
                                   index)
                    raise
                last = producer.send(msg).to_dict()
                first = first or last
                sent += 1
                size += len(msg.body)
                statuses[last["status"]] += 1
                queues[f"{last['broker']}/{last['queue_id']}"] += 1
        self.log.info("sent %d message(s), %d bytes, to %s: %s", sent, size, self.topic, dict(statuses))
        return {"topic": self.topic, "messages": sent, "bytes": size, "status": dict(statuses),
                "queues": dict(sorted(queues.items())), "first": first, "last": last}
