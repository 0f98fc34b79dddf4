"""What a send looks like on the wire, without I/O: requests as Java builds them, and answers.

`build_send_request` / `build_batch_request` are the reference builders (the tests hold them to
recorded Java frames byte for byte). `SendFrameRenderer` renders the same SEND_MESSAGE_V2 frame
from parts it caches per topic and broker, for the hot paths (`Producer.send`, pipelined sends);
a test holds it to the reference builder. `send_result` turns an answer into a `SendResult`, a
typed error, or `NotSentError` when the broker certainly did not store the message.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .codes import CLIENT_VERSION, RequestCode, ResponseCode
from .command import MAX_FRAME, RemotingCommand, json_text
from .errors import (
    AclDeniedError,
    ConfigError,
    FrameTooLargeError,
    ProtocolError,
    RefusedRequest,
    RocketMQError,
    broker_error,
)
from .message import (
    COMPRESS_OVER,
    COMPRESSION_ZLIB,
    FLAG_COMPRESSED,
    MAX_PROPERTIES_LEN,
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    Message,
    encode_batch,
    java_string_hash,
    properties_to_string,
)
from .names import DEFAULT_TOPIC, RETRY_PREFIX, check_topic
from .queue import MessageQueue

DEFAULT_TOPIC_QUEUE_NUMS = 4
MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # Java DefaultMQProducer.maxMessageSize
ZLIB_LEVEL = 5  # Java compressMsgBodyOverHowmuch + Deflater(level 5)
# Stored-but-not-flushed answers: the message is safe in the broker's memory,
# Java reports them as a SendStatus, not as an error, and never resends them.
STORED_CODES: dict[int, str] = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
}
# Answers given before anything is stored: another attempt cannot duplicate the message.
RETRIABLE_SEND_CODES = frozenset({ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_BUSY,
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

    def split(self, n: int) -> list[SendResult]:
        """One result per message of a batch of ``n``: a batch is stored in one piece, so message
        ``i`` sits at ``queue_offset + i`` (verified on 4.9.7); ids come from the comma lists."""
        ids = self.msg_id.split(",")
        offset_ids = self.offset_msg_id.split(",")
        if len(ids) != n:
            raise ProtocolError(f"a batch of {n} message(s) got a result for {len(ids)}")
        if len(offset_ids) != n:  # the broker did not list one id per message: leave them unknown
            offset_ids = [""] * n
        queue, offset, status, region = self.queue, self.queue_offset, self.status, self.region
        return [new_result(ids[i], offset_ids[i], queue, offset + i, status, region) for i in range(n)]


_new = object.__new__
_set = object.__setattr__


def new_result(msg_id: str, offset_msg_id: str, queue: MessageQueue, queue_offset: int, status: str,
               region: str | None) -> SendResult:
    """`SendResult(...)` without the frozen dataclass's six guarded setattr calls (one per message on the
    pipelined path): the same object, fields in its ``__dict__``."""
    r: SendResult = _new(SendResult)
    _set(r, "__dict__", {"msg_id": msg_id, "offset_msg_id": offset_msg_id, "queue": queue,
                         "queue_offset": queue_offset, "status": status, "region": region})
    return r


class NotSentError(RocketMQError):
    """The attempt certainly did not store the message: another attempt cannot duplicate it."""

    retriable = True

    def __init__(self, cause: RocketMQError, broker: str) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.broker = broker
        self.queue: MessageQueue | None = None  # the queue tried, when known (for the log)


# the request a send answer refers to, as an ACL refusal names it (the remark names the user)
_SENT = RefusedRequest(RequestCode.SEND_MESSAGE_V2)


def send_result(resp: RemotingCommand, mq: MessageQueue, uniq: str, addr: str) -> SendResult:
    """The answer to a send of ``mq``: a SendResult, `NotSentError`, or the broker's typed error."""
    queue, offset, status, offset_msg_id, region = send_answer(resp, mq, addr)
    return new_result(uniq, offset_msg_id, queue, offset, status, region)


