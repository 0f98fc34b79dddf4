"""GET_CONSUMER_RUNNING_INFO carries real figures (what `mqadmin consumerStatus` shows): pull and
consume rates and round-trip times, failed counts, per subscribed topic, as Java's ConsumeStatus."""

from __future__ import annotations

import threading
import time
from typing import Any

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.protocol import fastjson

from .cluster import FAST, TestCluster, wait_until

CALL_SECONDS = 0.004


def test_status_table_reports_what_the_consumer_did(cluster: TestCluster) -> None:
    topic, group = "RunInfoTopic", "g_run_info"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 200, per_batch=20)
    done: list[int] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        time.sleep(CALL_SECONDS)
        with lock:
            done.append(len(msgs))
        # 10 messages fail once (offsets 0..4 of each queue); their retries succeed
        if msgs[0].queue_offset < 5 and msgs[0].reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    before_start = time.monotonic()
    c.start()
    after_start = time.monotonic()
    try:
        wait_until(lambda: sum(done) >= 210, 20, "every message and the 10 retries")
        wait_until(lambda: c.stats()["consumed_ok"] == 200, 10, "the retries settled")
        asked = time.monotonic()
        resp = cluster.embedded.brokers[0].get_consumer_running_info(group, c.client_id)
        resp = resp.result(10) if hasattr(resp, "result") else resp
        answered = time.monotonic()
    finally:
        c.shutdown()
    assert resp.code == 0
    info: dict[str, Any] = fastjson.loads(resp.body)
    status = info["statusTable"][topic]
    retry = info["statusTable"]["%RETRY%" + group]
    # the window is the consumer's life so far (under a minute): rates are counts over it
    shortest, longest = asked - after_start, answered - before_start
    assert 190 / longest <= status["consumeOKTPS"] <= 190 / shortest
    assert 10 / longest <= status["consumeFailedTPS"] <= 10 / shortest
    assert 200 / longest <= status["pullTPS"] <= 200 / shortest
    assert status["consumeFailedMsgs"] == 10
    assert 10 / longest <= retry["consumeOKTPS"] <= 10 / shortest and retry["consumeFailedMsgs"] == 0
    # milliseconds: each listener call sleeps 4 ms; a pull is a local round trip or a long poll
    assert CALL_SECONDS * 1000 <= status["consumeRT"] < 1000
    assert 0 < status["pullRT"] <= FAST["broker_suspend_max_time"] * 1000 + 1000
