"""Per-queue bookkeeping of one bounded window (no I/O, no Airflow).

The push consumer delivers messages from its thread pool or loop, possibly out of
order within a queue. The collector keeps, per queue, the window's start offset,
the messages received at or past it, and the contiguous prefix: the offset up to
which *every* message has been seen. Only that prefix is ever staged or committed,
so a window never skips a message, however deliveries interleave.

The window subscribes with ``*`` and filters tags here, so that every offset is
delivered and a queue's progress is visible even where no message matches (a
broker-side filter would advance the consumer's offset silently).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from airflow_provider_rocketmq.client.consumer.subscription import build_subscription
from airflow_provider_rocketmq.client.errors import ConfigError
from airflow_provider_rocketmq.client.message import MessageExt

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
    next_offset: int  # contiguous prefix: every offset in [start, next_offset) was received
    received: dict[int, MessageExt | None] = field(default_factory=dict)  # None: tag did not match

    @property
    def complete(self) -> bool:
        return self.next_offset >= self.high_water


@dataclass(frozen=True)
class QueueSlice:
    """What the window takes from one queue: offsets ``[start, end)`` and the matching messages."""

    key: QueueKey
    start: int
    end: int
    high_water: int
    messages: list[MessageExt]


class WindowCollector:
    """Thread-safe message sink of one window; `wait_for_change` wakes the waiting thread."""

    def __init__(
        self,
        high_water: Mapping[QueueKey, int],
        *,
        tags: frozenset[str] | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self._high_water = dict(high_water)
        self._tags = tags
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._queues: dict[QueueKey, _QueueState] = {}
        # deliveries that raced ahead of set_start(): replayed once the start is known
        self._pending: dict[QueueKey, list[MessageExt]] = {}
        self._cond = threading.Condition()
        self._version = 0
        # matching messages inside the contiguous prefixes: what take() could stage right now
        self._matched = 0
        self._matched_bytes = 0

    # -- fed by the window runner (main thread) -------------------------------------------------
    def high_water(self, key: QueueKey) -> int:
        return self._high_water[key]

    def known(self, key: QueueKey) -> bool:
        with self._cond:
            return key in self._queues

    def set_start(self, key: QueueKey, start: int) -> None:
        """Declare where ``key``'s part of the window begins (or, later, that offsets below moved on).

        Raising the start drops what was received below it: those offsets were
        committed by someone else meanwhile, so they belong to another window.
        """
        with self._cond:
            hw = self._high_water[key]
            start = min(start, hw)
            state = self._queues.get(key)
            if state is None:
                state = self._queues[key] = _QueueState(start=start, high_water=hw, next_offset=start)
            elif start > state.start:
                for off in [o for o in state.received if o < start]:
                    msg = state.received.pop(off)
                    if off < state.next_offset:
                        self._count(msg, -1)
                state.start = start
                state.next_offset = max(state.next_offset, start)
            else:
                return
            self._add_locked(self._pending.pop(key, ()))
            self._advance(state)
            self._notify()

    def pending_keys(self) -> set[QueueKey]:
        """Queues that delivered messages before their start was declared."""
        with self._cond:
            return set(self._pending)

    # -- fed by the consumer (listener threads / loop) -------------------------------------------
    def add(self, messages: Iterable[MessageExt]) -> None:
        with self._cond:
            if self._add_locked(messages):
                self._notify()

    def _add_locked(self, messages: Iterable[MessageExt]) -> bool:
        changed = False
        for msg in messages:
            key = (msg.broker_name, msg.queue_id)
            state = self._queues.get(key)
            if state is None:
                if key in self._high_water:
                    self._pending.setdefault(key, []).append(msg)
                    changed = True  # wake the runner: it declares the queue's start
                continue  # a queue created after the snapshot is not part of this window
            off = msg.queue_offset
            # below the start (committed earlier), at/after the high-water mark or a redelivery
            if off < state.start or off >= state.high_water or off in state.received:
                continue
            state.received[off] = msg if self._tags is None or msg.tags in self._tags else None
            self._advance(state)
            changed = True
        return changed

    # -- queries -------------------------------------------------------------------------------
    def bound_reached(self) -> bool:
        """Whether the contiguous prefixes already hold ``max_messages``/``max_bytes`` worth of messages
        (messages received beyond a gap do not count: they could not be staged yet)."""
        with self._cond:
            return (self._max_messages is not None and self._matched >= self._max_messages) or (
                self._max_bytes is not None and self._matched_bytes >= self._max_bytes
            )

    def complete(self, keys: Iterable[QueueKey]) -> bool:
        """Whether every queue in ``keys`` has a start and reached its high-water mark."""
        with self._cond:
            return all(k in self._queues and self._queues[k].complete for k in keys)

    @property
    def version(self) -> int:
        """Bumped by every delivery, start change or notification (progress detection)."""
        with self._cond:
            return self._version

    def wait_for_change(self, timeout: float) -> None:
        """Block until a message arrives or a start changes (or ``timeout`` passes)."""
        with self._cond:
            seen = self._version
            self._cond.wait_for(lambda: self._version != seen, timeout)

    def notify(self) -> None:
        """Wake `wait_for_change` from outside (e.g. an assignment change)."""
        with self._cond:
            self._notify()

    def take(self) -> list[QueueSlice]:
        """The window's content: per queue the contiguous prefix, trimmed to the count/byte bounds.

        Bounds are shared between queues round-robin (one message from each queue in turn),
        so that a bounded window advances every queue instead of draining one first.
        """
        with self._cond:
            keys = sorted(self._queues)
            prefixes = {k: self._prefix(self._queues[k]) for k in keys}
            taken: dict[QueueKey, int] = {k: 0 for k in keys}  # offsets taken, filtered ones included
            staged: dict[QueueKey, list[MessageExt]] = {k: [] for k in keys}
            budget_n = self._max_messages
            budget_b = self._max_bytes
            active = [k for k in keys if prefixes[k]]
            while active:
                still = []
                for k in active:
                    prefix = prefixes[k]
                    # filtered-out offsets cost nothing: take them together with the next match
                    while taken[k] < len(prefix) and prefix[taken[k]] is None:
                        taken[k] += 1
                    if taken[k] >= len(prefix):
                        continue
                    msg = prefix[taken[k]]
                    assert msg is not None
                    size = len(msg.body)
                    if budget_n is not None and budget_n <= 0:
                        continue
                    # the byte bound never leaves a window empty (a single huge message still moves)
                    if budget_b is not None and budget_b < size and any(staged.values()):
                        continue
                    staged[k].append(msg)
                    taken[k] += 1
                    if budget_n is not None:
                        budget_n -= 1
                    if budget_b is not None:
                        budget_b -= size
                    still.append(k)
                active = still
            return [
                QueueSlice(key=k, start=self._queues[k].start, end=self._queues[k].start + taken[k],
                           high_water=self._queues[k].high_water, messages=staged[k])
                for k in keys
            ]

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _prefix(state: _QueueState) -> list[MessageExt | None]:
        return [state.received[o] for o in range(state.start, state.next_offset)]

    def _advance(self, state: _QueueState) -> None:
        while state.next_offset < state.high_water and state.next_offset in state.received:
            self._count(state.received[state.next_offset], 1)
            state.next_offset += 1

    def _count(self, msg: MessageExt | None, sign: int) -> None:
        if msg is not None:
            self._matched += sign
            self._matched_bytes += sign * len(msg.body)

    def _notify(self) -> None:
        self._version += 1
        self._cond.notify_all()
