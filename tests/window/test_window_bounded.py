"""A window's memory does not grow with its size, and its consumer never pulls past the high-water marks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_rocketmq.client import (
    Admin,
    ClientConfig,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from airflow_provider_rocketmq.client.consumer.config import ConsumerConfig
from airflow_provider_rocketmq.client.protocol.message import decode_messages
from airflow_provider_rocketmq.embedded import pull as embedded_pull
from airflow_provider_rocketmq.window.manifest import read_manifest
from airflow_provider_rocketmq.window.runner import (
    WINDOW_CONSUMER_DEFAULTS,
    Listener,
    WindowSpec,
    register_window_listener,
    run_window,
)

ROOT = Path(__file__).resolve().parents[2]
WINDOW_MESSAGES = 2_000_000
RSS_CAP_MB = 320  # the bench measures ~200 MB for 1M and 5M alike; keeping every message would take ~2 GB

# the window in a process of its own; its peak RSS is VmHWM (ru_maxrss would include the RSS of the
# pytest process it was forked from: Linux carries the pre-exec high-water mark over exec)
CHILD = r"""
import json, sys
from airflow_provider_rocketmq import cli
code = cli.main(sys.argv[1:])
with open("/proc/self/status") as fh:
    hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
print("RESULT " + json.dumps({"code": code, "maxrss_kb": hwm}))
"""


@pytest.mark.timeout(240)
def test_a_two_million_message_window_stays_under_the_memory_cap(tmp_path: Path) -> None:
    broker = subprocess.Popen([sys.executable, "-m", "airflow_provider_rocketmq.embedded.backlog", "--topic",
                               "BoundedWindow", "--messages", str(WINDOW_MESSAGES)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline().strip()
        assert line.startswith("namesrv="), line
        namesrv = line.split("=", 1)[1]
        staging = tmp_path / "w"
        out = subprocess.run([sys.executable, "-c", CHILD, "window", "--namesrv", namesrv, "--group", "g_bounded",
                              "--topic", "BoundedWindow", "--staging", str(staging), "--json"],
                             capture_output=True, text=True, timeout=200, cwd=ROOT, check=False)
        result = next((json.loads(x[7:]) for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        assert out.returncode == 0 and result is not None and result["code"] == 0, out.stdout + out.stderr[-3000:]
        manifest = read_manifest(staging)  # files, sizes and checksums verified
        assert manifest.messages == WINDOW_MESSAGES
        assert sum(q.end_offset - q.start_offset for q in manifest.queues) == WINDOW_MESSAGES
        peak_mb = result["maxrss_kb"] / 1024
        assert peak_mb < RSS_CAP_MB, f"peak RSS {peak_mb:.0f} MB"
        with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
            mqs = admin.high_water_marks("BoundedWindow")
            assert {mq: admin.committed_offset("g_bounded", mq) for mq in mqs} == mqs
    finally:
        broker.terminate()
        broker.wait(30)
        if broker.stdout is not None:
            broker.stdout.close()


class SnapshotThenProduce:
    """The admin the window uses, producing more messages right after the high-water marks were read."""

    def __init__(self, admin: Admin, namesrv: str, more: int) -> None:
        self.admin, self.namesrv, self.more = admin, namesrv, more
        self.marks: dict[MessageQueue, int] = {}

    def high_water_marks(self, topic: str) -> dict[MessageQueue, int]:
        self.marks = self.admin.high_water_marks(topic)
        produce(self.namesrv, topic, self.more, start=1000)
        return self.marks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)


def produce(namesrv: str, topic: str, n: int, start: int = 0) -> None:
    with Producer(ClientConfig(namesrv_addr=namesrv)) as producer:
        for i in range(start, start + n):
            producer.send(Message(topic, b"m%d" % i, tags="T"))


def test_the_consumer_never_pulls_past_the_high_water_marks(embedded_cluster: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    namesrv = embedded_cluster.namesrv_addr
    with Admin(ClientConfig(namesrv_addr=namesrv)) as admin:
        admin.create_topic("wt_hwm", queues=4)
        produce(namesrv, "wt_hwm", 40)
        # what the broker served: every pull answer's message offsets, per queue
        served: dict[int, list[int]] = {}
        get_messages = embedded_pull.get_messages

        def spy(cq: Any, offset: int, max_nums: int, sub: Any) -> Any:
            result = get_messages(cq, offset, max_nums, sub)
            if cq is not None and cq.topic == "wt_hwm" and result[4]:
                served.setdefault(cq.queue_id, []).extend(m.queue_offset for m in decode_messages(result[4]))
            return result

        monkeypatch.setattr(embedded_pull, "get_messages", spy)
        consumers: list[PushConsumer] = []
        stats: list[dict[str, Any]] = []
        config = ConsumerConfig(namesrv_addr=namesrv, enable_offset_commit=False, **WINDOW_CONSUMER_DEFAULTS,
                                consume_from_where="CONSUME_FROM_FIRST_OFFSET")

        def factory(listener: Listener) -> PushConsumer:
            consumer = PushConsumer("g_hwm", config)
            consumer.subscribe("wt_hwm", "*")
            register_window_listener(consumer, listener)
            shutdown = consumer.shutdown

            def shutdown_keeping_stats(timeout: float | None = None) -> None:
                stats.append(consumer.stats())
                shutdown(timeout)
            consumer.shutdown = shutdown_keeping_stats  # type: ignore[method-assign]
            consumers.append(consumer)
            return consumer

        snapshot = SnapshotThenProduce(admin, namesrv, 40)
        spec = WindowSpec(topic="wt_hwm", consumer_group="g_hwm", staging_dir=str(tmp_path / "w"),
                          assignment_timeout=20)
        result = run_window(spec, snapshot, factory)
        marks = {mq.queue_id: off for mq, off in snapshot.marks.items()}
        assert result.messages == 40 and sum(marks.values()) == 40
        assert sum(admin.high_water_marks("wt_hwm").values()) == 80  # the 40 later ones are there
        # nothing at or past a queue's mark was ever served, nor counted as pulled
        assert {q: max(offs) for q, offs in served.items()} == {q: m - 1 for q, m in marks.items() if m}
        assert stats[0]["pulled_messages"] == 40
        manifest = read_manifest(result.manifest)
        assert {q.queue_id: q.end_offset for q in manifest.queues} == marks
        assert {mq.queue_id: admin.committed_offset("g_hwm", mq) for mq in snapshot.marks} == marks
