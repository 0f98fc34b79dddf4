"""Long polls are bounded by one periodic sweep, not a timer per pull: a lost answer is failed
after consumer_timeout_when_suspend, the queue is pulled again and nothing is lost."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from airflow_provider_rocketmq.client.consumer import pull as pull_module
from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.message import MessageExt

from .cluster import FAST, TestCluster


def test_a_lost_pull_answer_is_swept_and_the_queue_pulled_again(
        cluster: TestCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(pull_module, "SWEEP_INTERVAL", 0.05)
    topic, group = "PullSweep", "g_pull_sweep"
    cluster.create_topic(topic, 1)
    sent = cluster.fill(topic, 20)
    broker = cluster.embedded.brokers[0]
    broker.faults.drop_responses(RequestCode.PULL_MESSAGE, times=1)  # the first answer never comes

    seen: list[bytes] = []
    lock = threading.Lock()
    all_seen = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            seen.extend(m.body for m in msgs)
            if len(seen) >= len(sent):
                all_seen.set()
        return ConsumeStatus.CONSUME_SUCCESS

    cfg = {**FAST, "broker_suspend_max_time": 0.2, "consumer_timeout_when_suspend": 0.5}
    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **cfg)
    c.subscribe(topic)
    c.register_listener(listener)
    with caplog.at_level(logging.WARNING, logger=pull_module.__name__):
        c.start()
        try:
            assert all_seen.wait(15), f"consumed {len(seen)} of {len(sent)}"
            stats = c.stats()
        finally:
            c.shutdown()
    assert sorted(seen) == sorted(sent)  # everything, once
    swept = [r.getMessage() for r in caplog.records if "no response to the pull" in r.getMessage()]
    assert len(swept) == 1, swept
    assert "within 0.5s" in swept[0]
    assert stats["pulls"] >= 2
