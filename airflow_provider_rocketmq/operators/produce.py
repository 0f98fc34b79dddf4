"""RocketMQProduceOperator: send what a Python function yields to a topic."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from airflow_provider_rocketmq.airflow_compat import BaseOperator, Context
from airflow_provider_rocketmq.client import (
    BULK_MAX_BATCH,
    BULK_MAX_IN_FLIGHT,
    ConfigError,
    Message,
    MessageQueue,
    PipelineOptions,
    RocketMQError,
    SendAbortedError,
    SendOutcome,
)
from airflow_provider_rocketmq.hooks.callables import resolve_callable
from airflow_provider_rocketmq.hooks.rocketmq import RocketMQHook

DEFAULT_PRODUCER_GROUP = "AIRFLOW_PRODUCER"
DEFAULT_MAX_IN_FLIGHT = BULK_MAX_IN_FLIGHT
DEFAULT_MAX_BATCH = BULK_MAX_BATCH


def to_send_item(topic: str, item: Any, index: int) -> tuple[Message, str | None]:
    """One item the producer function yielded -> (a `Message` for ``topic``, its ordering key or None).

    Accepted: a `Message` for ``topic``; ``body`` (bytes or str); or a tuple
    ``(body, tags, keys, properties, key)`` of which trailing parts may be left out or None
    (``keys``: a string or a list of strings, ``properties``: a mapping of strings, ``key``: a
    string; messages with the same ``key`` go to one queue in the order they were yielded).
    """
    if item.__class__ is bytes or item.__class__ is str:  # the common case first
        return Message(topic, item), None
    field = f"producer_function[{index}]"
    if isinstance(item, Message):
        if item.topic != topic:
            raise ConfigError(f"{field}.topic",
                              f"the operator sends to {topic!r}, the message is for {item.topic!r}")
        return item, None
    if isinstance(item, (bytes, bytearray, memoryview, str)):
        item = (item,)
    if not isinstance(item, tuple) or not 1 <= len(item) <= 5:
        raise ConfigError(field, "expected a Message, a body, or a tuple (body, tags, keys, properties, key), "
                          f"got {type(item).__name__}")
    body, tags, keys, properties, key = (*item, None, None, None, None)[:5]
    if tags is not None and not isinstance(tags, str):
        raise ConfigError(f"{field}.tags", f"must be a string, got {type(tags).__name__}")
    if keys is not None and not isinstance(keys, str) and not (
            isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys)):
        raise ConfigError(f"{field}.keys", "must be a string or a list of strings")
    if properties is not None and not isinstance(properties, Mapping):
        raise ConfigError(f"{field}.properties", f"must be a mapping, got {type(properties).__name__}")
    if key is not None and not isinstance(key, str):
        raise ConfigError(f"{field}.key", f"must be a string, got {type(key).__name__}")
    try:
        return Message(topic, body, tags=tags, keys=keys, properties=properties), key
    except ConfigError as exc:
        raise ConfigError(f"{field}.{exc.field}", str(exc).split(": ", 1)[-1]) from None


class RocketMQProduceOperator(BaseOperator):
    """Send every message ``producer_function`` yields to ``topic``, pipelined, with a result per message.

    Messages are read as they are yielded (a generator may yield millions) and sent with up to
    ``max_in_flight`` requests in flight, each carrying up to ``max_batch`` messages bound for one
    queue (SEND_BATCH_MESSAGE; 1: a SEND_MESSAGE each). Messages yielded with a ``key`` go to the
    queue that key hashes to and are stored there in the order yielded (one request in flight per
    such queue). A send that fails after the client's bounded retries fails the task: nothing more
    is sent, the messages sent before stay sent (a retry of the task sends them again:
    at-least-once), and the log says how many were sent, failed and not sent.
    A bad item fails the task with a `ConfigError` naming it (``producer_function[7].tags``) once
    the messages before it are sent.

    XCom: ``{"topic", "messages", "bytes", "requests", "status": {"SEND_OK": n, ...},
    "queues": {"<broker>/<queue id>": n, ...}, "first": <send result>, "last": <send result>}``
    where a send result is ``{"msg_id", "broker", "queue_id", "queue_offset", "status", ...}``
    (``first``/``last``: of the first and the last message sent).

    :param topic: topic to send to (templated).
    :param producer_function: a callable, or the dotted path of one, returning an iterable of
        `Message` (for ``topic``), bodies (bytes/str) or ``(body, tags, keys, properties, key)`` tuples.
    :param producer_function_args: positional arguments for it (templated).
    :param producer_function_kwargs: keyword arguments for it (templated).
    :param producer_group: the producer group the messages are sent under (templated).
    :param rocketmq_conn_id: the `rocketmq` connection (templated; default ``[rocketmq] default_conn_id``).
    :param max_in_flight: SEND requests awaiting their answer at once (1..4096, default 64).
    :param max_batch: messages per request (1..1024, default 32; 1 sends each message alone).
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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_batch: int = DEFAULT_MAX_BATCH,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(producer_function, str):
            resolve_callable("producer_function", producer_function)  # a dotted path is imported at run time
        elif "." not in producer_function:
            raise ConfigError("producer_function",
                              f"expected a dotted path 'module.function', got {producer_function!r}")
        PipelineOptions(max_in_flight=max_in_flight, max_batch=max_batch)  # ConfigError naming the field
        self.topic = topic
        self.producer_function = producer_function
        self.producer_function_args = producer_function_args or ()
        self.producer_function_kwargs = producer_function_kwargs or {}
        self.producer_group = producer_group
        self.rocketmq_conn_id = rocketmq_conn_id
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch

    def execute(self, context: Context) -> dict[str, Any]:
        fn = resolve_callable("producer_function", self.producer_function)
        items = fn(*self.producer_function_args, **self.producer_function_kwargs)
        if items is None or isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise ConfigError("producer_function",
                              f"must return an iterable of messages, got {type(items).__name__}")
        topic = self.topic
        tally = _Tally()

        def messages() -> Iterator[Message | tuple[Message, str | None]]:
            for read, item in enumerate(items, 1):
                tally.read = read
                if item.__class__ is bytes or item.__class__ is str:  # the common case without a call
                    yield Message(topic, item)
                else:
                    yield to_send_item(topic, item, read - 1)

        with RocketMQHook(self.rocketmq_conn_id).get_producer(self.producer_group) as producer:
            try:
                add = tally.add
                for outcome in producer.send_many(messages(), max_in_flight=self.max_in_flight,
                                                  max_batch=self.max_batch):
                    add(outcome)
            except ConfigError:
                self.log.error("%d message(s) were sent to %s before the bad item %d", tally.sent, topic,
                               tally.read - 1)
                raise
        if tally.error is not None:
            line = (f"{tally.sent} message(s) sent to {topic} before the failure, {tally.failed} failed, "
                    f"{tally.aborted} not sent")
            self.log.error("%s: %s", line, tally.error)
            raise tally.error
        tally.close()
        self.log.info("sent %d message(s), %d bytes, to %s in %d request(s): %s", tally.sent, tally.bytes, topic,
                      len(tally.requests), dict(tally.statuses))
        last = tally.last.result if tally.last is not None else None
        return {"topic": topic, "messages": tally.sent, "bytes": tally.bytes, "requests": len(tally.requests),
                "status": dict(tally.statuses), "queues": dict(sorted(tally.queues.items())),
                "first": tally.first, "last": last.to_dict() if last is not None else None}


