"""Push-consumer paths that only show under unusual broker answers or settings.

* PULL_OFFSET_MOVED (OFFSET_ILLEGAL) with offset commits on: drop the queue, wait, store
  ``nextBeginOffset`` on the broker, let the rebalance take the queue again from there.
* Orderly ``max_time_consume_continuously``: one queue's worker yields, so a long backlog on
  one queue does not hold the others back; order and exactly-once per queue are kept.
* GET_CONSUMER_STATUS_FROM_CLIENT (221) sent by the broker: the consumer's offsets.
* Namespaces end to end: user names without the namespace, broker names with it.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Any

import pytest

from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.consumer import pull as pull_module
from airflow_provider_rocketmq.client.consumer.config import ConsumeStatus, OrderlyStatus
from airflow_provider_rocketmq.client.consumer.push import PushConsumer
from airflow_provider_rocketmq.client.producer import Producer
from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.message import PROPERTY_RETRY_TOPIC, Message, MessageExt
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue

from .cluster import FAST, TestCluster, wait_settled, wait_until
from .helpers import fill_queues, on_cluster_loop, request_from_broker

# -- 1. OFFSET_ILLEGAL -------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["below_min", "beyond_max"])
def test_offset_illegal_stores_next_begin_offset_and_the_rebalance_retakes_the_queue(
        cluster: TestCluster, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """below_min: retention deleted offsets 0..11 while the group's committed offset is 5 (the
    broker answers OFFSET_TOO_SMALL, nextBeginOffset 12); beyond_max: the committed offset 50 is
    past the queue's max offset 20 (OFFSET_OVERFLOW_BADLY, nextBeginOffset 20)."""
    monkeypatch.setattr(pull_module, "DELAY_OFFSET_ILLEGAL", 0.05)  # Java waits 10 s
    topic, group = f"Illegal_{case}", f"g_illegal_{case}"
    cluster.create_topic(topic, 1)
    old = cluster.fill(topic, 20, body=lambda i: b"old-%02d" % i, per_batch=20)
    broker = cluster.embedded.brokers[0]
    mq = MessageQueue(topic, broker.name, 0)
    if case == "below_min":
        assert broker.store is not None
        on_cluster_loop(cluster.embedded, broker.store.delete_before, topic, 0, 12)
        committed, expected_old = 5, old[12:]
    else:
        committed, expected_old = 50, []
    cluster.run(cluster.client.update_consumer_offset(mq, group, committed))
    assert broker.committed_offset(group, topic, 0) == committed

    seen: list[bytes] = []
    lock = threading.Lock()
    all_seen = threading.Event()  # the retained messages (if any) and the 5 new ones
    owned: list[frozenset[MessageQueue]] = []

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            seen.extend(m.body for m in msgs)
            if len(seen) >= len(expected_old) + 5:
                all_seen.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, enable_offset_commit=True, **FAST)
    c.subscribe(topic)
    c.register_listener(listener)
    c.on_assignment(lambda t, mq_all, mine: owned.append(mine) if t == topic else None)
    c.start()
    try:
        # the moved offset reaches the broker (below_min: then the retained 12..19 are consumed)
        wait_until(lambda: broker.committed_offset(group, topic, 0) == 20, 8, "offset 20 on the broker")
        # dropped, then taken again by a later rebalance: the table changed twice for the topic
        wait_until(lambda: len(owned) >= 2, 5, "the queue taken again")
        assert all(mq in mine for mine in owned)
        new = cluster.fill(topic, 5, body=lambda i: b"new-%02d" % i, per_batch=5)
        assert all_seen.wait(8), seen
        wait_until(lambda: broker.committed_offset(group, topic, 0) == 25, 5, "offset 25 on the broker")
    finally:
        c.shutdown()
    # nothing below the moved offset, everything from it, each once
    assert sorted(seen) == sorted(expected_old + new)


# -- 2. orderly max_time_consume_continuously -------------------------------------------------------


