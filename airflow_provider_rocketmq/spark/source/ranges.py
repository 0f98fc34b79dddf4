"""Offset ranges of the ``rocketmq`` data source, resolved once on the Spark driver (no Spark here).

A read is a list of `QueueSpan`s, offsets ``[start, end)`` of one queue of one
broker. The driver resolves them from the options (``startingOffsets`` /
``endingOffsets``, or a window manifest) against the brokers' min and max offsets,
applies ``failOnDataLoss`` to ranges that retention already deleted, and splits
large spans for ``minPartitions``; each Spark task then reads exactly one span.

Streaming offsets use the JSON shape of ``startingOffsets``:
``{"<topic>": {"<broker>:<queue_id>": <next offset to read>}}``, so a checkpointed
offset can be pasted into ``startingOffsets`` as is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.protocol.errors import ConfigError, RocketMQError
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .options import EARLIEST, JSON_EARLIEST, JSON_LATEST, LATEST, OffsetSpec, QueueKey, SourceOptions

log = logging.getLogger(__name__)

# a streaming offset: {topic: {"broker:queue_id": next offset}}
StreamOffset = dict[str, dict[str, int]]


class DataLossError(RocketMQError):
    """Offsets a read needs are no longer on the broker (retention deleted them)."""


@dataclass(frozen=True, order=True)
class QueueSpan:
    """Offsets ``[start, end)`` of one queue; ``topic`` is the name without namespace."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def key(self) -> str:
        return queue_key(self.broker, self.queue_id)

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic} {self.key} [{self.start}, {self.end})"


@dataclass(frozen=True)
class QueueBounds:
    """What a broker holds of one queue: offsets ``[min_offset, max_offset)``."""

    topic: str
    broker: str
    queue_id: int
    min_offset: int
    max_offset: int


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def parse_queue_key(key: str) -> QueueKey:
    broker, _, qid = key.rpartition(":")
    return broker, int(qid)


async def queue_bounds(client: MQClient, topics: Iterable[str]) -> list[QueueBounds]:
    """Min and max offset of every readable queue of ``topics`` (fresh routes), sorted."""
    mqs: list[MessageQueue] = []
    for topic in topics:
        route = await client.get_route(topic, refresh=True)
        mqs.extend(MessageQueue(topic, mq.broker_name, mq.queue_id)
                   for mq in route.subscribe_queues(client.ns(topic)))
    if not mqs:
        raise RocketMQError(f"topic(s) {', '.join(topics)} have no readable queue")

    async def one(mq: MessageQueue) -> QueueBounds:
        low, high = await asyncio.gather(client.min_offset(mq), client.max_offset(mq))
        return QueueBounds(mq.topic, mq.broker_name, mq.queue_id, low, high)

    return sorted(await asyncio.gather(*(one(mq) for mq in mqs)), key=lambda b: (b.topic, b.broker, b.queue_id))


def _resolve(spec: OffsetSpec, b: QueueBounds, default: str) -> int:
    if isinstance(spec, str):
        return b.min_offset if spec == EARLIEST else b.max_offset
    value = spec.get(b.topic, {}).get((b.broker, b.queue_id))
    if value is None:
        return b.min_offset if default == EARLIEST else b.max_offset
    if value == JSON_EARLIEST:
        return b.min_offset
    if value == JSON_LATEST:
        return b.max_offset
    return value


def _check_named_queues(spec: OffsetSpec, bounds: list[QueueBounds], option: str) -> None:
    """Every queue a JSON spec names must exist (a typo would otherwise read the default range)."""
    if isinstance(spec, str):
        return
    known = {(b.topic, b.broker, b.queue_id) for b in bounds}
    for topic, queues in spec.items():
        for broker, qid in queues:
            if (topic, broker, qid) not in known:
                raise ConfigError(f"{option}.{topic}", f"queue {queue_key(broker, qid)} does not exist "
                                  f"(queues: {', '.join(sorted(queue_key(b.broker, b.queue_id) for b in bounds if b.topic == topic))})")


