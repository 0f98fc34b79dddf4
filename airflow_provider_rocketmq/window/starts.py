"""Where a window begins in each queue, asked of the brokers (no Airflow).

A queue's start is the group's committed offset (raised to the queue's min offset when retention
deleted offsets past it); for a queue the group never committed, its min offset when the group has
consumed from the topic (another queue has a committed offset above 0: the queue was added to the
topic since, and everything in it is new to the group - the push consumer decides the same, see
client/consumer/start_offset.py), else what ``consume_from_where`` says: the first offset, the offset
of a timestamp, or the high-water mark ("last": a new group reading from the last offset has nothing
in this window); never past the high-water mark. Its floor: below it the offsets are in another window
(committed) or gone (min offset). Used by the consuming window (`AdminStarts`, the collector's
`QueueStarts`) and the offsets snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from airflow_provider_rocketmq.client.consumer.config import ConsumeFromWhere
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.window.collector import QueueKey

log = logging.getLogger(__name__)


class StartAdmin(Protocol):
    """The part of `Admin` that tells where a queue starts."""

    def committed_offset(self, group: str, mq: MessageQueue) -> int: ...

    def min_offset(self, mq: MessageQueue) -> int: ...

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


@dataclass(frozen=True)
class GroupStart:
    """Where a consumer group starts reading a queue it never committed."""

    consumer_group: str
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    consume_timestamp_ms: int | None = None


def initial_offset(admin: StartAdmin, group: GroupStart, mq: MessageQueue, high_water: int,
                   consumed: Callable[[], bool] | None = None) -> int:
    """Where the window's part of ``mq`` begins (see the module docstring); ``consumed()`` tells whether
    the group has consumed from the topic (asked only for a queue it never committed)."""
    committed = admin.committed_offset(group.consumer_group, mq)
    low = admin.min_offset(mq)
    if committed >= 0:
        if committed < low:
            log.warning("%s: the group's offset %d is below the queue's min offset %d (retention deleted "
                        "offsets %d..%d before this window); the window starts at %d", mq, committed, low,
                        committed, low - 1, low)
        return min(max(committed, low), high_water)
    if group.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return low
    if consumed is not None and consumed():
        log.info("%s: no committed offset, but the group consumes the topic (a queue added to it): the window "
                 "starts at its min offset %d", mq, low)
        return low
    if group.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        assert group.consume_timestamp_ms is not None
        return min(admin.search_offset(mq, group.consume_timestamp_ms), high_water)
    return high_water


def decidable_queues(admin: StartAdmin, group: GroupStart, marks: Mapping[MessageQueue, int],
                     unreachable: Mapping[str, str]) -> dict[MessageQueue, int]:
    """``marks`` without the queues whose start cannot be decided while a broker is unreachable.

    A queue the group never committed starts where `initial_offset` says, which (unless the group
    reads from the first offset) depends on whether the group has consumed the topic. With a broker
    unreachable, the group's commits may all be on it: when no reachable queue shows a commit above 0,
    the never-committed queues wait for the next window, as the unreachable broker's queues do, instead
    of starting at the high-water mark or a timestamp and skipping what a topic's added queues hold."""
    if not unreachable or group.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return dict(marks)
    consumed = GroupConsumed(admin, group.consumer_group, marks)
    committed = consumed.offsets()
    if consumed():
        return dict(marks)  # the group has consumed the topic: every start is decided
    waiting = sorted(mq for mq, off in committed.items() if off < 0)
    if waiting:
        log.warning("queues %s: never committed by %s, and whether the group consumed the topic is on "
                    "unreachable broker(s) %s: left to the next window", ", ".join(map(str, waiting)),
                    group.consumer_group, ", ".join(sorted(unreachable)))
    return {mq: high for mq, high in marks.items() if mq not in waiting}


def floor_offset(admin: StartAdmin, group: GroupStart, mq: MessageQueue) -> int:
    """Below this offset ``mq``'s messages are in another window (committed) or gone (min offset)."""
    return max(admin.committed_offset(group.consumer_group, mq), admin.min_offset(mq))


class GroupConsumed:
    """Whether a group has consumed from a topic: a committed offset above 0 on one of ``queues``
    (asked once, when first needed)."""

    def __init__(self, admin: StartAdmin, group: str, queues: Iterable[MessageQueue]) -> None:
        self.admin, self.group, self.queues = admin, group, list(queues)
        self._answer: bool | None = None
        self._offsets: dict[MessageQueue, int] | None = None

    def offsets(self) -> dict[MessageQueue, int]:
        """The group's committed offset of every queue (-1: none), read once."""
        if self._offsets is None:
            self._offsets = {mq: self.admin.committed_offset(self.group, mq) for mq in self.queues}
        return self._offsets

    def __call__(self) -> bool:
        if self._answer is None:
            read = self._offsets.values() if self._offsets is not None else (
                self.admin.committed_offset(self.group, mq) for mq in self.queues)  # stops at the first
            self._answer = any(off > 0 for off in read)
        return self._answer


class AdminStarts:
    """The collector's `QueueStarts` for the queues of one window's snapshot."""

    def __init__(self, admin: StartAdmin, group: GroupStart, high_water: Mapping[MessageQueue, int]) -> None:
        self.admin = admin
        self.group = group
        self.high_water = dict(high_water)
        self.queues: dict[QueueKey, MessageQueue] = {(mq.broker_name, mq.queue_id): mq for mq in high_water}
        self.consumed = GroupConsumed(admin, group.consumer_group, high_water)

    def initial(self, key: QueueKey) -> int:
        mq = self.queues[key]
        return initial_offset(self.admin, self.group, mq, self.high_water[mq], self.consumed)

    def floor(self, key: QueueKey) -> int:
        return floor_offset(self.admin, self.group, self.queues[key])
