"""Per-queue start and frontier of one bounded window, fed with pulled batches (no Airflow).

The collector is the one owner of where the window begins in each queue: it asks its `QueueStarts`
(admin round trips) when a queue is first taken (`WindowCollector.take_queues`, or the queue's
first batch), when a batch leaves a gap, and when the runner has it re-check its floors
(`WindowCollector.refresh_floors`). Its *frontier* in a queue: every offset in ``[start,
frontier)`` was staged, did not match the tag filter, or belongs to another window. A batch that
continues the frontier is admitted and its matching messages go to the ``sink`` (the Parquet
writer) at once; so only contiguous prefixes are ever staged or committed, and memory does not grow
with the window. The consumer delivers each queue's batches in offset order.

The window subscribes with ``*`` and filters tags here, so that every offset is delivered and a
queue's progress is visible even where no message matches (a broker-side filter would advance the
consumer's offset silently). A batch past the frontier (a gap) is explained by the queue's floor:
offsets committed by another member of the group are in that member's window, offsets below the
minimum are gone; the frontier moves up to the floor and the skipped range is recorded as a gap
(already staged rows stay: where two windows overlap, the load's ledger loads each offset once).
A gap nothing explains settles the queue where it is: the rest is left for the next window.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from airflow_provider_rocketmq.client.consumer.subscription import build_subscription
from airflow_provider_rocketmq.client.protocol.columnar import ColumnBatch
from airflow_provider_rocketmq.client.protocol.errors import ConfigError

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]  # (broker name, queue id): topic is the window's own


def parse_tag_expression(expression: str) -> frozenset[str] | None:
    """``"TagA || TagB"`` -> ``{"TagA", "TagB"}``; ``"*"``/empty -> None (everything matches)."""
    if not isinstance(expression, str):
        raise ConfigError("expression", f"must be a string, got {expression!r}")
    sub = build_subscription("window", expression)
    return None if sub.match_all else sub.tags_set


@dataclass
class _QueueState:
    start: int
    high_water: int
    frontier: int  # every offset in [start, frontier) is accounted for
    messages: int = 0  # staged (matching) messages
    bytes: int = 0
    settled_at_gap: bool = False  # an unexplained gap: the queue takes no more in this window
    # [lo, hi) ranges inside [start, frontier) this window skipped because they are in another window:
    # the loader's ledger must not count them as loaded by this one
    gaps: list[tuple[int, int]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.frontier >= self.high_water or self.settled_at_gap


@dataclass(frozen=True)
class QueueSlice:
    """What the window takes from one queue: offsets ``[start, end)`` except ``gaps`` (offsets another
    window holds: committed by another member meanwhile, or gone), ``messages`` of them staged."""

    key: QueueKey
    start: int
    end: int
    high_water: int
    messages: int
    bytes: int
    gaps: tuple[tuple[int, int], ...] = ()


Sink = Callable[[ColumnBatch], None]


class QueueStarts(Protocol):
    """Where the window's part of a queue begins (may ask the brokers; never called under a lock)."""

    def initial(self, key: QueueKey) -> int:
        """The start of a queue the window takes: the group's committed offset, else per consume_from_where."""
        ...

    def floor(self, key: QueueKey) -> int:
        """Below this offset the queue's messages are in another window (committed) or gone (min offset)."""
        ...