def spans_from_options(opts: SourceOptions, bounds: list[QueueBounds]) -> list[QueueSpan]:
    """Resolve ``startingOffsets``/``endingOffsets`` against the queues' bounds (batch reads).

    Queues a JSON object does not name take the default (``earliest`` start,
    ``latest`` end). An end beyond the high-water mark or a start after the end
    is an error; a start below the min offset is handled by `apply_retention`.
    """
    _check_named_queues(opts.starting, bounds, "startingOffsets")
    _check_named_queues(opts.ending, bounds, "endingOffsets")
    spans: list[QueueSpan] = []
    for b in bounds:
        start = _resolve(opts.starting, b, EARLIEST)
        end = _resolve(opts.ending, b, LATEST)
        where = f"{b.topic}.{queue_key(b.broker, b.queue_id)}"
        if end > b.max_offset:
            raise ConfigError(f"endingOffsets.{where}", f"{end} is beyond the queue's max offset {b.max_offset}")
        if start > end:
            raise ConfigError(f"startingOffsets.{where}", f"{start} is after the end offset {end}")
        spans.append(QueueSpan(b.topic, b.broker, b.queue_id, start, end))
    return spans


def apply_retention(spans: Iterable[QueueSpan], bounds: Mapping[tuple[str, str, int], QueueBounds],
                    fail_on_data_loss: bool) -> list[QueueSpan]:
    """Check each span against the queue's current min offset (``failOnDataLoss``).

    A span starting below the min offset lost its first messages to retention:
    raise `DataLossError` (``fail_on_data_loss``), or log a warning and keep the
    part still on the broker.
    """
    out: list[QueueSpan] = []
    for s in spans:
        b = bounds.get((s.topic, s.broker, s.queue_id))
        if b is None:
            raise RocketMQError(f"{s.topic} {s.key}: the queue is not in the topic's route")
        if s.end > b.max_offset:
            raise RocketMQError(f"{s}: the broker holds offsets only up to {b.max_offset} "
                                "(was the queue truncated or the broker replaced?)")
        if s.start < b.min_offset and s.size:
            lost_to = min(b.min_offset, s.end)
            if fail_on_data_loss:
                raise DataLossError(data_loss_message(s, lost_to, b.min_offset))
            log.warning("%s; skipping them (failOnDataLoss=false)", data_loss_message(s, lost_to, b.min_offset,
                                                                                      hint=False))
            s = QueueSpan(s.topic, s.broker, s.queue_id, lost_to, s.end)
        out.append(s)
    return out


DATA_LOSS_HINT = "; set failOnDataLoss=false to skip them and read the rest"


def data_loss_message(span: QueueSpan, lost_to: int, min_offset: int, *, hint: bool = True) -> str:
    text = (f"{span.topic} {span.key}: offsets [{span.start}, {lost_to}) of the range [{span.start}, {span.end}) "
            f"are no longer on the broker (its min offset is {min_offset}; retention deleted them)")
    if hint:
        text += DATA_LOSS_HINT
    return text


async def plan_batch(client: MQClient, opts: SourceOptions) -> list[QueueSpan]:
    """The spans of a batch read: from the manifest or the offset options, retention applied."""
    if opts.manifest is not None:
        from airflow_provider_rocketmq.window.manifest import read_manifest

        manifest = read_manifest(opts.manifest, verify_files=False)
        if opts.topics and opts.topics != (manifest.topic,):
            raise ConfigError("topic", f"{opts.topics[0]!r} differs from the manifest's topic {manifest.topic!r}")
        bounds = await queue_bounds(client, [manifest.topic])
        spans = [QueueSpan(manifest.topic, q.broker, q.queue_id, q.start_offset, q.end_offset)
                 for q in manifest.queues]
    else:
        bounds = await queue_bounds(client, opts.topics)
        spans = spans_from_options(opts, bounds)
    by_queue = {(b.topic, b.broker, b.queue_id): b for b in bounds}
    return [s for s in apply_retention(spans, by_queue, opts.fail_on_data_loss) if s.size > 0]


