"""The fault schedule of one chaos run, drawn from its seed and nothing else.

A run is a few *cycles* of the flow a DAG runs (lag check -> window -> Spark load -> commit), each
with a hand-off (staging or offsets) and zero or more faults tied to a step of the cycle. What the
seed fixes: the output kind, where windows are staged, whether the producer sends by key (an
orderly topic), the producer's rate, every cycle's hand-off and every fault with its parameters
(when it strikes, how long it lasts). What it cannot fix is the machine's timing: a kill 0.4 s after
a phase line lands wherever the process is at that moment. Replaying a seed replays the schedule.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

OUTPUT_KINDS = ("local", "s3", "iceberg")
HANDOFFS = ("staging", "offsets")
STEPS = ("lag", "window", "load", "commit")

# every fault kind, in the order of the results table
KILL_WINDOW = "kill-window"          # kill -9 of the window process
KILL_DRIVER = "kill-driver"          # kill -9 of the Spark driver (JVM, Python driver and workers)
KILL_COMMIT = "kill-commit"          # kill -9 of the process committing the offsets
BROKER_KILL = "broker-kill"          # kill -9 of the broker(s), restarted after a while
ZOMBIE_LOADER = "zombie-loader"      # SIGSTOP of a load past --abandon-after, SIGCONT after the next load
CONCURRENT_LOADS = "concurrent-loads"  # two loads of the same windows at once
OBJSTORE_ERRORS = "objstore-errors"  # 503 SlowDown, connection resets, slow answers from the S3 proxy
TOPIC_EXPAND = "topic-expand"        # the topic grows from 8 to 12 queues per broker
OFFSET_RESET = "offset-reset"        # the group's offsets reset to an earlier time (resetOffsetByTime)
NET_CUT = "net-cut"                  # broker-b's network link down for 5-60 s
FAULT_KINDS = (KILL_WINDOW, KILL_DRIVER, KILL_COMMIT, BROKER_KILL, ZOMBIE_LOADER, CONCURRENT_LOADS,
               OBJSTORE_ERRORS, TOPIC_EXPAND, OFFSET_RESET, NET_CUT)

INITIAL_QUEUES = 8
EXPANDED_QUEUES = 12


@dataclass(frozen=True)
class Capabilities:
    """What the backend under test lets the harness do."""

    broker_kill: bool = True
    net_cut: bool = False

    def allows(self, kind: str, uses_s3: bool) -> bool:
        if kind == BROKER_KILL:
            return self.broker_kill
        if kind == NET_CUT:
            return self.net_cut
        if kind == OBJSTORE_ERRORS:
            return uses_s3
        return True


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, the step of its cycle it is tied to, and when/how it strikes.

    ``trigger``: for process faults, the event of the process the delay counts from ("start", or
    a phase the process reports: "hwm" for a window's high-water marks, "write" for a load's
    written files, just before its commit); ``delay``: seconds after it; ``params``: per kind
    (``down_s``, ``duration_s``, ``back``, the object store's fault mix...).
    """

    kind: str
    step: str
    trigger: str = "start"
    delay: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        extra = " ".join(f"{k}={_fmt(v)}" for k, v in sorted(self.params.items()))
        return f"{self.kind}@{self.step}/{self.trigger}+{self.delay:.2f}s" + (f" {extra}" if extra else "")


@dataclass(frozen=True)
class Cycle:
    index: int
    handoff: str
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class Schedule:
    seed: int
    output: str                # local | s3 | iceberg
    staging: str               # where windows are staged: local | s3
    warehouse: str             # iceberg only: local | s3
    orderly: bool              # the producer sends by key (per-key order is checked)
    rate: float                # messages per second the producer aims at
    keys: int                  # distinct message keys
    retries: int               # task retries (a failed step runs again at once, like an Airflow retry)
    abandon_after: float       # --abandon-after of every load (object store outputs)
    cycles: tuple[Cycle, ...]

    @property
    def uses_s3(self) -> bool:
        return "s3" in (self.output, self.staging) or (self.output == "iceberg" and self.warehouse == "s3")

    @property
    def faults(self) -> list[Fault]:
        return [f for c in self.cycles for f in c.faults]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        cycles = tuple(Cycle(c["index"], c["handoff"], tuple(Fault(**f) for f in c["faults"]))
                       for c in data["cycles"])
        return cls(**{**data, "cycles": cycles})

    def describe(self) -> str:
        head = (f"seed={self.seed} output={self.output} staging={self.staging}"
                + (f" warehouse={self.warehouse}" if self.output == "iceberg" else "")
                + f" orderly={self.orderly} rate={self.rate:g}/s keys={self.keys} retries={self.retries}"
                + f" abandon_after={self.abandon_after:g}s")
        lines = [head]
        for c in self.cycles:
            faults = "; ".join(f.describe() for f in c.faults) or "no fault"
            lines.append(f"  cycle {c.index} handoff={c.handoff}: {faults}")
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v)


