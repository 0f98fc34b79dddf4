"""R5: retries with max_reconsume_times=2: every message is delivered exactly 3 times, then lands in
the DLQ once; while send-back fails, the group's committed offset never passes a failed message."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from airflow_provider_rocketmq.client.protocol.names import dlq_topic, retry_topic
from airflow_provider_rocketmq.client.route import PERM_READ, PERM_WRITE

from .conftest import Mode
from .harness import Broker, Members, Stopwatch, figure, produce, wait_until


def dlq_seqs(broker: Broker, group: str, tmp_path: Path, expected: int) -> Counter[int]:
    """The sequence numbers in the group's DLQ, read by a member of another group."""
    dlq = dlq_topic(group)
    wait_until(lambda: sum(broker.admin.high_water_marks(dlq).values()) >= expected, 120,
               f"{expected} messages in {dlq}")
    readers = Members(broker, tmp_path, broker.new_name("r5dlq"), dlq)
    try:
        r = readers.start("dlq")
        wait_until(lambda: len(r.deliveries()) >= expected, 60, "the DLQ read back")
        time.sleep(0.5)  # a window for more than expected to show up
    finally:
        readers.stop_all()
    return Counter(d.seq for d in readers.deliveries())


def test_r5_retry_then_dlq(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    n = mode.pick(20, 200)
    clock = Stopwatch()
    topic = broker.new_topic("r5", 4)
    group = broker.new_name("r5g")
    produce(broker, topic, range(n))
    members = Members(broker, tmp_path, group, topic, fail=True, max_reconsume_times=2)
    try:
        m = members.start("F")
        wait_until(lambda: len(m.deliveries()) >= 3 * n, 300, "three deliveries of every message")
        in_dlq = dlq_seqs(broker, group, tmp_path, n)
        time.sleep(1.0)  # a window for a fourth delivery to show up
        final = m.stop()
    finally:
        members.stop_all()
    per_msg = Counter(d.seq for d in members.deliveries())
    reconsume = {s: sorted(d.reconsume for d in members.deliveries() if d.seq == s) for s in list(per_msg)[:3]}
    committed = broker.admin.committed_offsets(group, topic)
    figure("R5", "retry max 2 then DLQ", msgs=n, deliveries=sorted(set(per_msg.values())), in_dlq=len(in_dlq),
           dlq_dups=sum(c - 1 for c in in_dlq.values()), seconds=clock())
    assert final.get("ok") is True
    assert per_msg == {s: 3 for s in range(n)}, per_msg
    assert all(r == [0, 1, 2] for r in reconsume.values())
    assert in_dlq == {s: 1 for s in range(n)}
    assert sum(committed.values()) == n  # everything went to retry/DLQ, so all of it is consumed


def test_r5_failing_send_back_never_advances_the_offset(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    n = mode.pick(20, 200)
    clock = Stopwatch()
    topic = broker.new_topic("r5b", 2)
    group = broker.new_name("r5bg")
    retry = retry_topic(group)
    broker.admin.create_topic(retry, queues=1, perm=PERM_READ)  # send-back and its fallback both refused
    produce(broker, topic, range(n))
    members = Members(broker, tmp_path, group, topic, fail=True, max_reconsume_times=2,
                      persist_consumer_offset_interval=0.5)
    advanced = 0
    try:
        m = members.start("F")
        wait_until(lambda: len({d.seq for d in m.deliveries()}) >= n, 120, "every message delivered once")
        deadline = time.monotonic() + mode.pick(3.0, 15.0)
        while time.monotonic() < deadline:  # several persist periods while every send-back fails
            advanced += sum(1 for off in broker.admin.committed_offsets(group, topic).values() if off > 0)
            time.sleep(0.25)
        broker.admin.create_topic(retry, queues=1, perm=PERM_READ | PERM_WRITE)  # send-back works again
        in_dlq = dlq_seqs(broker, group, tmp_path, n)
        final = m.stop()
    finally:
        members.stop_all()
    committed = broker.admin.committed_offsets(group, topic)
    figure("R5", "failing send-back", msgs=n, offset_advanced_while_failing=advanced, in_dlq=len(in_dlq),
           committed_at_end=sum(committed.values()), seconds=clock())
    assert advanced == 0
    assert set(in_dlq) == set(range(n))
    assert final.get("ok") is True and sum(committed.values()) == n


