"""Retry through %RETRY% / DLQ, broadcasting with the local offset file, flow control bounds."""

from __future__ import annotations

import collections
import threading
import time

import psutil
import pytest

from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus
from airflow_provider_rocketmq.client.consumer.offset_store import decode_offsets, offsets_file_path
from airflow_provider_rocketmq.client.consumer.push import PushConsumer

from .cluster import FAST, TestCluster, wait_until


def test_reconsume_later_redelivers_via_retry_then_dlq(cluster: TestCluster) -> None:
    topic, group = "RetryTopic", "g_retry"
    cluster.create_topic(topic, 2)
    cluster.fill(topic, 2, body=lambda i: b"ok" if i == 0 else b"fail", per_batch=1)
    seen: list[tuple[bytes, str, int]] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            seen.extend((m.body, m.topic, m.reconsume_times) for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if msgs[0].body == b"fail" else ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, max_reconsume_times=2, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(cluster.read_all("%DLQ%" + group)) == 1, 60, "the message in the DLQ")
    finally:
        c.shutdown()
    fails = [(t, n) for b, t, n in seen if b == b"fail"]
    # first delivery, then two redeliveries through %RETRY% with the original topic restored
    assert fails == [(topic, 0), (topic, 1), (topic, 2)]
    assert [b for b, _, _ in seen].count(b"ok") == 1
    dlq = cluster.read_all("%DLQ%" + group)
    assert dlq[0].body == b"fail"


def test_broadcasting_delivers_everything_to_every_member_and_keeps_local_offsets(
        cluster: TestCluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, group = "BcastTopic", "g_bcast"
    cluster.create_topic(topic, 4)
    seen: dict[str, list[bytes]] = collections.defaultdict(list)
    lock = threading.Lock()

    def listener(name):  # type: ignore[no-untyped-def]
        def on(msgs, ctx):  # type: ignore[no-untyped-def]
            with lock:
                seen[name].extend(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS
        return on

    members = []
    for i in range(2):
        c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, message_model="BROADCASTING",
                         instance_name=f"bc{i}", offset_store_dir=str(tmp_path), **FAST)
        c.subscribe(topic)
        c.register_listener(listener(f"m{i}"))
        members.append(c)
        c.start()
    try:
        wait_until(lambda: all(len(c.assigned_queues()) == 4 for c in members), 20, "all queues everywhere")
        sent = cluster.fill(topic, 400, per_batch=25)
        wait_until(lambda: all(len(seen[f"m{i}"]) >= 400 for i in range(2)), 30, "both members")
    finally:
        for c in members:
            c.shutdown()
    for i in range(2):
        assert sorted(seen[f"m{i}"]) == sorted(sent)
        path = offsets_file_path(str(tmp_path), members[i].client_id, group)
        offsets = decode_offsets(path.read_text())
        assert sum(off for mq, off in offsets.items() if mq.topic == topic) == 400
    assert cluster.committed(group, topic) == {mq: -1 for mq in cluster.queues_of(topic)} or \
        all(v <= 0 for v in cluster.committed(group, topic).values())  # nothing stored on the broker


@pytest.mark.slow
def test_flow_control_bounds_cached_messages_with_a_slow_listener(cluster: TestCluster) -> None:
    topic, group = "FlowTopic", "g_flow"
    cluster.create_topic(topic, 4)
    cluster.fill(topic, 200_000, body=lambda i: b"x" * 100, per_batch=256)
    release = threading.Event()

    def slow(msgs, ctx):  # type: ignore[no-untyped-def]
        release.wait(0.01)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **{**FAST, "consume_thread_min": 2,
                                                                    "consume_thread_max": 2})
    c.subscribe(topic)
    c.register_listener(slow)
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    peak = 0
    limit = c.config.pull_threshold_for_queue + c.config.pull_batch_size
    c.start()
    try:
        core = c._async._core  # sampling the process queues is the point of this test
        samples = 0
        deadline = 8.0

        end = time.monotonic() + deadline
        while time.monotonic() < end:
            counts = [pq.count for pq in list(core.table.values())]
            assert max(counts, default=0) <= limit, counts
            peak = max(peak, proc.memory_info().rss - rss0)
            samples += 1
            time.sleep(0.02)
        assert samples > 100
        assert c.stats()["flow_control_delays"] > 0
    finally:
        release.set()
        c.shutdown(timeout=1)
    print(f"peak RSS growth while throttled: {peak / 2**20:.1f} MiB (process RSS {proc.memory_info().rss / 2**20:.0f} MiB incl. the in-process broker)")
    assert peak < 200 * 2**20