class _Tally:
    """What the operator counts from the outcomes, in the order the messages were yielded.

    The messages of one request share its status and queue: a message of the request counted
    just before is counted without reading its result (`SendOutcome.result` is then never made
    for it); status and queue counts of such a run are added when the next run starts (`close`).
    """

    def __init__(self) -> None:
        self.read = 0
        self.sent = self.failed = self.aborted = self.bytes = 0
        self.statuses: Counter[str] = Counter()
        self._queues: Counter[MessageQueue] = Counter()
        self.requests: set[int] = set()
        self.first: dict[str, Any] | None = None
        self.last: SendOutcome | None = None  # of the last message sent
        self.error: RocketMQError | None = None
        self._run_request: int | None = None  # the request of the run being counted
        self._run: tuple[str, MessageQueue] | None = None  # its status and queue
        self._run_count = 0

    def add(self, outcome: SendOutcome) -> None:
        if outcome.error is None and outcome.request == self._run_request:  # the run goes on
            self.sent += 1
            self.bytes += len(outcome.message.body)
            self._run_count += 1
            self.last = outcome
            return
        result = outcome.result
        if result is None:
            if isinstance(outcome.error, SendAbortedError):
                self.aborted += 1
            else:
                self.failed += 1
                if self.error is None:
                    self.error = outcome.error
            return
        self.close()
        self.sent += 1
        self.bytes += len(outcome.message.body)
        self._run_request = outcome.request
        self._run = (result.status, result.queue)
        self._run_count = 1
        if outcome.request is not None:
            self.requests.add(outcome.request)
        if self.first is None:
            self.first = result.to_dict()
        self.last = outcome

    def close(self) -> None:
        """Add the run being counted to the status and queue counts."""
        if self._run is not None:
            status, queue = self._run
            self.statuses[status] += self._run_count
            self._queues[queue] += self._run_count
            self._run = None
            self._run_request = None

    @property
    def queues(self) -> dict[str, int]:
        """Messages sent per ``"<broker>/<queue id>"``."""
        return {f"{q.broker_name}/{q.queue_id}": n for q, n in self._queues.items()}