def test_orderly_queue_yields_after_max_time_consume_continuously(cluster: TestCluster) -> None:
    """An ``async def`` listener doing blocking work holds the consumer's loop, so a queue's worker
    that never yields would consume everything cached for its queue (a whole 32-message pull)
    before any other queue gets a turn. With max_time_consume_continuously=0.01 and 4 ms per
    message a run is at most 3 messages; the others interleave."""
    topic, group = "OrderlyYieldTopic", "g_orderly_yield"
    cluster.create_topic(topic, 4)
    backlog = {0: 160, 1: 40, 2: 40, 3: 40}
    total = sum(backlog.values())
    calls: list[tuple[int, int, bytes]] = []  # appended on the consumer's loop thread only
    done = threading.Event()

    async def listener(msgs: list[MessageExt], ctx: Any) -> OrderlyStatus:
        time.sleep(0.004)
        calls.extend((ctx.message_queue.queue_id, m.queue_offset, m.body) for m in msgs)
        if len(calls) >= total:
            done.set()
        return OrderlyStatus.SUCCESS

    c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, max_time_consume_continuously=0.01, **FAST)
    c.subscribe(topic)
    c.register_listener(listener, orderly=True)
    c.start()
    try:
        # every queue locked and pulling before the backlog arrives (no start-up skew)
        wait_until(lambda: len(c.assigned_queues()) == 4, 10, "four locked queues")
        sent = fill_queues(cluster, topic, backlog, per_batch=32)
        assert done.wait(15), f"consumed {len(calls)} of {total}"
        wait_until(lambda: cluster.embedded.committed_offsets(group, topic)
                   == {(cluster.embedded.brokers[0].name, q): n for q, n in backlog.items()},
                   5, "committed offsets")
    finally:
        c.shutdown()
    by_queue: dict[int, list[tuple[int, bytes]]] = collections.defaultdict(list)
    for qid, off, body in calls:
        by_queue[qid].append((off, body))
    for qid in backlog:  # per-queue order, every message exactly once
        assert by_queue[qid] == list(enumerate(sent[qid])), qid
    # while every queue still had messages to consume, no queue ran long in one stretch
    left = dict(backlog)
    contended = []
    for qid, _, _ in calls:
        if min(left.values()) == 0:
            break
        contended.append(qid)
        left[qid] -= 1
    runs = [len(list(g)) for _, g in itertools.groupby(contended)]
    assert len(contended) >= 100 and max(runs) <= 8, runs
    # the small queues were done while queue 0 still had most of its backlog
    last_small = max(i for i, (qid, _, _) in enumerate(calls) if qid != 0)
    assert sum(1 for qid, _, _ in calls[:last_small] if qid == 0) < backlog[0] // 2


# -- 3. GET_CONSUMER_STATUS_FROM_CLIENT ---------------------------------------------------------------


def _status(cluster: TestCluster, c: PushConsumer, group: str, topic: str,
            ask_group: str | None = None) -> tuple[bytes, dict[MessageQueue, int]]:
    broker = cluster.embedded.brokers[0]
    resp = request_from_broker(cluster.embedded, broker, group, c.client_id,
                               RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
                               {"topic": topic, "group": ask_group or group, "clientAddr": "127.0.0.1:1"})
    assert resp.code == 0, resp.remark
    body = fastjson.loads(resp.body or b"")
    # GetConsumerStatusBody: messageQueueTable, a map with MessageQueue object keys
    table = {MessageQueue.from_json(fastjson.parse_key(k)): v for k, v in body["messageQueueTable"].items()}
    return resp.body or b"", table


def test_get_consumer_status_from_client_answers_each_members_offsets(cluster: TestCluster) -> None:
    topic, group = "StatusTopic", "g_status"
    cluster.create_topic(topic, 4)
    broker = cluster.embedded.brokers[0]
    seen: list[bytes] = []
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        with lock:
            seen.extend(m.body for m in msgs)
            if len(seen) >= 40:
                done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    members = []
    for _ in range(2):
        c = PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **FAST)
        c.subscribe(topic)
        c.register_listener(listener)
        members.append(c)
    try:
        for c in members:
            c.start()
        wait_settled(members, 4)
        cluster.fill(topic, 40, per_batch=10)  # 10 per queue
        assert done.wait(10)
        expected = {MessageQueue(topic, broker.name, q): 10 for q in range(4)}
        wait_until(lambda: cluster.committed(group, topic) == expected, 5, "committed offsets")
        union: dict[MessageQueue, int] = {}
        for c in members:
            raw, table = _status(cluster, c, group, topic)
            assert raw.startswith(b'{"messageQueueTable":{{'), raw  # fastjson object keys
            # exactly this member's queues of the topic (no %RETRY% queue), at its offsets
            assert set(table) == set(c.assigned_queues()) and len(table) == 2, (table, c.assigned_queues())
            assert all(v == 10 for v in table.values()), table
            union.update(table)
        assert union == expected
        # Java MQClientInstance.getConsumerStatus: a group this client does not run -> empty table;
        # a topic it does not consume -> empty table
        assert _status(cluster, members[0], group, topic, ask_group="g_someone_else")[1] == {}
        assert _status(cluster, members[0], group, "NotMyTopic")[1] == {}
    finally:
        for c in members:
            c.shutdown()


