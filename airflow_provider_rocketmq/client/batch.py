"""What a pull result is, as the consumer caches and delivers it (docs/CONTRACTS.md, "Wave 2").

A `BatchDecoder` turns one pull response body into a `PulledBatch`: a summary the
process queue needs for flow control (offsets, count, body bytes) plus whatever
representation the listener wants (e.g. Arrow columns, `client/columnar.py`).
`messages()` materialises `MessageExt` objects for the failure paths (send-back).
Types only: the pull loop and the listeners live in `client/consumer/`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from .message import MessageExt
from .queue import MessageQueue


class PullFilter(NamedTuple):
    """What the pull service asks a decoder to apply to one pull body."""

    stop: int | None  # keep offsets < stop (the queue's stop offset), else None
    tags: frozenset[str] | None  # exact tag re-filter (tag-hash collisions), None = keep all
    restore_retry_topic: bool  # %RETRY% queues: topic := RETRY_TOPIC property
    namespace: str  # strip "ns%" from topics when non-empty


class PulledBatch(Protocol):
    """One pull result of one queue, after the filter."""

    mq: MessageQueue
    first_offset: int  # queue offset of the first message kept
    last_offset: int  # of the last message kept
    count: int  # messages kept (>= 1)
    body_bytes: int  # sum of body lengths (flow control; Java counts bodies)

    def messages(self) -> list[MessageExt]:
        """Materialise the kept messages (send-back and other failure paths)."""
        ...


# None: nothing left after the filter (the pull loop still moves on to nextBeginOffset)
BatchDecoder = Callable[[bytes, MessageQueue, PullFilter], "PulledBatch | None"]
