"""Producer: SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (REFERENCE 2.4, 2.8).

Used for demo data, tests and the consumer's retry fallback. What it does like
Java's DefaultMQProducer: V2 one-letter header, ``WAIT=true`` and a UNIQ_KEY on
every message, zlib (level 5) for single bodies above 4 KiB with sysFlag 0x301,
round-robin queue choice that moves to another broker after a failure, key-hash
choice (``String.hashCode % n``) for ordered sends, and the ``TBW102`` default
topic route when the topic does not exist yet (brokers with autoCreateTopic).

Retries are bounded (tenacity, jittered) and happen only when the message was
certainly *not* stored: the broker answered a retriable code (busy, flow
control, service not available, system error) or the connection could not be
opened (refused or timed out). A timeout or a connection lost after the frame was written is raised,
because the broker may have stored the message; the UNIQ_KEY stays the same on
every attempt so a duplicate would still be recognisable.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from .config import DEFAULT_TOPIC, RETRY_PREFIX, ClientConfig, check_topic
from .errors import (
    AclDeniedError,
    BrokerError,
    ClientStateError,
    ConfigError,
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    RouteNotFoundError,
    broker_error,
)
from .loop_thread import SyncFacade
from .message import (
    COMPRESS_OVER,
    COMPRESSION_ZLIB,
    FLAG_COMPRESSED,
    MAX_PROPERTIES_LEN,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    Message,
    encode_batch,
    java_string_hash,
    new_uniq_id,
    properties_to_string,
)
from .mqclient import ClientFacade, MQClient
from .queue import MessageQueue
from .remoting.codes import RequestCode, ResponseCode
from .remoting.command import RemotingCommand
from .route import TopicRouteData

log = logging.getLogger(__name__)

DEFAULT_TOPIC_QUEUE_NUMS = 4
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # Java DefaultMQProducer.maxMessageSize
ZLIB_LEVEL = 5  # Java compressMsgBodyOverHowmuch + Deflater(level 5)
# Stored-but-not-flushed answers: the message is safe in the broker's memory,
# Java reports them as a SendStatus, not as an error, and never resends them.
_STORED_CODES: dict[int, str] = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
}
_RETRIABLE_SEND_CODES = frozenset({ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_BUSY,
                                   ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.FLOW_CONTROL,
                                   ResponseCode.TOPIC_NOT_EXIST})


@dataclass(frozen=True)
class SendResult:
    """Where a message (or batch) was stored. For batches the ids are comma-joined, like Java."""

    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    status: str = "SEND_OK"
    region: str | None = None

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",")

    def to_dict(self) -> dict[str, Any]:
        return {"msg_id": self.msg_id, "offset_msg_id": self.offset_msg_id, "topic": self.queue.topic,
                "broker": self.queue.broker_name, "queue_id": self.queue.queue_id,
                "queue_offset": self.queue_offset, "status": self.status}


class _NotSent(RocketMQError):
    """Internal: the attempt certainly did not store the message; try another queue."""

    retriable = True

    def __init__(self, cause: RocketMQError, broker: str) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.broker = broker


def validate_message(msg: Message, max_size: int = MAX_MESSAGE_SIZE) -> None:
    """Java Validators.checkMessage: topic name and body size, as ConfigError naming the field."""
    if not isinstance(msg, Message):
        raise ConfigError("message", f"expected a Message, got {type(msg).__name__}")
    topic = check_topic(msg.topic)
    if topic == DEFAULT_TOPIC:
        raise ConfigError("topic", f"{DEFAULT_TOPIC} is reserved by the broker")
    if not msg.body:
        raise ConfigError("body", "must not be empty")
    if len(msg.body) > max_size:
        raise ConfigError("body", f"{len(msg.body)} bytes exceed the maximum message size {max_size}")


def select_by_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """Java SelectMessageQueueByHash: ``abs(key.hashCode() % n)`` (Java remainder semantics)."""
    h = java_string_hash(key)
    n = len(queues)
    r = abs(h) % n  # |h % n| in Java equals |h| % n in Python for the remainder's magnitude
    return queues[r]


def build_send_request(msg: Message, mq: MessageQueue, group: str, *, born_timestamp: int | None = None,
                       compress_over: int = COMPRESS_OVER, default_topic: str = DEFAULT_TOPIC,
                       unit_mode: bool = False) -> RemotingCommand:
    """SEND_MESSAGE_V2 for one message as Java builds it (pure: no I/O, no mutation of ``msg``)."""
    props = dict(msg.properties)
    props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_id())
    props.setdefault(PROPERTY_WAIT, "true")
    body = msg.body
    sys_flag = 0
    if len(body) >= compress_over:  # Java: body.length >= compressMsgBodyOverHowmuch
        body = zlib.compress(body, ZLIB_LEVEL)
        sys_flag |= FLAG_COMPRESSED | COMPRESSION_ZLIB
    reconsume = "0"
    max_reconsume: str | None = None
    if mq.topic.startswith(RETRY_PREFIX):
        # Java moves these two into the header for %RETRY% sends (the broker routes to DLQ on them).
        reconsume = props.pop(PROPERTY_RECONSUME_TIME, "0")
        max_reconsume = props.pop(PROPERTY_MAX_RECONSUME_TIMES, None)
    prop_text = properties_to_string(props)
    if len(prop_text.encode("utf-8")) > MAX_PROPERTIES_LEN:
        raise ConfigError("properties", f"encoded properties exceed {MAX_PROPERTIES_LEN} bytes")
    ext: dict[str, Any] = {
        "a": group, "b": mq.topic, "c": default_topic, "d": DEFAULT_TOPIC_QUEUE_NUMS, "e": mq.queue_id,
        "f": sys_flag, "g": born_timestamp if born_timestamp is not None else int(time.time() * 1000),
        "h": msg.flag, "i": prop_text, "j": reconsume, "k": unit_mode,
    }
    if max_reconsume is not None:
        ext["l"] = max_reconsume
    ext["m"] = False
    ext["n"] = mq.broker_name
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)


def prepare_batch(msgs: Iterable[Message]) -> list[Message]:
    """Copies of ``msgs`` each carrying UNIQ_KEY and WAIT (Java MessageBatch.generateFromList)."""
    out: list[Message] = []
    topic: str | None = None
    for m in msgs:
        if m.properties.get("DELAY"):
            raise ConfigError("delay_level", "delayed messages cannot be sent in a batch")
        if m.topic.startswith(RETRY_PREFIX):
            raise ConfigError("topic", "retry topics cannot be sent in a batch")
        if topic is None:
            topic = m.topic
        elif m.topic != topic:
            raise ConfigError("topic", f"a batch must have one topic ({topic!r} and {m.topic!r} mixed)")
        copy = Message(m.topic, m.body, flag=m.flag)
        copy.properties = dict(m.properties)
        copy.properties.setdefault(PROPERTY_UNIQ_KEY, new_uniq_id())
        copy.properties.setdefault(PROPERTY_WAIT, "true")
        out.append(copy)
    if not out:
        raise ConfigError("messages", "a batch needs at least one message")
    return out


def build_batch_request(msgs: Sequence[Message], mq: MessageQueue, group: str, *,
                        born_timestamp: int | None = None) -> RemotingCommand:
    """SEND_BATCH_MESSAGE: V2 header with ``m=true``; batches are never compressed."""
    body = encode_batch(msgs)
    ext: dict[str, Any] = {
        "a": group, "b": mq.topic, "c": DEFAULT_TOPIC, "d": DEFAULT_TOPIC_QUEUE_NUMS, "e": mq.queue_id,
        "f": 0, "g": born_timestamp if born_timestamp is not None else int(time.time() * 1000),
        "h": 0, "i": properties_to_string({PROPERTY_WAIT: "true"}), "j": 0, "k": False, "m": True,
        "n": mq.broker_name,
    }
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body)


class AsyncProducer(ClientFacade):
    """asyncio producer (see module docstring). One `MQClient` unless one is passed in."""

    def __init__(self, config: ClientConfig | None = None, group: str = "DEFAULT_PRODUCER",
                 mqclient: MQClient | None = None, *, retry_times: int = 2,
                 compress_over: int = COMPRESS_OVER, max_message_size: int = MAX_MESSAGE_SIZE,
                 send_timeout: float | None = None, auto_create_topic: bool = True) -> None:
        if not group or not isinstance(group, str):
            raise ConfigError("group", "producer group must be a non-empty string")
        if isinstance(retry_times, bool) or not isinstance(retry_times, int) or not 0 <= retry_times <= 16:
            raise ConfigError("retry_times", f"must be an integer in [0, 16], got {retry_times!r}")
        if compress_over < 0:
            raise ConfigError("compress_over", "must be >= 0")
        super().__init__(config, mqclient)
        self.group = group
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.max_message_size = max_message_size
        self.send_timeout = send_timeout
        self.auto_create_topic = auto_create_topic
        self._counter = itertools.count()
        self._closed = False

    async def close(self) -> None:
        """Refuse further sends; close the connections if this producer created its MQClient."""
        self._closed = True
        await super().close()

    # -- queue selection ---------------------------------------------------------
    async def publish_queues(self, topic: str, refresh: bool = False) -> list[MessageQueue]:
        """Writable queues of ``topic`` (TBW102's brokers when the topic does not exist yet)."""
        try:
            route = await self.client.get_route(topic, refresh=refresh)
            queues = route.publish_queues(self.client.ns(topic))
            if queues:
                return queues
            raise RouteNotFoundError(f"topic {topic!r} has no writable queue")
        except RouteNotFoundError:
            if not self.auto_create_topic:
                raise
        # Like Java: fall back to TBW102's brokers; a broker with autoCreateTopicEnable
        # creates the topic (4 queues) on the first send.
        try:
            default = await self.client.get_route(DEFAULT_TOPIC)
        except RouteNotFoundError:
            raise RouteNotFoundError(
                f"topic {topic!r} does not exist and the brokers do not auto-create topics "
                f"(create it first, e.g. `rocketmq-airflow topic create --topic {topic}`)") from None
        return _default_topic_queues(default, self.client.ns(topic))

    def _pick(self, queues: list[MessageQueue], last_failed_broker: str | None) -> MessageQueue:
        start = next(self._counter)
        if last_failed_broker is not None:
            for i in range(len(queues)):
                mq = queues[(start + i) % len(queues)]
                if mq.broker_name != last_failed_broker:
                    return mq
        return queues[start % len(queues)]

    # -- sending ------------------------------------------------------------------
    async def send(self, msg: Message, queue: MessageQueue | None = None,
                   key: str | None = None) -> SendResult:
        """Send one message; ``queue`` pins the queue, ``key`` picks one by hash (ordered sends)."""
        validate_message(msg, self.max_message_size)
        uniq = msg.properties.get(PROPERTY_UNIQ_KEY) or new_uniq_id()
        props = dict(msg.properties)
        props[PROPERTY_UNIQ_KEY] = uniq  # the same id on every attempt
        prepared = Message(msg.topic, msg.body, flag=msg.flag)
        prepared.properties = props

        def build(mq: MessageQueue) -> RemotingCommand:
            return build_send_request(prepared, mq, self.client.ns(self.group),
                                      compress_over=self.compress_over)
        return await self._send_with_retries(msg.topic, build, queue, key, uniq)

    async def send_batch(self, msgs: Iterable[Message], queue: MessageQueue | None = None,
                         key: str | None = None) -> SendResult:
        """Send messages of one topic in one SEND_BATCH_MESSAGE (all land in one queue)."""
        items = prepare_batch(msgs)
        for m in items:
            validate_message(m, self.max_message_size)
        size = len(encode_batch(items))
        if size > self.max_message_size:
            raise ConfigError("messages", f"batch of {size} bytes exceeds the maximum {self.max_message_size}")
        uniq = ",".join(m.properties[PROPERTY_UNIQ_KEY] for m in items)
        group = self.client.ns(self.group)
        return await self._send_with_retries(items[0].topic, lambda mq: build_batch_request(items, mq, group),
                                             queue, key, uniq)

    async def _send_with_retries(self, topic: str, build: Any, queue: MessageQueue | None,
                                 key: str | None, uniq: str) -> SendResult:
        if self._closed:
            raise ClientStateError("producer is closed")
        if queue is not None and not isinstance(queue, MessageQueue):
            raise ConfigError("queue", f"expected a MessageQueue(topic, broker_name, queue_id), got {queue!r}")
        if key is not None and not isinstance(key, str):
            raise ConfigError("key", f"must be a string, got {type(key).__name__}")
        if queue is not None and self.client.ns(queue.topic) != self.client.ns(topic):
            raise ConfigError("queue", f"queue {queue} belongs to another topic than {topic!r}")
        if queue is not None and key is not None:
            raise ConfigError("key", "give either queue= or key=, not both")
        try:
            return await self._attempts(topic, build, queue, key, uniq)
        except _NotSent as exc:  # every attempt was rejected: surface the broker's own error
            raise exc.cause from None

    async def _attempts(self, topic: str, build: Any, fixed: MessageQueue | None,
                        key: str | None, uniq: str) -> SendResult:
        last_broker: str | None = None
        async for attempt in AsyncRetrying(stop=stop_after_attempt(self.retry_times + 1),
                                           wait=wait_random_exponential(multiplier=0.05, max=1.0),
                                           retry=retry_if_exception(lambda e: isinstance(e, _NotSent)),
                                           reraise=True):
            with attempt:
                if fixed is not None:
                    mq = MessageQueue(self.client.ns(fixed.topic), fixed.broker_name, fixed.queue_id)
                else:
                    # after a failure, re-read the route: the broker may be gone or the topic moved
                    queues = await self.publish_queues(topic, refresh=last_broker is not None)
                    mq = select_by_key(queues, key) if key is not None else self._pick(queues, last_broker)
                try:
                    return await self._send_once(mq, build(mq), uniq)
                except _NotSent as exc:
                    last_broker = exc.broker
                    log.warning("send to %s not stored (%s); %s", mq, exc.cause,
                                "retrying" if attempt.retry_state.attempt_number <= self.retry_times
                                else "giving up")
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send_once(self, mq: MessageQueue, cmd: RemotingCommand, uniq: str) -> SendResult:
        addr = await self.client.master_addr(mq)
        loop = asyncio.get_running_loop()
        budget = self.send_timeout if self.send_timeout is not None else self.client.timeout
        deadline = loop.time() + budget  # one deadline for connect + reply
        try:
            await self.client.pool.get(addr, budget)  # connect first: a refused or timed-out connect sent nothing
        except (ConnectionClosedError, RequestTimeoutError) as exc:
            raise _NotSent(exc, mq.broker_name) from exc
        resp = await self.client.invoke(addr, cmd, max(deadline - loop.time(), 0.001))
        status = _STORED_CODES.get(resp.code)
        if status is None:
            err = broker_error(resp.code, resp.remark, addr=addr)
            # an ACL refusal comes as SYSTEM_ERROR; unlike Java we do not retry it: the answer won't change
            if resp.code in _RETRIABLE_SEND_CODES and not isinstance(err, AclDeniedError):
                raise _NotSent(err, mq.broker_name) from None
            raise err
        try:
            queue_id = int(resp.ext.get("queueId", mq.queue_id))
            offset = int(resp.ext.get("queueOffset", "-1"))
        except ValueError:
            raise ProtocolError(f"send response from {addr} has a non-integer queueId/queueOffset: "
                                f"{resp.ext}") from None
        return SendResult(uniq, resp.ext.get("msgId", ""), MessageQueue(mq.topic, mq.broker_name, queue_id),
                          offset, status, resp.ext.get("MSG_REGION"))


def _default_topic_queues(route: TopicRouteData, topic: str) -> list[MessageQueue]:
    """Java MQClientInstance: queues of TBW102's brokers, min(4, writeQueueNums) each."""
    out: list[MessageQueue] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        b = route.broker(q.broker_name)
        if not q.writable or b is None or b.master_addr() is None:
            continue
        n = min(DEFAULT_TOPIC_QUEUE_NUMS, q.write_queue_nums)
        out.extend(MessageQueue(topic, q.broker_name, i) for i in range(n))
    if not out:
        raise RouteNotFoundError(f"no writable broker can auto-create topic {topic!r}")
    return out


class Producer(SyncFacade[AsyncProducer]):
    """Synchronous producer facade (context manager) over `AsyncProducer` on a private loop thread."""

    def __init__(self, config: ClientConfig | None = None, group: str = "DEFAULT_PRODUCER",
                 **options: Any) -> None:
        cfg = (config or ClientConfig()).validate()
        super().__init__("rocketmq-producer", lambda: AsyncProducer(cfg, group, **options))
        self._started = False

    @property
    def group(self) -> str:
        return self._impl.group

    def start(self) -> Producer:
        if not self._started:
            self._loop.run(self._impl.start())
            self._started = True
        return self

    def send(self, msg: Message, queue: MessageQueue | None = None, key: str | None = None,
             timeout: float | None = None) -> SendResult:
        self.start()
        return self._call(self._impl.send(msg, queue, key), timeout, "send")

    def send_batch(self, msgs: Iterable[Message], queue: MessageQueue | None = None,
                   key: str | None = None, timeout: float | None = None) -> SendResult:
        self.start()
        return self._call(self._impl.send_batch(list(msgs), queue, key), timeout, "send_batch")

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop.run(self._impl.publish_queues(topic))

    def shutdown(self) -> None:
        """Same as close()."""
        self.close()

    def __enter__(self) -> Producer:  # noqa: PYI034 - Self needs Python 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["AsyncProducer", "BrokerError", "Producer", "SendResult", "build_batch_request",
           "build_send_request", "select_by_key", "validate_message"]
