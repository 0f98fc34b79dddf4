"""R3: orderly members go 4 -> 2 -> 4, then a fifth joins and leaves again and again: in every
stable phase each member gets its fair share (+-10 %), and no queue is ever consumed by two
members at once; nothing is lost."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from .conftest import Mode
from .harness import Broker, Member, Members, Stopwatch, figure, lost_and_duplicates, produce, wait_until
from .orderly_checks import overlaps

QUEUES = 16
SHARE_TOLERANCE = 0.10  # of the fair share 1/n


def owned(members: list[Member]) -> list[int]:
    return [m.stats_lines()[-1]["queues"] if m.stats_lines() else 0 for m in members]


def test_r3_membership_changes(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    per_phase, cycles = mode.pick((800, 5), (8_000, 50))
    clock = Stopwatch()
    topic = broker.new_topic("r3", QUEUES, order=True)
    lock_live = max(1.0, broker.lock_expiry - 2.0)
    members = Members(broker, tmp_path, broker.new_name("r3g"), topic, orderly=True,
                      lock_interval=min(20.0, lock_live / 2), lock_max_live_time=lock_live,
                      rebalance_interval=mode.pick(1.0, 5.0))
    shares: list[str] = []
    worst = 0.0
    seq = 0

    def phase(active: list[Member]) -> None:
        nonlocal seq, worst
        want = QUEUES // len(active)
        # a stable split: every member holds its share of the topic's queues (the retry queue aside)
        wait_until(lambda: all(q in (want, want + 1) for q in owned(active)) and sum(owned(active)) >= QUEUES,
                   120, f"{len(active)} members splitting the queues")
        start = seq
        seq += produce(broker, topic, range(start, start + per_phase), orderly_key=lambda s: s)
        wait_until(lambda: {d.seq for d in members.deliveries()} >= set(range(start, seq)), 300,
                   "the phase's messages consumed")
        got = Counter(d.member for d in members.deliveries() if start <= d.seq < seq)
        for m in active:
            share = got[m.name] / per_phase
            worst = max(worst, abs(share * len(active) - 1.0))
        shares.append("/".join(f"{got[m.name] / per_phase:.2f}" for m in active))

    try:
        four = [members.start(f"m{i}") for i in range(4)]
        phase(four)
        for m in four[2:]:
            m.stop()
        phase(four[:2])
        four = four[:2] + [members.start(f"m{i}") for i in (4, 5)]
        phase(four)
        # fast join/leave of a fifth member while messages keep coming
        stop_producing = threading.Event()
        churn_start = seq

        def feed() -> None:
            nonlocal seq
            while not stop_producing.is_set():
                seq += produce(broker, topic, range(seq, seq + 50), orderly_key=lambda s: s)
                time.sleep(0.05)

        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            for i in range(cycles):
                members.start(f"x{i}").stop()
        finally:
            stop_producing.set()
            feeder.join()
        wait_until(lambda: {d.seq for d in members.deliveries()} >= set(range(churn_start, seq)), 300,
                   "the churn's messages consumed")
        finals = [m.stop() for m in four]
    finally:
        members.stop_all()
    deliveries = members.deliveries()
    lost, dup = lost_and_duplicates(deliveries, range(seq))
    both = overlaps(deliveries)
    figure("R3", "4->2->4 members + join/leave churn (orderly)", queues=QUEUES, msgs=seq, cycles=cycles,
           shares=" ".join(shares), worst_share_dev=f"{worst:.1%}", lost=lost, dup=dup, concurrent=len(both),
           seconds=clock())
    assert all(f.get("ok") for f in finals)
    assert worst <= SHARE_TOLERANCE
    assert lost == 0 and not both, both[:5]
