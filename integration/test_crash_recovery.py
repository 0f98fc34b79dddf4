"""Crashes mid-stream: kill -9 of a consumer process, and a broker restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

from airflow_provider_rocketmq.client import MessageExt

from .backends import IntegrationCluster, wait_until
from .helpers import (
    SEQ,
    Collector,
    make_message,
    produce,
    start_consumer,
    stop_consumers,
    wait_offsets_committed,
)

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 90.0


def _spawn_consumer(cluster: IntegrationCluster, group: str, topic: str, out: Path, log: Path,
                    delay_ms: float) -> subprocess.Popen[bytes]:
    with open(log, "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "integration.consumer_proc", "--namesrv", cluster.namesrv_addr,
             "--group", group, "--topic", topic, "--out", str(out), "--delay-ms", str(delay_ms)],
            cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
        )


def _consumed(out: Path) -> list[int]:
    if not out.exists():
        return []
    # a line is complete only once its newline is on disk
    return [int(line.split()[0]) for line in out.read_text().splitlines(keepends=True) if line.endswith("\n")]


def test_kill_9_consumer_mid_stream_then_restart_loses_nothing(cluster: IntegrationCluster,
                                                              tmp_path: Path) -> None:
    topic = cluster.new_topic("kill9", queues=4)
    group = cluster.new_group("kill9")
    out, log = tmp_path / "consumed.txt", tmp_path / "consumer.log"
    with cluster.producer() as producer:
        produce(producer, topic, range(300))

        first = _spawn_consumer(cluster, group, topic, out, log, delay_ms=20)
        try:
            wait_until(lambda: len(_consumed(out)) >= 30 or first.poll() is not None, TIMEOUT,
                       "the first consumer process consuming")
            assert first.poll() is None, f"consumer process died: {log.read_text()[-2000:]}"
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(30)
        assert first.returncode == -signal.SIGKILL
        before_restart = set(_consumed(out))
        assert len(before_restart) < 300, "the kill did not land mid-stream"

        produce(producer, topic, range(300, 600))

    second = _spawn_consumer(cluster, group, topic, out, log, delay_ms=0)
    try:
        wait_until(lambda: set(range(600)) <= set(_consumed(out)) or second.poll() is not None, TIMEOUT,
                   "every message consumed after the restart")
        assert second.poll() is None, f"consumer process died: {log.read_text()[-2000:]}"
    finally:
        second.terminate()
        rc = second.wait(60)
    assert rc == 0, log.read_text()[-2000:]
    consumed = _consumed(out)
    assert set(consumed) == set(range(600))
    # at-least-once: redeliveries are possible only for what the killed process had not committed
    redelivered = len(consumed) - len(set(consumed))
    assert redelivered <= len(before_restart) + 4 * 32
    wait_offsets_committed(cluster, group, topic)


def test_broker_restart_mid_stream_loses_nothing(restartable: IntegrationCluster) -> None:
    cluster = restartable
    topic = cluster.new_topic("brestart", queues=4)
    group = cluster.new_group("brestart")
    collector = Collector()
    # messages 100..199 are held in the listener until the broker is back, so the restart
    # happens with deliveries in flight and pulls outstanding
    released = threading.Event()

    def hold(msg: MessageExt) -> None:
        if 100 <= int(msg.properties[SEQ]) < 200:
            released.wait(TIMEOUT)

    consumer = start_consumer(cluster, group, topic, collector.listener("c1", hold))
    try:
        with cluster.producer() as producer:
            produce(producer, topic, range(200))
            collector.wait_for(lambda recs: len(recs) >= 20, TIMEOUT, "consumption under way")
        assert len(collector.seqs()) < 200
        cluster.restart_broker()
        # the broker is back: sends succeed again once it has re-registered its routes
        with cluster.producer() as producer:
            for seq in range(200, 400):
                msg = make_message(topic, seq)
                wait_until(partial(producer.send, msg), TIMEOUT, f"message {seq} sent after the broker restart",
                           interval=0.2)
        released.set()
        collector.wait_for_seqs(range(400), TIMEOUT)
        wait_offsets_committed(cluster, group, topic)
    finally:
        released.set()
        stop_consumers(consumer)
    assert collector.seqs() == set(range(400))
