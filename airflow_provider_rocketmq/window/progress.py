"""Progress of a running window, read from the collector's counters on a clock (no I/O, no Airflow).

`run_window` calls a `ProgressHook`: ``attach(collector)`` once the collector exists, ``tick()``
from each pass of its wait loop (every 0.2 s, or sooner on a queue event; never per message or
batch) and ``detach()`` when consuming is over. `WindowProgress` is the hook: a tick only compares
the clock with the next due time; when a report is due it reads the collector once (`sample`: the
staged counters and every known queue's start, frontier and high-water mark, O(queues) under the
collector's lock) and hands `Figures` to its sinks:

- ``emit(text)`` every ``interval`` seconds, the first one ``interval`` seconds after the window
  started consuming: a window shorter than that reports nothing (the task log and
  ``rocketmq-airflow window -v``);
- ``live(figures)`` every ``live_interval`` seconds (the terminal bar of the ``window`` command;
  a rich redraw takes 3-5 ms, so 0.5 s keeps it under 1 % of a core).

What the figures mean. A window covers, per queue, the offsets ``[start, high-water mark)``; the
start is only known once the queue is assigned, so the total grows while queues are assigned
(a mapped instance counts only its own queues). ``done`` counts offsets accounted for (staged,
filtered out by the tag expression, or held by another window); ``messages``/``bytes`` what was
staged. Rates are taken over the time since the sink's previous report. With ``max_messages``
below the offsets' total, progress is measured in messages against that bound instead.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from airflow_provider_rocketmq.window.collector import QueueKey, QueueSlice, WindowCollector

Clock = Callable[[], float]
SLOWEST = 3  # queues named in a report: those with the most offsets left
LIVE_RATE_SPAN = 5.0  # seconds of history behind the live bar's rate


class ProgressHook(Protocol):
    """What `run_window` calls (all from the runner's thread)."""

    def attach(self, collector: WindowCollector) -> None: ...

    def tick(self) -> None: ...

    def detach(self) -> None: ...


@dataclass(frozen=True)
class Sample:
    """The collector's counters at one moment."""

    at: float
    messages: int
    bytes: int
    queues: tuple[QueueSlice, ...]

    @property
    def done(self) -> int:
        return sum(q.end - q.start for q in self.queues)

    @property
    def total(self) -> int:
        return sum(q.high_water - q.start for q in self.queues)


def sample(collector: WindowCollector, at: float) -> Sample:
    messages, size = collector.staged
    return Sample(at, messages, size, tuple(collector.slices()))


@dataclass(frozen=True)
class Figures:
    """One progress report: what was done since the window started, and at what pace lately."""

    elapsed: float  # seconds since the window started consuming
    span: float  # seconds the rates are measured over
    messages: int
    bytes: int
    done: int  # offsets accounted for
    total: int  # offsets the window covers (assigned queues)
    queues: int
    queues_done: int
    rate: float  # messages staged per second over ``span``
    byte_rate: float
    eta: float | None  # seconds; None while nothing moves
    slowest: tuple[tuple[QueueKey, int], ...]  # (queue, offsets left), most left first
    max_messages: int | None = None

    @property
    def bounded(self) -> bool:
        """Whether ``max_messages`` ends the window before the high-water marks do."""
        return self.max_messages is not None and self.max_messages < self.total

    @property
    def completed(self) -> int:
        """Progress in the unit of `target`: messages against the bound, else offsets."""
        return min(self.messages, self.max_messages or 0) if self.bounded else self.done

    @property
    def target(self) -> int:
        return self.max_messages if self.bounded and self.max_messages is not None else self.total

    @property
    def fraction(self) -> float:
        return min(1.0, self.completed / self.target) if self.target else 0.0

    def detail(self) -> str:
        """Rate, ETA and the slowest queues (the live bar shows this next to its own counts)."""
        parts = [f"{_rate(self.rate)} msg/s, {format_bytes(self.byte_rate)}/s",
                 f"ETA {format_seconds(self.eta)}" if self.eta is not None else "ETA unknown (no progress)"]
        if self.slowest:
            parts.append("most left: " + ", ".join(f"{b}:{q} {left:,}" for (b, q), left in self.slowest))
        return "; ".join(parts)

    def brief(self) -> str:
        """What the live bar shows next to its counts (short: a terminal line is 80 columns or so)."""
        eta = format_seconds(self.eta) if self.eta is not None else "?"
        text = f"{format_bytes(self.bytes)}; {_rate(self.rate)} msg/s; ETA {eta}"
        if self.slowest:
            (broker, queue), left = self.slowest[0]
            text += f"; slowest {broker}:{queue} {left:,} left"
        return text

    def line(self) -> str:
        """The report as one line of text (task log, ``window -v``)."""
        if not self.queues:
            return f"no queue assigned yet after {format_seconds(self.elapsed)}"
        staged = f"{self.messages:,} messages ({format_bytes(self.bytes)})"
        if self.bounded:
            head = f"{staged} of max_messages {self.target:,} staged ({self.fraction:.1%})"
        elif self.done == self.messages:
            head = f"{self.messages:,} of {self.total:,} messages staged ({self.fraction:.1%}, " \
                   f"{format_bytes(self.bytes)})"
        else:  # tag-filtered offsets or offsets of another window: say both
            head = f"{staged} staged; {self.done:,} of {self.total:,} offsets read ({self.fraction:.1%})"
        return (f"{head} in {format_seconds(self.elapsed)}; {self.queues_done} of {self.queues} queues done; "
                f"last {format_seconds(self.span)}: {self.detail()}")


def figures(current: Sample, baseline: Sample, started: float, *, max_messages: int | None = None,
            slowest: int = SLOWEST) -> Figures:
    """The report for ``current``; rates and ETA are measured against ``baseline`` (an earlier sample)."""
    span = max(current.at - baseline.at, 0.0)
    moved_messages = current.messages - baseline.messages
    moved_offsets = current.done - baseline.done
    rate = moved_messages / span if span > 0 else 0.0
    offset_rate = moved_offsets / span if span > 0 else 0.0
    left = {q.key: q.high_water - q.end for q in current.queues if q.end < q.high_water}
    report = Figures(
        elapsed=max(current.at - started, 0.0), span=span, messages=current.messages, bytes=current.bytes,
        done=current.done, total=current.total, queues=len(current.queues),
        queues_done=len(current.queues) - len(left), rate=rate,
        byte_rate=(current.bytes - baseline.bytes) / span if span > 0 else 0.0, eta=None,
        slowest=tuple(sorted(left.items(), key=lambda kv: (-kv[1], kv[0]))[:slowest]),
        max_messages=max_messages)
    if report.bounded:
        eta = (report.target - report.completed) / rate if rate > 0 else None
    else:
        eta = (report.total - report.done) / offset_rate if offset_rate > 0 else None
    return dataclasses.replace(report, eta=eta)


class WindowProgress:
    """`ProgressHook` reporting through ``emit`` every ``interval`` s and ``live`` every ``live_interval`` s.

    ``interval`` 0 (or no ``emit``) reports no lines; the hook still records `first` and `last`
    samples (the operator's metrics read them). ``clock`` is injectable for tests.
    """

    def __init__(self, *, interval: float = 30.0, emit: Callable[[str], None] | None = None,
                 live: Callable[[Figures], None] | None = None, live_interval: float = 0.5,
                 max_messages: int | None = None, clock: Clock = time.monotonic) -> None:
        self.interval = interval if emit is not None else 0.0
        self._emit = emit
        self._live = live
        self._live_interval = live_interval
        self._max_messages = max_messages
        self._clock = clock
        self._collector: WindowCollector | None = None
        self.first: Sample | None = None  # at attach
        self.last: Sample | None = None  # at detach
        self._reported: Sample | None = None  # baseline of the next line
        self._next_line = float("inf")
        self._next_live = float("inf")
        self._history: deque[Sample] = deque()  # the live bar's rate baseline(s)

    def attach(self, collector: WindowCollector) -> None:
        self._collector = collector
        self.first = self._reported = sample(collector, self._clock())
        self._history.append(self.first)
        if self.interval > 0:
            self._next_line = self.first.at + self.interval
        if self._live is not None:
            self._next_live = self.first.at

    def tick(self) -> None:
        now = self._clock()
        if now < self._next_line and now < self._next_live:
            return  # the common case: a clock read and two comparisons
        assert self._collector is not None and self.first is not None and self._reported is not None
        current = sample(self._collector, now)
        if now >= self._next_live and self._live is not None:
            self._next_live = now + self._live_interval
            while len(self._history) > 1 and now - self._history[1].at >= LIVE_RATE_SPAN:
                self._history.popleft()
            self._live(figures(current, self._history[0], self.first.at, max_messages=self._max_messages))
            self._history.append(current)
        if now >= self._next_line and self._emit is not None:
            while self._next_line <= now:  # a late tick skips what it missed instead of catching up
                self._next_line += self.interval
            self._emit(figures(current, self._reported, self.first.at, max_messages=self._max_messages).line())
            self._reported = current

    def detach(self) -> None:
        if self._collector is not None:
            self.last = sample(self._collector, self._clock())
            if self._live is not None and self.first is not None:
                self._live(figures(self.last, self._history[0], self.first.at, max_messages=self._max_messages))
        self._next_line = self._next_live = float("inf")

    @property
    def consuming_seconds(self) -> float | None:
        """From attach to detach (None before both happened)."""
        if self.first is None or self.last is None:
            return None
        return max(self.last.at - self.first.at, 0.0)


def _rate(per_second: float) -> str:
    """``39,167``, ``2.5``: a slow window's rate keeps a decimal instead of rounding to 0."""
    return f"{per_second:,.0f}" if per_second >= 10 else f"{per_second:.1f}"


def format_bytes(n: float) -> str:
    """``1.5 MiB``, ``12 B``: binary units, one decimal."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float | None) -> str:
    """``45 s``, ``1 min 05 s``, ``2 h 03 min``; None -> ``unknown``."""
    if s is None:
        return "unknown"
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
