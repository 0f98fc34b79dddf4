"""Per-topic pull and consume figures for GET_CONSUMER_RUNNING_INFO (Java ConsumerStatsManager).

The services bump plain counters (one attribute add per pull or settled batch, on the loop
thread); a sampler records them every `SAMPLE_INTERVAL` seconds, and the figures are
differences against the oldest sample inside the window, as Java's StatsItem does:

  pullRT            average milliseconds per PULL_MESSAGE round trip, last minute (long polls
                    count their wait, as in Java)
  pullTPS           messages pulled per second, last minute
  consumeRT         average milliseconds per listener call, last minute (last hour when the
                    last minute had none)
  consumeOKTPS      messages consumed successfully per second, last minute
  consumeFailedTPS  messages whose consumption failed per second, last minute
  consumeFailedMsgs messages whose consumption failed in the last hour

A window shorter than a minute (a young consumer) is measured from the consumer's start.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

SAMPLE_INTERVAL = 10.0  # Java samples its stats items every 10 s
MINUTE = 60.0
HOUR = 3600.0


class TopicStats:
    """Cumulative counters of one topic (the queue's topic: retries count under %RETRY%)."""

    __slots__ = ("consume_calls", "consume_rt", "consumed_failed", "consumed_ok", "pull_rt", "pulled", "pulls")

    def __init__(self) -> None:
        self.pulls = 0
        self.pull_rt = 0.0  # seconds
        self.pulled = 0
        self.consumed_ok = 0
        self.consumed_failed = 0
        self.consume_calls = 0
        self.consume_rt = 0.0  # seconds

    def values(self) -> tuple[int, float, int, int, int, int, float]:
        return (self.pulls, self.pull_rt, self.pulled, self.consumed_ok, self.consumed_failed,
                self.consume_calls, self.consume_rt)


_Values = tuple[int, float, int, int, int, int, float]
_ZERO: _Values = (0, 0.0, 0, 0, 0, 0, 0.0)


class ConsumeStatsTable:
    """The counters of every topic plus their samples of the last hour."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.topics: dict[str, TopicStats] = {}
        self._samples: collections.deque[tuple[float, dict[str, _Values]]] = collections.deque()
        self._samples.append((clock(), {}))  # the start: every counter at zero

    def topic(self, name: str) -> TopicStats:
        st = self.topics.get(name)
        if st is None:
            st = self.topics[name] = TopicStats()
        return st

    def total(self, counter: str) -> int:
        """One counter (``pulled``, ``consumed_ok``, ``consumed_failed``...) summed over every topic."""
        return sum(getattr(st, counter) for st in self.topics.values())

    def sample(self) -> None:
        now = self.clock()
        self._samples.append((now, {name: st.values() for name, st in self.topics.items()}))
        while len(self._samples) > 2 and now - self._samples[1][0] >= HOUR:
            self._samples.popleft()  # keep one sample at least an hour old

    async def sample_async(self) -> None:
        self.sample()

    def _base(self, now: float, window: float) -> tuple[float, dict[str, _Values]]:
        """The oldest sample inside ``window`` (the start while the consumer is younger)."""
        base = self._samples[0]
        for s in self._samples:
            if now - s[0] <= window:
                return s
            base = s
        return base

    def status(self, topic: str) -> dict[str, float | int]:
        """Java ConsumeStatus of ``topic``."""
        now = self.clock()
        st = self.topics.get(topic)
        cur = st.values() if st is not None else _ZERO
        t_min, at_min = self._base(now, MINUTE)
        _, at_hour = self._base(now, HOUR)
        m = [c - b for c, b in zip(cur, at_min.get(topic, _ZERO), strict=True)]
        h = [c - b for c, b in zip(cur, at_hour.get(topic, _ZERO), strict=True)]
        secs = max(now - t_min, 1e-3)
        pulls, pull_rt, pulled, ok, failed, calls, consume_rt = m
        consume_avg = consume_rt / calls if calls else (h[6] / h[5] if h[5] else 0.0)
        return {
            "pullRT": round(pull_rt / pulls * 1000, 3) if pulls else 0.0,
            "pullTPS": round(pulled / secs, 3),
            "consumeRT": round(consume_avg * 1000, 3),
            "consumeOKTPS": round(ok / secs, 3),
            "consumeFailedTPS": round(failed / secs, 3),
            "consumeFailedMsgs": int(h[4]),
        }