# -- 4. namespaces --------------------------------------------------------------------------------


@pytest.mark.parametrize("send_back", ["broker", "fallback"])
def test_namespace_end_to_end(cluster: TestCluster, send_back: str, caplog: pytest.LogCaptureFixture) -> None:
    """Consumer and producer with namespace "ns1": the user sees ``NsTopic``; the broker holds
    ``ns1%NsTopic``, group ``ns1%g_ns``, its offsets, and a RECONSUME_LATER message in
    ``%RETRY%ns1%g_ns`` (sent back by the broker, or by the consumer's fallback send when the
    broker refuses CONSUMER_SEND_MSG_BACK)."""
    ns, user_topic, user_group = "ns1", f"NsTopic_{send_back}", f"g_ns_{send_back}"
    topic, group = f"{ns}%{user_topic}", f"{ns}%{user_group}"
    retry = f"%RETRY%{group}"
    cluster.create_topic(topic, 2)
    broker = cluster.embedded.brokers[0]
    if send_back == "fallback":
        cluster.embedded.system_busy(RequestCode.CONSUMER_SEND_MSG_BACK)
    seen: list[tuple[bytes, str, int, str]] = []
    lock = threading.Lock()
    redelivered = threading.Event()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus:
        m = msgs[0]
        with lock:
            seen.append((m.body, m.topic, m.reconsume_times, ctx.message_queue.topic))
        if m.body == b"retry-me":
            if m.reconsume_times == 0:
                ctx.delay_level_when_next_consume = 1  # 1 s x time_scale 0.01
                return ConsumeStatus.RECONSUME_LATER
            redelivered.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(user_group, namesrv_addr=cluster.namesrv_addr, namespace=ns, **FAST)
    c.subscribe(user_topic)
    c.register_listener(listener)
    c.start()
    try:
        with Producer(ClientConfig(namesrv_addr=cluster.namesrv_addr, namespace=ns), "p_ns") as producer:
            for i in range(6):
                producer.send(Message(user_topic, b"m%d" % i))
            producer.send(Message(user_topic, b"retry-me"))
        assert redelivered.wait(8), seen
        wait_until(lambda: sum(broker.committed_offset(group, topic, q) for q in range(2)) == 7
                   and broker.committed_offset(group, retry, 0) == 1, 5, "committed offsets")
        # membership under the namespaced group only
        assert broker.consumer_ids(group) == [c.client_id]
        assert broker.consumer_ids(user_group) == []
        # GET_CONSUMER_STATUS_FROM_CLIENT names queues as the broker does (namespaced)
        assert _status(cluster, c, group, topic)[1] == {
            MessageQueue(topic, broker.name, q): broker.committed_offset(group, topic, q) for q in range(2)}
        if send_back == "fallback":
            assert c.stats()["fallback_sends"] == 1 and c.stats()["sent_back"] == 0
            # the warning names the topic the message really went to
            assert any(f"sending it to {retry} instead" in r.getMessage() for r in caplog.records), caplog.text
        else:
            assert c.stats()["sent_back"] == 1 and c.stats()["fallback_sends"] == 0
    finally:
        c.shutdown()
        cluster.embedded.clear_faults()
    # the listener saw the user's topic only, for first deliveries and the redelivery
    assert sorted(b for b, _, _, _ in seen) == sorted([b"m%d" % i for i in range(6)] + [b"retry-me"] * 2)
    assert {t for _, t, _, _ in seen} == {user_topic}
    again = [(n, q) for b, _, n, q in seen if b == b"retry-me"]
    assert again == [(0, topic), (1, retry)]  # back through %RETRY%ns1%group
    # the broker: offsets only under the namespaced names; the retry copy knows its real topic
    for q in range(2):
        assert broker.committed_offset(user_group, user_topic, q) == -1
        assert broker.committed_offset(user_group, topic, q) == -1
    retried = broker.messages(retry)
    assert [(m.body, m.reconsume_times) for m in retried] == [(b"retry-me", 1)]
    assert retried[0].properties[PROPERTY_RETRY_TOPIC] == topic
    assert broker.messages(f"%RETRY%{user_group}") == []
    assert broker.messages(user_topic) == []
