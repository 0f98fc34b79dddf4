"""R4: orderly consumption while a member is killed (SIGKILL): each queue's messages are consumed in
order (re-deliveries repeat a suffix), never by two members at once, and a survivor takes the dead
member's queues over within 80 s (the broker's 60 s lock expiry plus a rebalance)."""

from __future__ import annotations

import time
from pathlib import Path

from .conftest import Mode
from .harness import Broker, Members, Stopwatch, figure, lost_and_duplicates, produce, wait_until
from .orderly_checks import order_breaks, overlaps

TAKEOVER_LIMIT_S = 80.0


def test_r4_orderly_under_kill(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    n = mode.pick(4_000, 20_000)
    queues = 8
    clock = Stopwatch()
    topic = broker.new_topic("r4", queues, order=True)
    produce(broker, topic, range(n), orderly_key=lambda s: s)  # seq s -> queue s % 8, in order
    lock_live = max(1.0, broker.lock_expiry - 2.0)
    members = Members(broker, tmp_path, broker.new_name("r4g"), topic, orderly=True, delay_ms=10.0,
                      lock_interval=min(20.0, lock_live / 2), lock_max_live_time=lock_live,
                      rebalance_interval=mode.pick(2.0, 20.0))
    try:
        a = members.start("A")
        b = members.start("B")
        wait_until(lambda: len({d.queue_id for d in a.deliveries()}) >= 2 and b.deliveries(), 60,
                   "both members consuming")
        killed = time.time()
        a.kill()
        wait_until(lambda: len({d.seq for d in members.deliveries()}) >= n, 600, "every message consumed")
        final = b.stop()
    finally:
        members.stop_all()
    deliveries = members.deliveries()
    # the dead member's queues that still held messages: B consumed them after the kill
    victim_queues = {d.queue_id for d in deliveries if d.member == "A" and d.end > killed - 1.0} & \
        {d.queue_id for d in deliveries if d.member == "B" and d.start > killed}
    takeover = max((min(d.start for d in deliveries if d.member == "B" and d.queue_id == q and d.start > killed)
                    - killed for q in victim_queues), default=0.0)
    lost, dup = lost_and_duplicates(deliveries, range(n))
    breaks = order_breaks(deliveries)
    both = overlaps(deliveries)
    figure("R4", "orderly under kill", msgs=n, queues=queues, victim_queues=len(victim_queues), lost=lost, dup=dup,
           order_breaks=len(breaks), concurrent=len(both), takeover_s=takeover,
           broker_lock_expiry_s=broker.lock_expiry if broker.owned else "unknown (not the suite's broker)",
           limit_s=TAKEOVER_LIMIT_S, seconds=clock())
    assert final.get("ok") is True
    assert lost == 0 and not breaks and not both
    assert victim_queues and takeover <= TAKEOVER_LIMIT_S