def test_consume_timeout_cleaner_sends_a_stuck_message_back(cluster: TestCluster) -> None:
    topic, group = "StuckTopic", "g_stuck"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1, body=lambda i: b"stuck", per_batch=1)
    calls: list[int] = []
    lock = threading.Lock()
    unblock = threading.Event()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            calls.append(msgs[0].reconsume_times)
            first = len(calls) == 1
        if first:
            unblock.wait(10)  # stuck well past consume_timeout
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_timeout=0.3, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(calls) >= 2, 20, "the redelivery of the stuck message")
    finally:
        unblock.set()
        c.shutdown()
    assert calls[:2] == [0, 1]  # sent back by the cleaner, redelivered through %RETRY%


def test_failed_send_back_falls_back_to_a_retry_send(cluster: TestCluster) -> None:
    topic, group = "FallbackTopic", "g_fallback"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1, body=lambda i: b"again", per_batch=1)
    # the broker rejects CONSUMER_SEND_MSG_BACK: the consumer must resend through %RETRY% itself
    cluster.embedded.system_busy(36)
    seen: list[tuple[str, int, str | None]] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        with lock:
            seen.append((m.topic, m.reconsume_times, m.properties.get("ORIGIN_MESSAGE_ID")))
        return ConsumeStatus.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(seen) >= 2, 30, "the redelivery")
        assert c.stats()["fallback_sends"] == 1 and c.stats()["sent_back"] == 0
    finally:
        c.shutdown()
        cluster.embedded.clear_faults()
    assert [(t, n) for t, n, _ in seen[:2]] == [(topic, 0), (topic, 1)]
    assert seen[1][2]  # ORIGIN_MESSAGE_ID carried over


def test_when_every_send_fails_the_message_is_resubmitted_locally(cluster: TestCluster) -> None:
    topic, group = "LocalRetryTopic", "g_local_retry"
    cluster.create_topic(topic, 1)
    cluster.fill(topic, 1, body=lambda i: b"local", per_batch=1)
    cluster.embedded.system_busy(36)  # no send-back ...
    cluster.embedded.system_busy(310)  # ... and no fallback send either
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            seen.append((msgs[0].topic, msgs[0].reconsume_times))
        return ConsumeStatus.RECONSUME_LATER if len(seen) == 1 else ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.start()
    try:
        wait_until(lambda: len(seen) >= 1, 20, "the first delivery")
        deadline = time.monotonic() + 2.0  # several persist periods: the offset must not pass it
        while time.monotonic() < deadline and len(seen) < 2:
            assert all(v <= 0 for v in cluster.committed(group, topic).values())
            time.sleep(0.1)
        wait_until(lambda: len(seen) >= 2, 20, "the local re-submission (after 5 s)")
        # once consumed, the offset moves past it
        wait_until(lambda: sum(cluster.committed(group, topic).values()) == 1, 10, "committed offset")
    finally:
        c.shutdown()
        cluster.embedded.clear_faults()
    assert seen[:2] == [(topic, 0), (topic, 1)]


def test_topic_threshold_is_shared_across_owned_queues(cluster: TestCluster) -> None:
    topic, group = "TopicLimitTopic", "g_topic_limit"
    cluster.create_topic(topic, 4)
    cluster.fill(topic, 4000, per_batch=100)
    release = threading.Event()

    def slow(msgs, ctx):  # type: ignore[no-untyped-def]
        release.wait(0.005)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, pull_threshold_for_topic=100,
                     **{**FAST, "consume_thread_min": 1, "consume_thread_max": 1})
    c.subscribe(topic)
    c.register_listener(slow)
    c.start()
    try:
        wait_until(lambda: c.stats()["assigned_queues"] == 5, 10, "4 queues + the retry queue")
        # Java: pullThresholdForQueue = max(1, 100 / process queues): 25 while the 4 topic queues were
        # the table, 20 once the retry queue joined; a pull may add one batch on top
        limit = 100 // 4 + c.config.pull_batch_size
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert c.stats()["max_cached_in_queue"] <= limit
            time.sleep(0.02)
        assert c.stats()["flow_control_delays"] > 0
    finally:
        release.set()
        c.shutdown(timeout=1)
