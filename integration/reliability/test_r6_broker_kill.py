"""R6: the broker is killed (SIGKILL) for a while under a backlog: nothing is lost and pulls resume
within 5 s of the broker accepting connections again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import Mode
from .harness import Broker, Members, Stopwatch, figure, lost_and_duplicates, produce, wait_until

RESUME_LIMIT_S = 5.0


def test_r6_broker_kill(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    if not broker.can_kill:
        pytest.skip(f"R6 kills the broker; the suite does not own {broker.namesrv} (ROCKETMQ_NAMESRV) and "
                    f"ROCKETMQ_BROKER_KILL_CMD / ROCKETMQ_BROKER_START_CMD are not set")
    outage = mode.pick(3.0, 30.0)
    n = mode.pick(3_000, 300_000)
    clock = Stopwatch()
    topic = broker.new_topic("r6", 8)
    produce(broker, topic, range(n))
    members = Members(broker, tmp_path, broker.new_name("r6g"), topic, delay_ms=0.5,
                      pull_threshold_for_queue=32, pull_batch_size=16)
    try:
        m = members.start("M")
        wait_until(lambda: len(m.deliveries()) >= n // 5, 120, "a fifth of the backlog consumed")
        broker.kill()
        down_at = time.time()
        time.sleep(outage)  # the outage itself
        back = broker.start()  # when it accepted connections again
        first = wait_until(lambda: min((d.start for d in m.deliveries() if d.start > back), default=None),
                           60, "a delivery after the restart")
        resume = first - back
        wait_until(lambda: len({d.seq for d in m.deliveries()}) >= n, 300, "the whole backlog")
        final = m.stop()
    finally:
        members.stop_all()
    lost, dup = lost_and_duplicates(members.deliveries(), range(n))
    figure("R6", "broker kill -9", broker=broker.kind, outage_s=outage, down_s=back - down_at, msgs=n, lost=lost,
           dup=dup, resume_s=resume, limit_s=RESUME_LIMIT_S, seconds=clock())
    assert final.get("ok") is True
    assert lost == 0
    assert resume <= RESUME_LIMIT_S