class WindowCollector:
    """Thread-safe start and frontier bookkeeping; batches are offered from the consumer's listener."""

    def __init__(
        self,
        high_water: Mapping[QueueKey, int],
        *,
        sink: Sink,
        starts: QueueStarts,
        tags: frozenset[str] | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._high_water = dict(high_water)
        self._sink = sink
        self._starts = starts
        self._tags = tags
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._queues: dict[QueueKey, _QueueState] = {}
        # `with self._lock` (a C-level enter) where only mutual exclusion is needed: `with` on the
        # Condition goes through its Python-level __enter__/__exit__, twice per pulled batch
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._version = 0
        self._staged = 0
        self._staged_bytes = 0
        self._bound_reached = False
        self._closed = False
        self._inflight = 0  # offers between admission and the end of their sink call
        self.error: BaseException | None = None

    # -- asked by the window runner (main thread) -----------------------------------------------
    def take_queues(self, keys: Iterable[QueueKey]) -> None:
        """The consumer owns ``keys``: each one without a start yet gets its initial start."""
        for key in keys:
            if not self._has_start(key):
                self._move_start(key, self._starts.initial(key))

    def refresh_floors(self, keys: Iterable[QueueKey]) -> None:
        """Re-read the floor of every incomplete queue of ``keys`` (admin round trips): another member
        may have committed a queue past the frontier meanwhile, or the broker trimmed it, and the
        consumer then starts later than assumed. The frontier moves up to the floor (a gap)."""
        for key in keys:
            if self._has_start(key) and not self.complete((key,)):  # no start yet: take_queues sets it
                self._move_start(key, self._starts.floor(key))

    def _has_start(self, key: QueueKey) -> bool:
        with self._lock:
            return key in self._queues

    def _move_start(self, key: QueueKey, start: int) -> None:
        """The first call sets where ``key``'s part of the window begins; later ones only move the
        frontier up (offsets below ``start`` were committed by someone else meanwhile, or are gone)."""
        with self._cond:
            hw = self._high_water[key]
            start = min(start, hw)
            state = self._queues.get(key)
            if state is None:
                self._queues[key] = _QueueState(start=start, high_water=hw, frontier=start)
            elif start > state.frontier:
                if not state.messages:
                    state.start = start  # nothing staged below: the window's range starts there
                elif state.gaps and state.gaps[-1][1] == state.frontier:
                    state.gaps[-1] = (state.gaps[-1][0], start)
                else:
                    state.gaps.append((state.frontier, start))
                log.info("queue %s:%d: offsets [%d, %d) belong to another window or are gone; moving on",
                         key[0], key[1], state.frontier, start)
                state.frontier = start
                state.settled_at_gap = False
            else:
                return
            self._notify()

    def close(self) -> None:
        """Admit nothing more; returns once every admitted batch was handed to the sink."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._inflight == 0)

    def fail(self, exc: BaseException) -> None:
        """Record an error raised on the listener thread (the runner raises it)."""
        with self._cond:
            if self.error is None:
                self.error = exc
            self._closed = True
            self._notify()

    # -- fed by the consumer's listener ------------------------------------------------------------
    def offer(self, batch: ColumnBatch) -> None:
        """Admit what of ``batch`` continues its queue's frontier, within the bounds; stage it. May ask
        `QueueStarts` (a queue's first batch, a gap): call it where blocking is allowed."""
        if not self.try_offer(batch):
            self._resolve_and_offer((batch.mq.broker_name, batch.mq.queue_id), batch)

    def try_offer(self, batch: ColumnBatch) -> bool:
        """`offer` ``batch`` if that needs no admin round trip (its queue has a start and it leaves no
        gap: the usual batch); else return False having done nothing, and the caller `offer`s it
        where blocking is allowed."""
        key = (batch.mq.broker_name, batch.mq.queue_id)
        if key not in self._high_water:
            return True  # a queue created after the snapshot is not part of this window
        with self._lock:
            state = self._queues.get(key)
            if state is None or self._closed \
                    or (batch.first_offset > state.frontier and batch.last_offset >= state.frontier):
                return False
            admitted = self._admit(key, state, batch)
            if admitted is None:
                return True
            self._inflight += 1
        self._stage(admitted)
        return True

    def _stage(self, admitted: ColumnBatch) -> None:
        try:
            self._sink(admitted)
        finally:
            with self._lock:
                self._inflight -= 1
                if self._closed:  # only `close` waits for this; anyone else is woken by `_notify`
                    self._cond.notify_all()

    def _resolve_and_offer(self, key: QueueKey, batch: ColumnBatch) -> None:
        """`offer` for a queue without a start yet, or a batch past its frontier (a gap)."""
        if not self._has_start(key):
            self._move_start(key, self._starts.initial(key))
        with self._cond:
            state = self._queues.get(key)
            if state is None or self._closed:
                return
            gap = batch.first_offset > state.frontier and batch.last_offset >= state.frontier
        if gap:
            self._move_start(key, self._starts.floor(key))
        with self._lock:
            if self._closed:
                return
            admitted = self._admit(key, state, batch)
            if admitted is None:
                return
            self._inflight += 1
        self._stage(admitted)

    def _admit(self, key: QueueKey, state: _QueueState, batch: ColumnBatch) -> ColumnBatch | None:
        """What of ``batch`` the window takes (None: nothing), counted and the frontier moved; under the lock."""
        frontier = state.frontier
        offsets = batch.queue_offsets
        if state.complete or batch.last_offset < frontier:
            return None  # settled, or a redelivery of what is accounted for
        if offsets[0] > frontier:
            log.warning("queue %s:%d: next offset %d, but the consumer delivered %d..%d; the queue is settled "
                        "at %d for this window", key[0], key[1], frontier, offsets[0], offsets[-1], frontier)
            state.settled_at_gap = True
            self._notify()
            return None
        if not (self._tags is None and self._max_bytes is None and offsets[0] == frontier
                and batch.last_offset < state.high_water):
            return self._admit_filtered(state, batch)
        # the common case, in O(1): the batch continues the frontier; only max_messages may cut it
        count = batch.count
        take_n = count
        if self._max_messages is not None:
            take_n = min(count, self._max_messages - self._staged)
            if take_n < count:
                self._bound_reached = True
        if take_n <= 0:
            return None
        size = batch.body_bytes if take_n == count else sum(batch.body_sizes[:take_n])
        self._staged += take_n
        self._staged_bytes += size
        state.messages += take_n
        state.bytes += size
        if self._max_messages is not None and self._staged >= self._max_messages:
            self._bound_reached = True
        state.frontier = offsets[take_n] if take_n < count else batch.last_offset + 1
        self._notify(wake=state.complete or self._bound_reached)
        return batch if take_n == count else batch.select(range(take_n))

    def _admit_filtered(self, state: _QueueState, batch: ColumnBatch) -> ColumnBatch | None:
        """`_admit` message by message: a tag filter, ``max_bytes``, an overlap with the frontier or
        offsets past the high-water mark (which the consumer's stop offsets should already prevent)."""
        frontier = state.frontier
        offsets = batch.queue_offsets
        idx = [i for i, off in enumerate(offsets) if frontier <= off < state.high_water]
        if self._tags is not None:
            all_tags = batch.tags()
            matching = [i for i in idx if all_tags[i] in self._tags]
        else:
            matching = idx
        take = []
        covered = offsets[idx[-1]] + 1 if idx else frontier
        sizes = batch.body_sizes
        max_messages, max_bytes = self._max_messages, self._max_bytes
        for i in matching:
            size = sizes[i]
            # max_bytes never stops the window before its first message
            if self._bound_reached or (max_messages is not None and self._staged >= max_messages) \
                    or (max_bytes is not None and self._staged_bytes + size > max_bytes and self._staged):
                self._bound_reached = True
                covered = offsets[i]  # everything before this message is accounted for
                break
            take.append(i)
            self._staged += 1
            self._staged_bytes += size
            state.messages += 1
            state.bytes += size
        if (max_messages is not None and self._staged >= max_messages) \
                or (max_bytes is not None and self._staged_bytes >= max_bytes):
            self._bound_reached = True
        state.frontier = max(frontier, covered)
        # progress is counted, but the runner is only woken when its decision may change
        self._notify(wake=state.complete or self._bound_reached)
        return batch.select(take)

    # -- queries -------------------------------------------------------------------------------
    def bound_reached(self) -> bool:
        """Whether ``max_messages``/``max_bytes`` worth of messages were staged."""
        with self._cond:
            return self._bound_reached

    def complete(self, keys: Iterable[QueueKey]) -> bool:
        """Whether every queue in ``keys`` has a start and reached its high-water mark (or is settled)."""
        with self._cond:
            return all(k in self._queues and self._queues[k].complete for k in keys)

    def frontiers(self) -> dict[QueueKey, int]:
        with self._cond:
            return {k: s.frontier for k, s in self._queues.items()}

    @property
    def version(self) -> int:
        """Bumped by every admitted batch, start change or notification (progress detection)."""
        with self._cond:
            return self._version

    def wait_for_change(self, timeout: float) -> None:
        """Block until a queue completes, a bound is reached, a start changes or `notify` is called
        (or ``timeout`` passes). Admitted batches only bump `version` (the runner polls it)."""
        with self._cond:
            seen = self._version
            self._cond.wait_for(lambda: self._version != seen, timeout)

    def notify(self) -> None:
        """Wake `wait_for_change` from outside (e.g. an assignment change)."""
        with self._cond:
            self._notify()

    def slices(self) -> list[QueueSlice]:
        """The window's content per queue, sorted by queue."""
        with self._cond:
            return [QueueSlice(key=k, start=s.start, end=s.frontier, high_water=s.high_water,
                               messages=s.messages, bytes=s.bytes, gaps=tuple(s.gaps))
                    for k, s in sorted(self._queues.items())]

    @property
    def staged(self) -> tuple[int, int]:
        """(messages, body bytes) admitted so far."""
        with self._cond:
            return self._staged, self._staged_bytes

    def _notify(self, wake: bool = True) -> None:
        self._version += 1
        if wake:
            self._cond.notify_all()
