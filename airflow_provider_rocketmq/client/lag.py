"""Consumer-group lag snapshots: the figures of ``mqadmin consumerProgress``.

Per queue: broker offset (max offset), consumer offset (committed), lag (their
difference) and the store time of the last consumed message; plus the total.
A snapshot is built either from GET_CONSUME_STATS answers (what mqadmin shows)
or, for a group without stats, from max offsets and committed offsets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .protocol.admin_bodies import ConsumeStats
from .protocol.queue import MessageQueue

SOURCE_CONSUME_STATS = "consume_stats"
SOURCE_OFFSETS = "offsets"


@dataclass(frozen=True)
class QueueLag:
    """Lag of one queue. ``consumer_offset`` is -1 when the group never committed there."""

    topic: str
    broker: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    last_timestamp: int = 0

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker, self.queue_id)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "broker": self.broker, "queue_id": self.queue_id,
                "broker_offset": self.broker_offset, "consumer_offset": self.consumer_offset,
                "lag": self.lag, "last_timestamp": self.last_timestamp}


@dataclass(frozen=True)
class LagSnapshot:
    """Lag of a consumer group (optionally one topic) at one moment."""

    group: str
    topic: str | None
    queues: tuple[QueueLag, ...] = field(default_factory=tuple)
    source: str = SOURCE_CONSUME_STATS

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)

    def by_queue(self) -> dict[MessageQueue, QueueLag]:
        return {q.queue: q for q in self.queues}

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "total_lag": self.total_lag,
                "source": self.source, "queues": [q.to_dict() for q in self.queues]}


def from_consume_stats(group: str, topic: str | None, stats: Iterable[ConsumeStats],
                       display: Any = None) -> LagSnapshot:
    """Merge per-broker ConsumeStats like mqadmin (lag = brokerOffset - consumerOffset).

    ``display`` maps a wire topic name to the name shown (namespace stripped).
    """
    show = display or (lambda t: t)
    queues: dict[MessageQueue, QueueLag] = {}
    for st in stats:
        for mq, w in st.offset_table.items():
            name = show(mq.topic)
            if topic is not None and name != topic:
                continue
            queues[mq] = QueueLag(name, mq.broker_name, mq.queue_id, w.broker_offset, w.consumer_offset,
                                  w.broker_offset - w.consumer_offset, w.last_timestamp)
    return LagSnapshot(group, topic, tuple(queues[mq] for mq in sorted(queues)), SOURCE_CONSUME_STATS)


def from_offsets(group: str, topic: str, rows: Iterable[tuple[MessageQueue, int, int, int]],
                 display: Any = None) -> LagSnapshot:
    """Lag from (queue, max offset, committed offset or -1, min offset) rows.

    Without a committed offset every message still stored counts as pending.
    """
    show = display or (lambda t: t)
    out = []
    for mq, max_off, committed, min_off in sorted(rows):
        start = committed if committed >= 0 else min_off
        out.append(QueueLag(show(mq.topic), mq.broker_name, mq.queue_id, max_off, committed,
                            max(max_off - start, 0)))
    return LagSnapshot(group, topic, tuple(out), SOURCE_OFFSETS)


def format_table(snapshot: LagSnapshot) -> str:
    """A readable table like mqadmin consumerProgress."""
    header = ("#Topic", "#Broker", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff")
    rows = [(q.topic, q.broker, str(q.queue_id), str(q.broker_offset), str(q.consumer_offset), str(q.lag))
            for q in snapshot.queues]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.append("")
    lines.append(f"Consume group: {snapshot.group}"
                 + (f"  topic: {snapshot.topic}" if snapshot.topic else "")
                 + f"  ({snapshot.source})")
    lines.append(f"Diff Total: {snapshot.total_lag}")
    return "\n".join(lines)
