"""Fault injection for tests: delayed or lost responses, busy answers, and the offset
behaviour of a real multi-threaded broker.

Rules match a request code (or every code with ``code=None``) and apply a bounded
number of ``times`` (``None``: until cleared). ``delay`` and ``drop`` let the
request be processed normally (a SEND is stored, an offset committed) and only
hold back or lose the *response*, which is what a slow or lossy network does to
a client. ``respond`` answers at once with the given code (SYSTEM_BUSY,
FLOW_CONTROL, ...) without processing the request.

`OffsetFaults` switches on what a real 4.x broker does to consumer offsets and a
single event loop never shows (see its docstring); ``parse_offset_faults`` reads
the ``offset-race=S,pull-commit-delay=S`` form that ``rocketmq-airflow broker
--faults`` and ``ROCKETMQ_EMBEDDED_FAULTS`` (integration suite) accept.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, fields
from typing import Any

from ..client.protocol.codes import ResponseCode
from ..client.protocol.errors import ConfigError

BUSY_REMARK = "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 0ms, size of queue: 0"
FLOW_CONTROL_REMARK = "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while"


@dataclass
class FaultRule:
    """One injected fault; ``action`` is ``delay``, ``drop`` or ``respond``."""

    action: str
    code: int | None = None
    seconds: float = 0.0
    response_code: int = ResponseCode.SYSTEM_BUSY
    remark: str | None = None
    times: int | None = None


@dataclass(frozen=True)
class OffsetFaults:
    """How a real 4.x broker applies consumer offsets, made visible (0 = off, the default).

    A real broker serves PULL_MESSAGE on its pull executor and UPDATE_CONSUMER_OFFSET /
    QUERY_CONSUMER_OFFSET on a 32-thread consumer-manage executor (BrokerController
    .registerProcessor), so one connection's requests run concurrently and finish in any
    order; ConsumerOffsetManager.commitOffset is a plain last-writer-wins put. This broker
    runs every request on one loop, in arrival order, which hides two effects:

    ``offset_race`` (seconds): commitOffset creates a group's per-topic table with an
    unguarded get / new map / put (4.9.7 ``ConsumerOffsetManager.commitOffset``). Two first
    commits of one (group, topic) that overlap each install their own one-queue table and
    the later install wins: the other queue's offset is gone although both requests were
    answered SUCCESS. Here a commit that finds no table for its (group, topic) waits
    ``offset_race`` seconds between that look and the install, so any first commit that
    arrives meanwhile is lost the same way. Commits into an existing table are plain puts.

    ``pull_commit_delay`` (seconds): a pull's piggy-backed ``commitOffset`` (sysFlag bit 1)
    is applied at the end of PullMessageProcessor.processRequest on the pull executor, i.e.
    after an UPDATE_CONSUMER_OFFSET the client sent later may already have been applied;
    the older value then overwrites the newer one. Here that commit is applied this long
    after the pull arrived (the pull itself is answered as usual).

    ``first_on_disk`` (a flag): QUERY_CONSUMER_OFFSET of a queue the group never committed answers
    22 QUERY_NOT_FOUND even when the queue still starts at offset 0. A real broker answers 0 there
    only while the queue's first message is in memory (4.9.7 ConsumerManageProcessor:
    ``minOffset <= 0 && !checkInDiskByConsumeOffset(topic, queueId, 0)``; 5.3.3 the same), so a
    broker that has run a while, or a backlog bigger than its page cache, makes the client decide
    where such a queue starts (its consume-from rule): the case of queues added to a topic.
    """

    offset_race: float = 0.0
    pull_commit_delay: float = 0.0
    first_on_disk: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.first_on_disk, bool):
            raise ConfigError("first_on_disk", f"must be true or false, got {self.first_on_disk!r}")
        for f in fields(self):
            if f.name == "first_on_disk":
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 <= value <= 60:
                raise ConfigError(f.name, f"must be a number of seconds in [0, 60], got {value!r}")

    @property
    def active(self) -> bool:
        return bool(self.offset_race or self.pull_commit_delay or self.first_on_disk)


# spec name -> (field, value when given without "=S")
_SPEC_NAMES: dict[str, tuple[str, float | bool]] = {
    "offset-race": ("offset_race", 0.05), "pull-commit-delay": ("pull_commit_delay", 0.2),
    "first-on-disk": ("first_on_disk", True)}


def parse_offset_faults(spec: str, field: str = "faults") -> OffsetFaults:
    """``"offset-race=0.05,pull-commit-delay=0.2"`` (a bare name takes its default) -> OffsetFaults.

    An empty spec means no faults; anything else unknown raises ConfigError naming ``field``.
    """
    values: dict[str, Any] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip()
        if name not in _SPEC_NAMES:
            raise ConfigError(field, f"unknown fault {name!r}; known: {', '.join(sorted(_SPEC_NAMES))} "
                                     "(e.g. offset-race=0.05,pull-commit-delay=0.2)")
        attr, default = _SPEC_NAMES[name]
        if isinstance(default, bool):
            if sep and raw.strip().lower() not in ("true", "false", "1", "0"):
                raise ConfigError(field, f"{name}: {raw.strip()!r} is not true or false")
            values[attr] = raw.strip().lower() in ("true", "1") if sep else default
            continue
        try:
            values[attr] = float(raw) if sep else default
        except ValueError:
            raise ConfigError(field, f"{name}: {raw.strip()!r} is not a number of seconds") from None
    try:
        return OffsetFaults(**values)
    except ConfigError as exc:
        raise ConfigError(field, str(exc)) from None


class FaultInjector:
    """Thread-safe rule table consulted by the broker before answering each request,
    plus the broker-wide `OffsetFaults` (``offsets``)."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()
        self.offsets = OffsetFaults()
        self.delayed = 0  # answers being held back by a delay rule right now
        self.delayed_peak = 0  # the most held back at once (a client's requests in flight)

    def delay_started(self) -> None:
        with self._lock:
            self.delayed += 1
            self.delayed_peak = max(self.delayed_peak, self.delayed)

    def delay_ended(self) -> None:
        with self._lock:
            self.delayed -= 1

    def add(self, rule: FaultRule) -> FaultRule:
        if rule.action not in ("delay", "drop", "respond"):
            raise ValueError(f"action: unknown fault action {rule.action!r}")
        if rule.times is not None and rule.times < 1:
            raise ValueError(f"times: must be >= 1 or None, got {rule.times}")
        with self._lock:
            self._rules.append(rule)
        return rule

    def delay_responses(self, code: int | None, seconds: float, times: int | None = None) -> FaultRule:
        return self.add(FaultRule("delay", code, seconds=seconds, times=times))

    def drop_responses(self, code: int | None, times: int | None = None) -> FaultRule:
        return self.add(FaultRule("drop", code, times=times))

    def respond(self, code: int | None, response_code: int, remark: str | None = None,
                times: int | None = None) -> FaultRule:
        return self.add(FaultRule("respond", code, response_code=response_code, remark=remark, times=times))

    def system_busy(self, code: int | None, times: int | None = None) -> FaultRule:
        return self.respond(code, ResponseCode.SYSTEM_BUSY, BUSY_REMARK, times)

    def flow_control(self, code: int | None, times: int | None = None) -> FaultRule:
        return self.respond(code, ResponseCode.FLOW_CONTROL, FLOW_CONTROL_REMARK, times)

    def rules(self) -> list[FaultRule]:
        """The rules still in force (a rule with ``times`` goes once it has been used up)."""
        with self._lock:
            return list(self._rules)

    def set_offset_faults(self, faults: OffsetFaults) -> None:
        self.offsets = faults

    def clear(self) -> None:
        """Remove every rule, switch the offset faults off and reset ``delayed_peak``."""
        with self._lock:
            self._rules.clear()
            self.delayed_peak = self.delayed
        self.offsets = OffsetFaults()

    def take(self, code: int) -> FaultRule | None:
        """The first rule matching ``code``, consuming one of its ``times``."""
        if not self._rules:
            return None
        with self._lock:
            for rule in self._rules:
                if rule.code is None or rule.code == code:
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times <= 0:
                            self._rules.remove(rule)
                    return rule
        return None
