"""R7: a slow listener under a big backlog: the consumer's RSS stays within 120 % of its idle RSS plus
what its flow-control caps let it cache (cap messages x the measured RSS cost of a cached message), the
cache never exceeds the caps, and it keeps its queues (no drop / re-create loop)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from .conftest import Mode
from .harness import REPO, Broker, Members, Stopwatch, figure, produce, wait_until

BODY = 256
BATCH = 32  # pull_batch_size


_CALIBRATE = """
import collections, sys
from airflow_provider_rocketmq.client.protocol.message import decode_messages, encode_stored_message
from integration.reliability.member import rss_bytes
body, n = int(sys.argv[1]), int(sys.argv[2])
record = encode_stored_message(topic="R7", body=b"x" * body, properties={"rel_seq": "123456", "UNIQ_KEY": "A" * 32},
                               queue_id=1, queue_offset=1, commit_log_offset=1, born_timestamp=1,
                               born_host="127.0.0.1:1", store_timestamp=1, store_host="127.0.0.1:10911")
pull = record * 32
before = rss_bytes()
cache = collections.deque(maxlen=n // 32)  # a full cache whose oldest batches are consumed as new ones come
for _ in range(4 * (n // 32)):
    cache.append(decode_messages(pull))
print((rss_bytes() - before) / (n // 32 * 32))
"""


def rss_per_cached_message(n: int) -> float:
    """What one cached message adds to a process's RSS in steady state (objects, body, allocator
    overhead and the fragmentation of a cache whose batches keep being replaced), measured in a fresh
    interpreter that keeps ``n`` messages in pulled batches of 32 while 3n more pass through."""
    out = subprocess.run([sys.executable, "-c", _CALIBRATE, str(BODY), str(n)], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=True)
    return float(out.stdout.strip())


def test_r7_slow_listener_memory(broker: Broker, mode: Mode, tmp_path: Path) -> None:
    queues, n, watch = mode.pick((16, 30_000, 6.0), (64, 500_000, 60.0))
    per_queue = 1000  # pull_threshold_for_queue (the Java default)
    clock = Stopwatch()
    topic = broker.new_topic("r7", queues)
    members = Members(broker, tmp_path, broker.new_name("r7g"), topic, delay_ms=5.0, consume_thread_min=2,
                      consume_thread_max=2, pull_threshold_for_queue=per_queue, pull_batch_size=BATCH)
    try:
        m = members.start("S")
        wait_until(lambda: len(m.stats_lines()) >= 2, 30, "the member's first figures")
        base_rss = m.stats_lines()[-1]["rss"]  # started, owning its queues, nothing cached yet
        produce(broker, topic, range(n), size=BODY, batch=256)
        wait_until(lambda: m.stats_lines()[-1]["cached"] > 0, 60, "the cache filling")
        time.sleep(watch)  # the window the figures below cover: the cache stays full under a slow listener
        stats = m.stats_lines()
        m.stop()
    finally:
        members.stop_all()
    cap_count = (per_queue + BATCH) * queues  # a pull is sent while the cache is at or under the threshold
    per_msg = rss_per_cached_message(cap_count)
    cap_bytes = cap_count * per_msg
    max_cached = max(s["cached"] for s in stats)
    max_rss = max(s["rss"] for s in stats)
    growth = max_rss - base_rss
    changes = stats[-1]["changes"]
    figure("R7", "slow listener memory", queues=queues, backlog=n, body=BODY, cached_max=max_cached,
           cached_cap=cap_count, per_msg_bytes=int(per_msg), rss_base_mib=f"{base_rss / 2**20:.1f}",
           rss_max_mib=f"{max_rss / 2**20:.1f}", rss_growth_mib=f"{growth / 2**20:.1f}",
           cap_mib=f"{cap_bytes / 2**20:.1f}", growth_over_cap=f"{growth / cap_bytes:.2f}",
           rss_over_budget=f"{max_rss / (base_rss + cap_bytes):.2f}",
           assignment_changes=changes - 1, consumed=stats[-1]["consumed"], seconds=clock())
    assert max_cached <= cap_count
    # the process's RSS stays within 120 % of what it needs idle plus what the caps let it cache
    assert max_rss <= 1.2 * (base_rss + cap_bytes)
    assert changes == 1 and {s["queues"] for s in stats} == {stats[-1]["queues"]}  # no drop / re-create