def send_answer(resp: RemotingCommand, mq: MessageQueue, addr: str) -> tuple[MessageQueue, int, str, str, str | None]:
    """`send_result`'s parts: (queue, queue offset, status, offset msg id(s), region); raises as it does."""
    code = resp.code
    status = STORED_CODES.get(code)
    if status is None:
        err = broker_error(code, resp.remark, addr=addr, request=_SENT)
        # an ACL refusal (SYSTEM_ERROR on 4.x, NO_PERMISSION on 5.x): unlike Java we do not retry it
        if code in RETRIABLE_SEND_CODES and not isinstance(err, AclDeniedError):
            raise NotSentError(err, mq.broker_name)
        raise err
    ext = resp.ext
    try:
        queue_id = int(ext.get("queueId", mq.queue_id))
        offset = int(ext.get("queueOffset", "-1"))
    except ValueError:
        raise ProtocolError(f"send response from {addr} has a non-integer queueId/queueOffset: {ext}") from None
    if queue_id != mq.queue_id:
        mq = MessageQueue(mq.topic, mq.broker_name, queue_id)
    return mq, offset, status, ext.get("msgId", ""), ext.get("MSG_REGION")


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


def prepared(msg: Message, new_id: Callable[[], str]) -> tuple[Message, str]:
    """A copy of ``msg`` carrying its UNIQ_KEY (``new_id()`` unless it has one; kept on every attempt,
    so a duplicate is recognisable) and ``WAIT=true`` unless set, in the order Java adds them."""
    props = dict(msg.properties)
    uniq = props.get(PROPERTY_UNIQ_KEY) or new_id()
    props[PROPERTY_UNIQ_KEY] = uniq
    props.setdefault(PROPERTY_WAIT, "true")
    copy = Message.__new__(Message)
    copy.topic, copy.body, copy.flag, copy.properties = msg.topic, msg.body, msg.flag, props
    return copy, uniq


def select_by_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """Java SelectMessageQueueByHash: ``abs(key.hashCode() % n)`` (Java remainder semantics)."""
    h = java_string_hash(key)
    n = len(queues)
    r = abs(h) % n  # |h % n| in Java equals |h| % n in Python for the remainder's magnitude
    return queues[r]


def build_send_request(msg: Message, mq: MessageQueue, group: str, *, born_timestamp: int | None = None,
                       compress_over: int = COMPRESS_OVER, default_topic: str = DEFAULT_TOPIC,
                       unit_mode: bool = False) -> RemotingCommand:
    """SEND_MESSAGE_V2 for one message as Java builds it (pure: no I/O, no mutation of ``msg``).

    ``msg`` carries its UNIQ_KEY already (`prepared`): the builder adds ``WAIT=true`` unless set, no id.
    """
    props = dict(msg.properties)
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


_FRAME_PREFIX = struct.Struct(">iI")  # length, then serialize type 0 (JSON) << 24 | header length


