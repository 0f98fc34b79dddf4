"""R1: graceful hand-off A -> B: A leaves mid-stream with a clean shutdown, B takes its queues over
from the offsets A committed: nothing lost, nothing delivered twice."""

from __future__ import annotations

from pathlib import Path

from .conftest import Mode
from .harness import Broker, Members, Stopwatch, figure, lost_and_duplicates, produce, wait_until


def test_r1_graceful_handoff(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    n, queues = mode.pick((2_000, 8), (10_000, 16))
    clock = Stopwatch()
    topic = broker.new_topic("r1", queues)
    members = Members(broker, tmp_path, broker.new_name("r1g"), topic, delay_ms=mode.pick(4.0, 2.0),
                      consume_thread_min=1, consume_thread_max=1,
                      pull_threshold_for_queue=20, pull_batch_size=10)  # A's drain covers its cache only
    try:
        a = members.start("A")
        b = members.start("B")
        wait_until(lambda: all(m.stats_lines() and m.stats_lines()[-1]["queues"] >= queues // 2
                               for m in (a, b)), 60, "A and B sharing the queues")
        produce(broker, topic, range(n))
        wait_until(lambda: len(members.deliveries()) >= n // 4, 120, "a quarter of the messages consumed")
        final_a = a.stop()  # graceful: drain, commit (read back), unregister; B is told and takes over
        wait_until(lambda: len({d.seq for d in members.deliveries()}) >= n, 180, "every message consumed")
        final_b = b.stop()
    finally:
        members.stop_all()
    deliveries = members.deliveries()
    lost, dup = lost_and_duplicates(deliveries, range(n))
    by_a = sum(1 for d in deliveries if d.member == "A")
    figure("R1", "graceful hand-off A->B", msgs=n, queues=queues, lost=lost, dup=dup, by_A=by_a,
           by_B=len(deliveries) - by_a, a_commit_ok=final_a.get("ok"), seconds=clock())
    assert final_a.get("ok") is True and final_b.get("ok") is True
    assert 0 < by_a < n // 2  # A left before its queues were done: B finished them
    assert (lost, dup) == (0, 0)