def split_spans(spans: list[QueueSpan], min_partitions: int | None) -> list[QueueSpan]:
    """Split spans into at least ``min_partitions`` pieces, each offset in exactly one piece.

    Like Spark's Kafka source: only when there are fewer spans than asked, and each
    span gets a share of the pieces proportional to its size (at least one).
    """
    spans = [s for s in spans if s.size > 0]
    if not min_partitions or len(spans) >= min_partitions:
        return spans
    total = sum(s.size for s in spans)
    out: list[QueueSpan] = []
    for s in spans:
        parts = max(1, min(s.size, round(s.size / total * min_partitions)))
        for i in range(parts):
            lo = s.start + s.size * i // parts
            hi = s.start + s.size * (i + 1) // parts
            if hi > lo:
                out.append(QueueSpan(s.topic, s.broker, s.queue_id, lo, hi))
    return out


# --- streaming offsets --------------------------------------------------------------------------------

def offsets_of(bounds: Iterable[QueueBounds], pick: str) -> StreamOffset:
    """A streaming offset holding each queue's min (``earliest``) or max (``latest``) offset."""
    out: StreamOffset = {}
    for b in bounds:
        out.setdefault(b.topic, {})[queue_key(b.broker, b.queue_id)] = (
            b.min_offset if pick == EARLIEST else b.max_offset)
    return out


def initial_offset(opts: SourceOptions, bounds: list[QueueBounds]) -> StreamOffset:
    """The first micro-batch's start: ``startingOffsets`` resolved per queue (default earliest)."""
    _check_named_queues(opts.starting, bounds, "startingOffsets")
    out: StreamOffset = {}
    for b in bounds:
        start = min(_resolve(opts.starting, b, EARLIEST), b.max_offset)
        out.setdefault(b.topic, {})[queue_key(b.broker, b.queue_id)] = start
    return out


def limit_offsets(start: StreamOffset, latest: StreamOffset, max_rows: int | None) -> StreamOffset:
    """The end of the next micro-batch: ``latest``, or at most ``max_rows`` offsets past ``start``.

    The budget is shared out in proportion to each queue's backlog (as Spark's Kafka
    source does), every queue with a backlog moving by at least one offset. A queue
    absent from ``start`` (new since the query started) begins at the offset
    `latest` gives for it only if it is also there; ``end`` never moves a queue backwards.
    """
    end: StreamOffset = {}
    backlog: dict[tuple[str, str], tuple[int, int]] = {}
    for topic, queues in latest.items():
        for key, high in queues.items():
            low = start.get(topic, {}).get(key, 0)
            backlog[(topic, key)] = (low, max(low, high))
    for topic, queues in start.items():  # queues that vanished from the route keep their position
        for key, low in queues.items():
            backlog.setdefault((topic, key), (low, low))
    total = sum(high - low for low, high in backlog.values())
    for (topic, key), (low, high) in sorted(backlog.items()):
        target = high
        if max_rows is not None and total > max_rows and high > low:
            share = max(1, int((high - low) * max_rows / total))
            target = min(high, low + share)
        end.setdefault(topic, {})[key] = target
    return end


def spans_between(start: StreamOffset, end: StreamOffset) -> list[QueueSpan]:
    """The non-empty spans of a micro-batch ``[start, end)``."""
    spans: list[QueueSpan] = []
    for topic, queues in sorted(end.items()):
        for key, high in sorted(queues.items()):
            low = start.get(topic, {}).get(key, 0)
            if high > low:
                broker, qid = parse_queue_key(key)
                spans.append(QueueSpan(topic, broker, qid, low, high))
    return spans