class SendFrameRenderer:
    """SEND_MESSAGE_V2 frames equal to ``build_send_request(...).encode()``, rendered from cached parts.

    For the send hot paths: the header's JSON is the same text for every message of a topic and
    broker except the queue id, flags, timestamp, properties and opaque, so only those are
    formatted per message (about a fifth of building and encoding a `RemotingCommand`).
    ``%RETRY%`` topics (whose header carries two properties) are not rendered here: use
    `build_send_request`. Messages must come from `prepared` (UNIQ_KEY set).
    """

    __slots__ = ("_compress_over", "_group", "_heads", "_tails")

    def __init__(self, group: str, compress_over: int = COMPRESS_OVER) -> None:
        self._group = json_text(group)
        self._compress_over = compress_over
        self._heads: dict[str, str] = {}
        self._tails: dict[str, str] = {}

    def properties(self, msg: Message) -> str:
        """The properties text a send carries (``WAIT=true`` added unless set), length checked."""
        props = msg.properties
        if PROPERTY_WAIT not in props:
            props = {**props, PROPERTY_WAIT: "true"}
        text = properties_to_string(props)
        # a code point is at most 4 UTF-8 bytes: only long texts need encoding to be measured
        if len(text) * 4 > MAX_PROPERTIES_LEN and len(text.encode("utf-8")) > MAX_PROPERTIES_LEN:
            raise ConfigError("properties", f"encoded properties exceed {MAX_PROPERTIES_LEN} bytes")
        return text

    def frame(self, msg: Message, mq: MessageQueue, opaque: int, born_timestamp: int,
              prop_text: str | None = None) -> bytes:
        topic = mq.topic
        if topic.startswith(RETRY_PREFIX):
            raise ValueError("SendFrameRenderer does not render %RETRY% sends (use build_send_request)")
        head = self._heads.get(topic)
        if head is None:
            head = self._heads[topic] = (f'{{"code":{RequestCode.SEND_MESSAGE_V2},"extFields":{{"a":{self._group},'
                                         f'"b":{json_text(topic)},"c":{json_text(DEFAULT_TOPIC)},'
                                         f'"d":"{DEFAULT_TOPIC_QUEUE_NUMS}","e":"')
        broker = mq.broker_name
        tail = self._tails.get(broker)
        if tail is None:
            tail = self._tails[broker] = (f',"j":"0","k":"false","m":"false","n":{json_text(broker)}}},'
                                          '"flag":0,"language":"PYTHON","opaque":')
        body = msg.body
        sys_flag = 0
        if len(body) >= self._compress_over:
            body = zlib.compress(body, ZLIB_LEVEL)
            sys_flag = FLAG_COMPRESSED | COMPRESSION_ZLIB
        if prop_text is None:
            prop_text = self.properties(msg)
        header = (f'{head}{mq.queue_id}","f":"{sys_flag}","g":"{born_timestamp}","h":"{msg.flag}",'
                  f'"i":{json_text(prop_text)}{tail}{opaque},"serializeTypeCurrentRPC":"JSON",'
                  f'"version":{CLIENT_VERSION}}}').encode()
        length = 4 + len(header) + len(body)
        if length > MAX_FRAME:
            raise FrameTooLargeError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
        return b"".join((_FRAME_PREFIX.pack(length, len(header)), header, body))


def batchable(msg: Message, compress_over: int) -> bool:
    """May travel in a SEND_BATCH_MESSAGE: not delayed, not a %RETRY% topic, and small enough that
    a single send would not compress it (batches never are, so big bodies keep Java's compression)."""
    return (len(msg.body) < compress_over and not msg.topic.startswith(RETRY_PREFIX)
            and not msg.properties.get(PROPERTY_DELAY))


def prepare_batch(msgs: Iterable[Message], new_id: Callable[[], str]) -> list[Message]:
    """Copies of ``msgs`` each carrying UNIQ_KEY (``new_id()`` unless set) and WAIT (Java
    MessageBatch.generateFromList)."""
    out: list[Message] = []
    topic: str | None = None
    for m in msgs:
        if m.properties.get(PROPERTY_DELAY):
            raise ConfigError("delay_level", "delayed messages cannot be sent in a batch")
        if m.topic.startswith(RETRY_PREFIX):
            raise ConfigError("topic", "retry topics cannot be sent in a batch")
        if topic is None:
            topic = m.topic
        elif m.topic != topic:
            raise ConfigError("topic", f"a batch must have one topic ({topic!r} and {m.topic!r} mixed)")
        copy = Message(m.topic, m.body, flag=m.flag)
        copy.properties = dict(m.properties)
        if PROPERTY_UNIQ_KEY not in copy.properties:
            copy.properties[PROPERTY_UNIQ_KEY] = new_id()
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


__all__ = [
    "DEFAULT_TOPIC_QUEUE_NUMS",
    "MAX_MESSAGE_SIZE",
    "NotSentError",
    "SendFrameRenderer",
    "SendResult",
    "batchable",
    "build_batch_request",
    "build_send_request",
    "new_result",
    "prepare_batch",
    "prepared",
    "select_by_key",
    "send_answer",
    "send_result",
    "validate_message",
]