def draw(seed: int, caps: Capabilities, *, cycles: int = 3, outputs: Sequence[str] = OUTPUT_KINDS,
         kinds: Iterable[str] = FAULT_KINDS, rate: float | None = None) -> Schedule:
    """The schedule of ``seed``: the same arguments always give the same schedule.

    ``outputs`` and ``kinds`` narrow the draw (e.g. a run per output kind, or one fault kind);
    kinds the backend cannot inject (``caps``) or the run cannot use (object-store errors without
    S3) are left out. Every cycle but the first gets at least one fault, so each run injects some.
    """
    rng = random.Random(seed)
    output = rng.choice(list(outputs))
    staging = rng.choice(["local", "s3"])
    warehouse = rng.choice(["local", "s3"]) if output == "iceberg" else "local"
    orderly = rng.random() < 0.5
    run_rate = rate if rate is not None else rng.choice([20.0, 40.0, 80.0])
    keys = rng.choice([8, 32, 64])
    retries = rng.choice([0, 1])
    abandon_after = rng.choice([6.0, 10.0])
    uses_s3 = "s3" in (output, staging) or (output == "iceberg" and warehouse == "s3")
    allowed = [k for k in FAULT_KINDS if k in set(kinds) and caps.allows(k, uses_s3)]
    out: list[Cycle] = []
    expanded = False
    for index in range(cycles):
        handoff = rng.choice(HANDOFFS)
        faults: list[Fault] = []
        wanted = 0 if not allowed else (1 if rng.random() < 0.6 else 2)
        pool = [k for k in allowed if not (k == TOPIC_EXPAND and expanded)]
        for _ in range(wanted):
            if not pool:
                break
            kind = rng.choice(pool)
            pool.remove(kind)  # at most one fault of a kind per cycle
            fault = _draw_fault(rng, kind)
            if kind == OFFSET_RESET and index == 0:
                # nothing to rewind before the first commit: the first cycle's reset follows its commit
                fault = Fault(kind, "commit", "start", rng.uniform(2.0, 6.0), fault.params)
            faults.append(fault)
            expanded = expanded or kind == TOPIC_EXPAND
        out.append(Cycle(index, handoff, tuple(faults)))
    return Schedule(seed, output, staging, warehouse, orderly, run_rate, keys, retries, abandon_after, tuple(out))


def _draw_fault(rng: random.Random, kind: str) -> Fault:
    u = rng.uniform
    if kind == KILL_WINDOW:
        trigger = rng.choice(["start", "hwm"])
        return Fault(kind, "window", trigger, u(0.2, 1.0) if trigger == "start" else u(0.0, 0.4))
    if kind == KILL_DRIVER:  # "start": counted from the Python driver's start (the JVM's comes earlier)
        trigger = rng.choice(["start", "start", "write"])
        return Fault(kind, "load", trigger, u(0.5, 12.0) if trigger == "start" else u(0.0, 0.6))
    if kind == KILL_COMMIT:
        return Fault(kind, "commit", "start", u(0.1, 1.2))
    if kind == BROKER_KILL:
        step = rng.choice(["window", "load", "commit"])
        return Fault(kind, step, "start", u(0.0, 8.0 if step == "load" else 1.0), {"down_s": u(1.0, 8.0)})
    if kind == ZOMBIE_LOADER:
        trigger = rng.choice(["start", "write"])
        return Fault(kind, "load", trigger, u(0.5, 10.0) if trigger == "start" else u(0.0, 0.3))
    if kind == CONCURRENT_LOADS:
        return Fault(kind, "load", "start", u(0.0, 4.0))
    if kind == OBJSTORE_ERRORS:
        return _draw_objstore_fault(rng)
    if kind == TOPIC_EXPAND:
        return Fault(kind, rng.choice(STEPS), "start", u(0.0, 2.0), {"queues": EXPANDED_QUEUES})
    if kind == OFFSET_RESET:
        # back: the reset time, as a fraction of the time from the run's start to its last committed window
        return Fault(kind, rng.choice(STEPS), "start", u(0.0, 2.0), {"back": round(u(0.0, 0.9), 2)})
    if kind == NET_CUT:  # the window is short: a cut tied to it starts with it
        step = rng.choice(STEPS)
        return Fault(kind, step, "start", u(0.0, 0.5 if step == "window" else 5.0), {"duration_s": u(5.0, 60.0)})
    raise ValueError(f"unknown fault kind {kind!r}")


def _draw_objstore_fault(rng: random.Random) -> Fault:
    """Object-store errors (the same draws in the same order as before: recorded seeds replay)."""
    kind = OBJSTORE_ERRORS
    u = rng.uniform
    step = rng.choice(["window", "load", "load", "commit"])
    mix = {"slowdown": round(u(0.0, 0.4), 2), "reset_before": round(u(0.0, 0.3), 2),
           "reset_after": round(u(0.0, 0.3), 2), "slow": round(u(0.0, 0.3), 2),
           "slow_s": round(u(0.5, 4.0), 2)}
    params: dict[str, Any] = {"duration_s": u(5.0, 40.0), "mix": mix}
    if rng.random() < 0.3:  # a blip exactly at a load's commit: the answers of ledger-entry writes lost
        params["ledger_only"] = True
        # every answer lost while it lasts: the client's own retries (about 10) cannot get through
        params["mix"] = {"slowdown": 0.0, "reset_before": 0.0, "reset_after": 1.0, "slow": 0.0, "slow_s": 1.0}
        # until the load step ends (its commit comes last, after a run time no schedule can know)
        return Fault(kind, "load", "start", u(0.0, 3.0), {**params, "duration_s": 0.0, "until": "load-end"})
    if rng.random() < 0.4:  # a burst in which every answer is lost (the request may have been applied)
        params["outage_after_s"] = u(0.0, 15.0)
        params["outage_s"] = u(1.0, 8.0)
    return Fault(kind, step, "start", u(0.0, 3.0), params)
