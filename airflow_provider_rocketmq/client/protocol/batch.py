"""What a pull result is, as the push consumer caches and delivers it to a batch listener.

A `BatchDecoder` turns one pull response body into a `PulledBatch` after
applying the `PullFilter` the pull loop asks for (stop offset, exact tags,
the original topic of retried messages, the namespace). The consumer caches
the batch by its summary only (first/last offset, count, body bytes), so a
decoder that never builds one Python object per message (the columnar one of
``client/protocol/columnar.py``) keeps that property all the way to the listener.

`MessageBatch` / `decode_message_batch` are the reference implementation over
`decode_messages`: a list of `MessageExt` with the summary next to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from .message import PROPERTY_RETRY_TOPIC, MessageExt, decode_messages
from .names import RETRY_PREFIX, strip_namespace
from .queue import MessageQueue


class PullFilter(NamedTuple):
    """What the pull service asks a decoder to apply to one pull body."""

    stop: int | None  # keep offsets < stop (the queue's stop offset), else None
    tags: frozenset[str] | None  # exact tag re-filter (tag-hash collisions); None keeps all
    restore_retry_topic: bool  # %RETRY% queues: topic := the RETRY_TOPIC property
    namespace: str  # strip "ns%" from topics when non-empty


class PulledBatch(Protocol):
    """One pull result of one queue, after the filter."""

    @property
    def mq(self) -> MessageQueue: ...

    @property
    def first_offset(self) -> int: ...  # queue offset of the first message kept

    @property
    def last_offset(self) -> int: ...  # of the last message kept

    @property
    def count(self) -> int: ...  # messages kept (>= 1)

    @property
    def body_bytes(self) -> int: ...  # sum of body lengths (flow control counts bodies, like Java)

    def messages(self) -> list[MessageExt]:
        """The kept messages as objects (send-back and the other failure paths)."""
        ...


# None: nothing left after the filter (the pull loop still moves on to nextBeginOffset)
BatchDecoder = Callable[[bytes, MessageQueue, PullFilter], "PulledBatch | None"]


def filter_for(mq: MessageQueue, stop: int | None, tags: frozenset[str], namespace: str) -> PullFilter:
    """The filter the pull loop applies to ``mq`` (empty ``tags``: the subscription takes all)."""
    return PullFilter(stop, tags or None, mq.topic.startswith(RETRY_PREFIX), namespace)


def apply_filter(msgs: list[MessageExt], flt: PullFilter) -> list[MessageExt]:
    """Apply ``flt`` to decoded messages of one queue (in offset order); may return ``msgs`` itself."""
    stop = flt.stop
    if stop is not None and msgs and msgs[-1].queue_offset >= stop:
        msgs = [m for m in msgs if m.queue_offset < stop]
    tags = flt.tags
    if tags is not None:
        msgs = [m for m in msgs if m.tags in tags]
    if flt.restore_retry_topic:
        for m in msgs:
            original = m.properties.get(PROPERTY_RETRY_TOPIC)
            if original:
                m.topic = original
    ns = flt.namespace
    if ns:
        for m in msgs:
            m.topic = strip_namespace(ns, m.topic)
    return msgs


class MessageBatch:
    """A `PulledBatch` over a list of decoded messages (offset order, at least one)."""

    __slots__ = ("body_bytes", "count", "first_offset", "last_offset", "mq", "msgs")

    def __init__(self, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        if not msgs:
            raise ValueError("msgs: a batch holds at least one message")
        self.mq = mq
        self.msgs = msgs
        self.first_offset = msgs[0].queue_offset
        self.last_offset = msgs[-1].queue_offset
        self.count = len(msgs)
        self.body_bytes = sum([len(m.body) for m in msgs])

    def messages(self) -> list[MessageExt]:
        return self.msgs

    def __repr__(self) -> str:
        return (f"MessageBatch({self.mq}, offsets {self.first_offset}..{self.last_offset}, "
                f"{self.count} message(s), {self.body_bytes} body bytes)")


def decode_message_batch(body: bytes, mq: MessageQueue, flt: PullFilter) -> MessageBatch | None:
    """The reference `BatchDecoder`: `decode_messages` + `apply_filter`."""
    msgs = apply_filter(decode_messages(body, broker_name=mq.broker_name), flt)
    return MessageBatch(mq, msgs) if msgs else None


__all__ = ["BatchDecoder", "MessageBatch", "PullFilter", "PulledBatch", "apply_filter",
           "decode_message_batch", "filter_for"]
