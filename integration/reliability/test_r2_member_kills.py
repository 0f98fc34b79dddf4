"""R2: members are killed (SIGKILL) one after another while three consume a backlog; each is
started again at once. Nothing is lost; duplicates stay within what committing offsets every
``persist_consumer_offset_interval`` implies (computed from the deliveries and printed)."""

from __future__ import annotations

import time
from pathlib import Path

from .conftest import Mode
from .harness import Broker, Delivery, Members, Stopwatch, figure, lost_and_duplicates, produce, wait_until

PERSIST_S = 5.0  # the consumers' persist_consumer_offset_interval (Java's default)
SLACK_S = 2.0  # a persist's own latency and the rebalance that follows a membership change


def duplicate_bound(deliveries: list[Delivery], events: list[float]) -> int:
    """Deliveries that a membership change at time t may repeat: for each queue that changed hands
    at t, what its previous owner consumed in the PERSIST_S + SLACK_S before t (not yet committed)
    and until the new owner started (a leaver's in-flight work, a joiner's overlap)."""
    by_queue: dict[int, list[Delivery]] = {}
    for d in sorted(deliveries, key=lambda d: d.start):
        by_queue.setdefault(d.queue_id, []).append(d)
    bound = 0
    for t in events:
        for ds in by_queue.values():
            before = [d for d in ds if d.start < t]
            after = [d for d in ds if d.start >= t]
            if not before or not after or before[-1].member == after[0].member:
                continue
            old = before[-1].member
            handed_over = next((d.start for d in after if d.member != old), after[0].start)
            bound += sum(1 for d in ds if d.member == old and t - PERSIST_S - SLACK_S <= d.end <= handed_over)
    return bound


def test_r2_member_kills(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    n, every, duration, delay = mode.pick((10_000, 3.0, 12.0, 3.0), (100_000, 10.0, 120.0, 3.0))
    clock = Stopwatch()
    topic = broker.new_topic("r2", 8)
    produce(broker, topic, range(n))
    members = Members(broker, tmp_path, broker.new_name("r2g"), topic, delay_ms=delay,
                      persist_consumer_offset_interval=PERSIST_S, consume_thread_min=1, consume_thread_max=1)
    events: list[float] = []
    kills = 0
    try:
        alive = [members.start() for _ in range(3)]
        wait_until(lambda: len(members.deliveries()) >= 200, 60, "consumption under way")
        end = time.monotonic() + duration
        while time.monotonic() < end:
            time.sleep(every)
            victim = alive.pop(0)
            victim.kill()
            events.append(time.time())
            kills += 1
            alive.append(members.start())
            events.append(time.time())
        wait_until(lambda: len({d.seq for d in members.deliveries()}) >= n, 600, "every message consumed")
        finals = [m.stop() for m in alive]
    finally:
        members.stop_all()
    deliveries = members.deliveries()
    lost, dup = lost_and_duplicates(deliveries, range(n))
    bound = duplicate_bound(deliveries, events)
    figure("R2", "SIGKILL a member", every_s=every, for_s=duration, members=3, kills=kills, msgs=n, lost=lost,
           dup=dup, dup_bound=bound, persist_s=PERSIST_S, seconds=clock())
    assert all(f.get("ok") for f in finals)
    assert lost == 0
    assert dup <= bound
