"""kill -9 of a consumer process and a restart: nothing lost, re-delivery bounded by the last persist."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .cluster import TestCluster, wait_until

CHILD = textwrap.dedent("""
    import json, sys, time
    from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
    from airflow_provider_rocketmq.client.consumer.push import PushConsumer
    namesrv, group, topic, out_path = sys.argv[1:5]
    out = open(out_path, "a", buffering=1)
    def listener(msgs, ctx):
        for m in msgs:
            time.sleep(0.0005)
            out.write(json.dumps([m.queue_id, m.queue_offset, m.body.decode()]) + "\\n")
        out.flush()
        return ConsumeStatus.CONSUME_SUCCESS
    c = PushConsumer(group, namesrv_addr=namesrv, consume_from_where="first", rebalance_interval=0.5,
                     persist_consumer_offset_interval=0.5, consume_thread_min=2, consume_thread_max=2)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    time.sleep(float(sys.argv[5]))
    c.shutdown()
""")


def spawn(cluster: TestCluster, group: str, topic: str, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CHILD, cluster.namesrv_addr, group, topic, str(out),
                             str(seconds)], env={**os.environ, "PYTHONPATH": os.getcwd()})


def read(out: Path) -> list[tuple[int, int, str]]:
    rows = []
    for line in out.read_text().splitlines():
        with contextlib.suppress(ValueError):  # the torn last line of a killed process
            rows.append(tuple(json.loads(line)))
    return rows  # type: ignore[return-value]


@pytest.mark.slow
def test_kill_9_and_restart_lose_nothing(cluster: TestCluster, tmp_path: Path) -> None:
    topic, group = "CrashTopic", "g_crash"
    cluster.create_topic(topic, 4)
    sent = cluster.fill(topic, 6000, body=lambda i: b"%06d" % i, per_batch=50)
    out = tmp_path / "consumed.jsonl"
    first = spawn(cluster, group, topic, out, 120)
    try:
        wait_until(lambda: out.exists() and len(read(out)) >= 1500, 60, "the first process consuming")
        # at least one persist happened: the broker holds offsets
        wait_until(lambda: sum(cluster.committed(group, topic).values()) > 0, 10, "a persisted offset")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    committed_at_kill = {mq.queue_id: off for mq, off in cluster.committed(group, topic).items()}
    before = read(out)
    assert len(before) < 6000  # killed mid-stream
    second = spawn(cluster, group, topic, out, 3600)
    try:
        wait_until(lambda: {r[2] for r in read(out)} >= {b.decode() for b in sent}, 90, "every message")
    finally:
        second.terminate()
        second.wait(30)
    rows = read(out)
    assert {r[2] for r in rows} == {b.decode() for b in sent}  # nothing lost
    seen_before = {(q, o) for q, o, _ in before}
    again = [(q, o) for q, o, _ in rows[len(before):] if (q, o) in seen_before]
    # re-delivered messages are only those consumed after the last persisted offset
    assert all(o >= committed_at_kill[q] for q, o in again), (committed_at_kill, again[:10])
    print(f"re-delivered after kill -9: {len(again)} of {len(before)} consumed before")
