"""Per-queue cache of pulled, not yet consumed messages (Java ProcessQueue).

Messages are cached per pulled *batch*, not per message: a batch is stored once
(with its message count and body bytes) and, in the common case where a
listener consumed all of it, removed once — no per-message dict work and no
second touch of every message object. Pulls of one queue arrive in ascending
offset order, so batch insertion order *is* offset order: the smallest cached
offset is the first live message of the first batch (no tree map). Messages
removed one at a time (failures sent back, the consume-timeout cleaner, orderly
takes) are marked in their batch, which goes once none of it is left. Counts,
bytes and span stay exact. Batch listeners' pull results (`PulledBatch`) are
cached by their summary alone (first/last offset, count, body bytes): no
message object exists unless a failure path asks the batch for its messages.
Only the event-loop thread mutates a ProcessQueue; other threads (stats, tests)
only read sizes.

A pull loop held by flow control waits in `wait_for_space`: whatever leaves the
cache (a settled batch, an orderly commit, a drop) wakes it at once, so a queue
with small thresholds and a fast listener is not idled for the whole flow-control
delay after every few pulls (Java waits the fixed 50 ms).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..protocol.batch import PulledBatch
from ..protocol.message import MessageExt


class _Batch:
    """One cached pull result: ``msgs[head:]`` minus the offsets in ``gone`` are still cached."""

    __slots__ = ("gone", "head", "key", "live", "msgs", "size")

    def __init__(self, msgs: list[MessageExt], size: int) -> None:
        self.msgs = msgs
        self.key = id(msgs)  # unique while the batch holds the list
        self.size = size  # body bytes of the live messages
        self.live = len(msgs)
        self.head = 0  # orderly: messages before it were taken
        self.gone: set[int] | None = None  # offsets removed one at a time

    def live_msgs(self) -> Iterator[MessageExt]:
        gone = self.gone
        for i in range(self.head, len(self.msgs)):
            m = self.msgs[i]
            if gone is None or m.queue_offset not in gone:
                yield m

    def first_offset(self) -> int:
        if self.gone is None:
            return self.msgs[self.head].queue_offset
        return next(self.live_msgs()).queue_offset

    def last_offset(self) -> int:
        msgs, gone = self.msgs, self.gone
        if gone is None:  # nothing removed one at a time: the last message is live (head < len)
            return msgs[-1].queue_offset
        for i in range(len(msgs) - 1, self.head - 1, -1):
            if msgs[i].queue_offset not in gone:
                return msgs[i].queue_offset
        raise LookupError("empty batch")  # never: empty batches are removed


class _Summary:
    """A cached `PulledBatch` of a batch listener, known by its summary only (settled whole)."""

    __slots__ = ("batch", "first", "gone", "head", "key", "last", "live", "size")

    def __init__(self, batch: PulledBatch) -> None:
        self.batch = batch
        self.key = id(batch)
        self.first = batch.first_offset
        self.last = batch.last_offset
        self.live = batch.count
        self.size = batch.body_bytes
        self.gone = None  # never set: a summary is removed whole (or expanded into a _Batch first)
        self.head = 0

    def live_msgs(self) -> Iterator[MessageExt]:
        return iter(self.batch.messages())

    def first_offset(self) -> int:
        return self.first

    def last_offset(self) -> int:
        return self.last


class InFlight:
    """A batch handed to the consume pool. The worker sets ``current`` to the first message of
    the listener call it is about to make (one attribute store per call); the consume-timeout
    cleaner samples it (``seen``/``seen_at``), so the clock starts when a call starts."""

    __slots__ = ("current", "msgs", "seen", "seen_at")

    def __init__(self, msgs: Sequence[MessageExt]) -> None:
        self.msgs = msgs
        self.current: MessageExt | None = None  # None: waiting for a worker, not consuming yet
        self.seen: MessageExt | None = None
        self.seen_at = 0.0


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class QueueState(enum.Enum):
    """ACTIVE -> DROPPED, never back: a dropped queue is replaced by a new ProcessQueue."""

    ACTIVE = "ACTIVE"
    DROPPED = "DROPPED"


class ProcessQueue:
    """Cached messages of one owned queue plus its pull/consume/lock bookkeeping."""

    __slots__ = (
        "_inflight_seq",
        "_space_waiter",
        "batches",
        "cached_count",
        "consuming",
        "dropped",
        "inflight",
        "last_consume_time",
        "last_lock_time",
        "last_pull_time",
        "locked",
        "msg_size",
        "orderly_running",
        "queue_offset_max",
        "state",
        "try_unlock_times",
    )

    def __init__(self) -> None:
        self.batches: dict[int, _Batch | _Summary] = {}  # key -> cached batch, in offset order
        self.cached_count = 0  # messages in the batches (not counting `consuming`)
        self.msg_size = 0  # sum of cached body lengths, consuming included (Java counts bodies only)
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
        self.inflight: dict[int, InFlight] = {}
        self._inflight_seq = 0
        self._space_waiter: asyncio.Future[None] | None = None  # a pull loop held by flow control

    # -- state ---------------------------------------------------------------------
    def drop(self) -> None:
        self.state = QueueState.DROPPED
        self.dropped = True
        if self._space_waiter is not None:
            self._space_freed()

    # -- flow control ----------------------------------------------------------------
    async def wait_for_space(self, timeout: float) -> None:
        """Until something leaves the cache or the queue is dropped, at most ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        fut = self._space_waiter = loop.create_future()
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if self._space_waiter is fut:
                self._space_waiter = None

    def _space_freed(self) -> None:
        fut, self._space_waiter = self._space_waiter, None
        if fut is not None:
            _resolve(fut)

    # -- sizes ---------------------------------------------------------------------
    @property
    def count(self) -> int:
        return self.cached_count + len(self.consuming)

    @property
    def msgs(self) -> dict[int, MessageExt]:
        """The cached messages by offset, in offset order (a copy, for inspection)."""
        return {m.queue_offset: m for b in self.batches.values() for m in b.live_msgs()}

    def span(self) -> int:
        """Last cached offset minus first (0 when fewer than two messages)."""
        if self.cached_count < 2:
            return 0
        batches = self.batches.values()
        return next(reversed(batches)).last_offset() - next(iter(batches)).first_offset()

    def min_offset(self) -> int:
        for b in self.batches.values():
            return b.first_offset()
        return -1

    def max_offset(self) -> int:
        for b in reversed(self.batches.values()):
            return b.last_offset()
        return -1

    def _index(self) -> dict[int, tuple[_Batch, MessageExt]]:
        """offset -> (batch, message) of every cached message (for the rare per-message paths)."""
        self._expand_summaries()
        return {m.queue_offset: (b, m) for b in self.batches.values() if isinstance(b, _Batch)
                for m in b.live_msgs()}

    def _expand_summaries(self) -> None:
        """Turn cached summaries into message batches (a per-message path needs the messages)."""
        if any(isinstance(b, _Summary) for b in self.batches.values()):
            out: dict[int, _Batch | _Summary] = {}
            for b in self.batches.values():
                if isinstance(b, _Summary):
                    b = _Batch(b.batch.messages(), b.size)
                out[b.key] = b
            self.batches = out

    # -- concurrent mode -------------------------------------------------------------
    def put_messages(self, msgs: Sequence[MessageExt], body_bytes: int = -1) -> int:
        """Cache a pulled batch; returns how many were new. Duplicates (after a seek) are skipped.

        ``body_bytes``: the summed body lengths of ``msgs`` when the caller knows it already
        (`decode_messages_sized`); otherwise they are summed here.
        """
        # last_pull_time is the pull loop's business (it stamps every answer, empty ones too)
        if not msgs:
            return 0
        last = msgs[-1].queue_offset
        if not self.cached_count or msgs[0].queue_offset > self.queue_offset_max:
            batch = msgs if msgs.__class__ is list else list(msgs)
        else:
            seen = set(self._index())
            batch = []
            for m in msgs:
                if m.queue_offset not in seen:
                    seen.add(m.queue_offset)
                    batch.append(m)
        self.queue_offset_max = max(self.queue_offset_max, last)
        if not batch:
            return 0
        size = body_bytes if batch is msgs and body_bytes >= 0 else sum([len(m.body) for m in batch])
        self.msg_size += size
        if batch is not msgs and self.batches and batch[0].queue_offset < self.max_offset():
            # offsets older than cached ones (a re-read after a seek): merge everything into one
            # batch in offset order, so the first batch still holds the smallest offset
            cached = [m for b in self.batches.values() for m in b.live_msgs()]
            merged = sorted(cached + batch, key=lambda m: m.queue_offset)
            b = _Batch(merged, sum(len(m.body) for m in merged))
            self.batches = {b.key: b}
            self.cached_count = b.live
            return len(batch)
        b = _Batch(batch, size)
        self.batches[b.key] = b
        self.cached_count += b.live
        return b.live

    # -- batch listeners ------------------------------------------------------------
    def put_batch(self, batch: PulledBatch) -> int:
        """Cache a pulled batch by its summary; returns its count, or 0 if every offset is cached."""
        if self.cached_count and batch.last_offset <= self.queue_offset_max:
            return 0  # a re-read of offsets still cached (after a seek): already on its way
        b = _Summary(batch)
        self.batches[b.key] = b
        self.queue_offset_max = max(self.queue_offset_max, b.last)
        self.cached_count += b.live
        self.msg_size += b.size
        return b.live

    def remove_batch(self, batch: PulledBatch) -> int:
        """A batch was consumed whole; returns the offset to commit, or -1 if it was not cached."""
        b = self.batches.pop(id(batch), None)
        if b is None:
            return -1
        self.cached_count -= b.live
        self.msg_size -= b.size
        self.last_consume_time = time.monotonic()
        if self._space_waiter is not None:
            self._space_freed()
        return self.min_offset() if self.cached_count else self.queue_offset_max + 1

    def expand_batch(self, batch: PulledBatch) -> list[MessageExt]:
        """A failure path needs ``batch``'s messages: cache them one by one; returns them."""
        msgs = batch.messages()
        b = self.batches.get(id(batch))
        if isinstance(b, _Summary):
            new = _Batch(msgs, b.size)
            self.batches = {(new.key if k == b.key else k): (new if k == b.key else v)
                            for k, v in self.batches.items()}
        return msgs

    def remove_messages(self, msgs: Sequence[MessageExt]) -> int:
        """Drop consumed messages; returns the offset to commit, or -1 if nothing was cached.

        The offset is the smallest offset still cached, or one past the largest
        offset seen when the cache is empty (Java ProcessQueue.removeMessage).
        """
        if not self.cached_count:
            return -1
        b = self.batches.get(id(msgs))
        if b is not None and b.__class__ is _Batch and b.msgs is msgs and b.gone is None and b.head == 0:
            del self.batches[b.key]  # the common case: a whole batch, untouched since it was put
            self.cached_count -= b.live
            self.msg_size -= b.size
        else:
            self._remove_each(msgs)
        self.last_consume_time = time.monotonic()
        if self._space_waiter is not None:
            self._space_freed()
        return self.min_offset() if self.cached_count else self.queue_offset_max + 1

    def _remove_each(self, msgs: Sequence[MessageExt]) -> None:
        index = self._index()
        batches = self.batches
        for m in msgs:
            entry = index.pop(m.queue_offset, None)
            if entry is None:
                continue
            b, cached = entry
            if b.gone is None:
                b.gone = set()
            b.gone.add(cached.queue_offset)
            b.live -= 1
            n = len(cached.body)
            b.size -= n
            self.msg_size -= n
            self.cached_count -= 1
            if not b.live:
                del batches[b.key]

    def begin_batch(self, msgs: Sequence[MessageExt]) -> tuple[int, InFlight]:
        """Record a batch handed to the consume pool (consume-timeout cleaner); its token and record."""
        self._inflight_seq += 1
        fl = self.inflight[self._inflight_seq] = InFlight(msgs)
        return self._inflight_seq, fl

    def end_batch(self, token: int) -> None:
        self.inflight.pop(token, None)

    def expired_messages(self, timeout: float, step: int, limit: int = 16) -> list[MessageExt]:
        """Still-cached messages of listener calls seen running for at least ``timeout`` s.

        A call counts from the first look that saw it running; looks come every consume_timeout,
        so a call is reported between 1x and 2x ``timeout`` after it started (Java's cleaner has
        the same granularity). Messages still waiting for their call are never reported.
        """
        now = time.monotonic()
        out: list[MessageExt] = []
        index: dict[int, tuple[_Batch, MessageExt]] | None = None
        for fl in list(self.inflight.values()):
            cur = fl.current
            if cur is None:
                continue
            if fl.seen is not cur:
                fl.seen, fl.seen_at = cur, now
                continue
            if now - fl.seen_at < timeout:
                continue
            if index is None:
                index = self._index()
            start = next((i for i, m in enumerate(fl.msgs) if m is cur), 0)
            for m in fl.msgs[start:start + step]:
                entry = index.get(m.queue_offset)
                if entry is not None and entry[1] is m:
                    out.append(m)
                    if len(out) >= limit:
                        return out
        return out

    # -- orderly mode ------------------------------------------------------------------
    def take_messages(self, n: int) -> list[MessageExt]:
        """Move up to ``n`` head messages into the consuming set (orderly)."""
        out: list[MessageExt] = []
        self.last_consume_time = time.monotonic()
        batches = self.batches
        while batches and len(out) < n:
            b = next(iter(batches.values()))
            if not isinstance(b, _Batch):  # batch listeners are never orderly
                raise TypeError("take_messages on a queue of pulled batches")
            msgs, gone = b.msgs, b.gone
            while b.head < len(msgs) and len(out) < n:
                m = msgs[b.head]
                b.head += 1
                if gone is not None and m.queue_offset in gone:
                    continue
                self.consuming[m.queue_offset] = m
                out.append(m)
                b.live -= 1
                b.size -= len(m.body)
                self.cached_count -= 1
            if not b.live:
                del batches[b.key]
        return out

    def commit(self) -> int:
        """Orderly: the taken messages are done; returns the next offset to consume, or -1."""
        c = self.consuming
        if not c:
            return -1
        offset = max(c) + 1
        self.msg_size -= sum(len(m.body) for m in c.values())
        c.clear()
        if self._space_waiter is not None:
            self._space_freed()
        return offset

    def make_messages_consume_again(self, msgs: Sequence[MessageExt]) -> None:
        """Orderly: put taken messages back at the head of the cache, keeping offset order."""
        back: dict[int, MessageExt] = {}
        for m in msgs:
            self.consuming.pop(m.queue_offset, None)
            back[m.queue_offset] = m
        if not back:
            return
        again = [m for _, m in sorted(back.items())]
        b = _Batch(again, sum(len(m.body) for m in again))  # msg_size still counts them
        self.batches = {b.key: b, **self.batches}
        self.cached_count += b.live

    def rollback(self) -> None:
        """Orderly, auto_commit off: every taken, uncommitted message goes back to the head."""
        self.make_messages_consume_again(list(self.consuming.values()))

    # -- expiry ------------------------------------------------------------------------
    def is_lock_expired(self, max_live: float) -> bool:
        return time.monotonic() - self.last_lock_time > max_live

    def is_pull_expired(self, max_idle: float) -> bool:
        return time.monotonic() - self.last_pull_time > max_idle

    def clear(self) -> None:
        self.batches.clear()
        self.cached_count = 0
        self.consuming.clear()
        self.inflight.clear()
        self.msg_size = 0

    def info(self, commit_offset: int) -> dict[str, Any]:
        """Java ProcessQueueInfo (GET_CONSUMER_RUNNING_INFO ``mqTable`` values)."""
        wall = time.time()
        mono = time.monotonic()
        return {
            "commitOffset": commit_offset,
            "cachedMsgMinOffset": self.min_offset() if self.cached_count else 0,
            "cachedMsgMaxOffset": self.max_offset() if self.cached_count else 0,
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
