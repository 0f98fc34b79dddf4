"""Per-queue cache of pulled, not yet consumed messages (Java ProcessQueue).

Messages are kept in a dict keyed by queue offset. Pulls of one queue arrive in
ascending offset order, so dict insertion order *is* offset order and the
smallest cached offset is the first key: no tree map is needed, and removing a
consumed batch is one dict pop per message. Only the event-loop thread mutates a
ProcessQueue; other threads (stats, tests) only read sizes.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from typing import Any

from ..message import MessageExt


class QueueState(enum.Enum):
    """ACTIVE -> DROPPED, never back: a dropped queue is replaced by a new ProcessQueue."""

    ACTIVE = "ACTIVE"
    DROPPED = "DROPPED"


class ProcessQueue:
    """Cached messages of one owned queue plus its pull/consume/lock bookkeeping."""

    __slots__ = (
        "_inflight_seq",
        "consuming",
        "dropped",
        "inflight",
        "last_consume_time",
        "last_lock_time",
        "last_pull_time",
        "locked",
        "msg_size",
        "msgs",
        "orderly_running",
        "queue_offset_max",
        "state",
        "try_unlock_times",
    )

    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self.msg_size = 0  # sum of cached body lengths (Java counts bodies only)
        self.queue_offset_max = 0
        self.consuming: dict[int, MessageExt] = {}  # orderly: taken but not committed
        self.state = QueueState.ACTIVE
        self.dropped = False  # state is DROPPED; a plain attribute, read on every pull and batch
        self.locked = False
        now = time.monotonic()
        self.last_lock_time = now
        self.last_pull_time = now
        self.last_consume_time = now
        self.try_unlock_times = 0
        self.orderly_running = False  # orderly: a worker currently owns this queue
        # concurrent: batches handed to listeners, for the consume-timeout cleaner
        self.inflight: dict[int, tuple[float, Sequence[MessageExt]]] = {}
        self._inflight_seq = 0

    # -- state ---------------------------------------------------------------------
    def drop(self) -> None:
        self.state = QueueState.DROPPED
        self.dropped = True

    # -- sizes ---------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self.msgs) + len(self.consuming)

    def span(self) -> int:
        """Last cached offset minus first (0 when fewer than two messages)."""
        d = self.msgs
        if len(d) < 2:
            return 0
        return next(reversed(d)) - next(iter(d))

    def min_offset(self) -> int:
        return next(iter(self.msgs)) if self.msgs else -1

    def max_offset(self) -> int:
        return next(reversed(self.msgs)) if self.msgs else -1

    # -- concurrent mode -------------------------------------------------------------
    def put_messages(self, msgs: Sequence[MessageExt]) -> int:
        """Cache a pulled batch; returns how many were new. Duplicates (after a seek) are skipped."""
        d = self.msgs
        size = 0
        added = 0
        if not d or (msgs and msgs[0].queue_offset > self.queue_offset_max):
            for m in msgs:
                d[m.queue_offset] = m
                size += len(m.body)
            added = len(msgs)
        else:
            for m in msgs:
                off = m.queue_offset
                if off not in d:
                    d[off] = m
                    size += len(m.body)
                    added += 1
        if msgs:
            last = msgs[-1].queue_offset
            self.queue_offset_max = max(self.queue_offset_max, last)
        self.msg_size += size
        self.last_pull_time = time.monotonic()
        return added

    def remove_messages(self, msgs: Sequence[MessageExt]) -> int:
        """Drop consumed messages; returns the offset to commit, or -1 if nothing was cached.

        The offset is the smallest offset still cached, or one past the largest
        offset seen when the cache is empty (Java ProcessQueue.removeMessage).
        """
        d = self.msgs
        if not d:
            return -1
        pop = d.pop
        size = 0
        for m in msgs:
            if pop(m.queue_offset, None) is not None:
                size += len(m.body)
        self.msg_size -= size
        self.last_consume_time = time.monotonic()
        return next(iter(d)) if d else self.queue_offset_max + 1

    def begin_batch(self, msgs: Sequence[MessageExt]) -> int:
        """Record when a batch went to the listener (consume-timeout cleaner); returns its token."""
        self._inflight_seq += 1
        self.inflight[self._inflight_seq] = (time.monotonic(), msgs)
        return self._inflight_seq

    def end_batch(self, token: int) -> None:
        self.inflight.pop(token, None)

    def expired_messages(self, timeout: float, limit: int = 16) -> list[MessageExt]:
        """Still-cached messages whose listener call started more than ``timeout`` s ago."""
        now = time.monotonic()
        out: list[MessageExt] = []
        for start, msgs in list(self.inflight.values()):
            if now - start < timeout:
                continue
            for m in msgs:
                if self.msgs.get(m.queue_offset) is m:
                    out.append(m)
                    if len(out) >= limit:
                        return out
        return out

    # -- orderly mode ------------------------------------------------------------------
    def take_messages(self, n: int) -> list[MessageExt]:
        """Move up to ``n`` head messages into the consuming set (orderly)."""
        d = self.msgs
        out: list[MessageExt] = []
        self.last_consume_time = time.monotonic()
        while d and len(out) < n:
            off = next(iter(d))
            m = d.pop(off)
            self.consuming[off] = m
            out.append(m)
        return out

    def commit(self) -> int:
        """Orderly: the taken messages are done; returns the next offset to consume, or -1."""
        c = self.consuming
        if not c:
            return -1
        offset = max(c) + 1
        self.msg_size -= sum(len(m.body) for m in c.values())
        c.clear()
        return offset

    def make_messages_consume_again(self, msgs: Sequence[MessageExt]) -> None:
        """Orderly: put taken messages back at the head of the cache, keeping offset order."""
        back: dict[int, MessageExt] = {}
        for m in msgs:
            self.consuming.pop(m.queue_offset, None)
            back[m.queue_offset] = m
        back = dict(sorted(back.items()))
        back.update(self.msgs)
        self.msgs = back

    def has_temp_messages(self) -> bool:
        return bool(self.msgs)

    # -- expiry ------------------------------------------------------------------------
    def is_lock_expired(self, max_live: float) -> bool:
        return time.monotonic() - self.last_lock_time > max_live

    def is_pull_expired(self, max_idle: float) -> bool:
        return time.monotonic() - self.last_pull_time > max_idle

    def clear(self) -> None:
        self.msgs.clear()
        self.consuming.clear()
        self.inflight.clear()
        self.msg_size = 0

    def info(self, commit_offset: int) -> dict[str, Any]:
        """Java ProcessQueueInfo (GET_CONSUMER_RUNNING_INFO ``mqTable`` values)."""
        wall = time.time()
        mono = time.monotonic()
        return {
            "commitOffset": commit_offset,
            "cachedMsgMinOffset": self.min_offset() if self.msgs else 0,
            "cachedMsgMaxOffset": self.max_offset() if self.msgs else 0,
            "cachedMsgCount": self.count,
            "cachedMsgSizeInMiB": self.msg_size // (1024 * 1024),
            "transactionMsgMinOffset": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgCount": 0,
            "locked": self.locked,
            "tryUnlockTimes": self.try_unlock_times,
            "lastLockTimestamp": int((wall - (mono - self.last_lock_time)) * 1000),
            "droped": self.dropped,
            "lastPullTimestamp": int((wall - (mono - self.last_pull_time)) * 1000),
            "lastConsumeTimestamp": int((wall - (mono - self.last_consume_time)) * 1000),
        }
