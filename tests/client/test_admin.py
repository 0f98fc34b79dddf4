"""Producer and Admin end to end against the embedded broker (real sockets on 127.0.0.1)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_rocketmq.client.admin import Admin, AsyncAdmin
from airflow_provider_rocketmq.client.config import ClientConfig
from airflow_provider_rocketmq.client.mqclient import MQClient
from airflow_provider_rocketmq.client.producer import AsyncProducer, Producer
from airflow_provider_rocketmq.client.protocol.codes import RequestCode
from airflow_provider_rocketmq.client.protocol.command import RemotingCommand
from airflow_provider_rocketmq.client.protocol.errors import (
    ClientStateError,
    ConfigError,
    ConsumerNotOnlineError,
    RouteNotFoundError,
)
from airflow_provider_rocketmq.client.protocol.message import Message, decode_messages
from airflow_provider_rocketmq.client.protocol.queue import MessageQueue
from airflow_provider_rocketmq.embedded import EmbeddedCluster


def _cfg(cluster: EmbeddedCluster, **kw: Any) -> ClientConfig:
    return ClientConfig(namesrv_addr=cluster.namesrv_addr, **kw)


def _consumer_heartbeat(client_id: str, group: str, topic: str) -> dict[str, Any]:
    sub = {"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": "*",
           "subVersion": int(time.time() * 1000), "tagsSet": [], "topic": topic}
    retry = dict(sub, topic=f"%RETRY%{group}")
    return {"clientID": client_id, "producerDataSet": [],
            "consumerDataSet": [{"consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                                 "consumeType": "CONSUME_PASSIVELY", "groupName": group,
                                 "messageModel": "CLUSTERING", "subscriptionDataSet": [sub, retry],
                                 "unitMode": False}]}


async def test_create_topic_produce_and_read_back(embedded_cluster: EmbeddedCluster) -> None:
    cfg = _cfg(embedded_cluster)
    async with AsyncAdmin(cfg) as admin, AsyncProducer(cfg, "pg") as producer:
        assert await admin.create_topic("Orders", queues=4) == ["broker-a"]
        assert [mq.queue_id for mq in await admin.topic_queues("Orders")] == [0, 1, 2, 3]
        big = b"".join(b"line-%05d;" % i for i in range(600))  # 6600 bytes -> zlib
        results = [await producer.send(Message("Orders", f"m{i}", tags="TagA" if i % 2 else "TagB",
                                               keys=f"k{i}", properties={"note": "值", "idx": str(i)}))
                   for i in range(8)]
        results.append(await producer.send(Message("Orders", big, tags="Big")))
        hw = await admin.high_water_marks("Orders")
        assert sum(hw.values()) == 9
        assert Counter(r.queue.queue_id for r in results[:8]) == {0: 2, 1: 2, 2: 2, 3: 2}

        # read every message back with a raw pull and compare what the broker stored
        client: MQClient = producer.client
        got: dict[str, Any] = {}
        for mq in await admin.topic_queues("Orders"):
            cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "reader", "topic": "Orders", "queueId": mq.queue_id, "queueOffset": 0,
                "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
            resp = await client.invoke(await client.master_addr(mq), cmd)
            if resp.code == 0:
                for m in decode_messages(resp.body or b""):
                    got[m.msg_id] = m
        assert set(got) == {r.msg_id for r in results}
        for i, r in enumerate(results[:8]):
            m = got[r.msg_id]
            assert (m.body, m.tags, m.keys, m.properties["note"], m.queue_offset) == \
                (f"m{i}".encode(), "TagA" if i % 2 else "TagB", f"k{i}", "值", r.queue_offset)
            assert m.offset_msg_id == r.offset_msg_id
        stored_big = got[results[8].msg_id]
        assert stored_big.body == big and stored_big.sys_flag & 0x301 == 0x301


async def test_lag_from_offsets_then_consume_stats(embedded_cluster: EmbeddedCluster) -> None:
    cfg = _cfg(embedded_cluster)
    async with AsyncAdmin(cfg) as admin, AsyncProducer(cfg) as producer:
        await admin.create_topic("LagT", queues=2)
        for i in range(10):
            await producer.send(Message("LagT", f"{i}"), queue=MessageQueue("LagT", "broker-a", i % 2))
        # a group that never registered: no %RETRY% route -> computed from offsets
        with pytest.raises(RouteNotFoundError, match="name a topic"):
            await admin.lag("fresh_group")
        snap = await admin.lag("fresh_group", "LagT")
        assert snap.source == "offsets"
        assert [(q.queue_id, q.broker_offset, q.lag) for q in snap.queues] == [(0, 5, 5), (1, 5, 5)]
        assert snap.total_lag == 10

        # register the group (heartbeat) and commit some offsets: mqadmin's figures
        client = producer.client
        addr = await client.master_addr(MessageQueue("LagT", "broker-a", 0))
        await client.heartbeat(addr, _consumer_heartbeat("10.0.0.1@lagtest", "g_lag", "LagT"))
        await admin.update_consumer_offset("g_lag", MessageQueue("LagT", "broker-a", 0), 3)
        await admin.update_consumer_offset("g_lag", MessageQueue("LagT", "broker-a", 1), 5)
        assert await admin.committed_offset("g_lag", MessageQueue("LagT", "broker-a", 0)) == 3
        snap = await admin.lag("g_lag", "LagT")
        assert snap.source == "consume_stats"
        assert [(q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in snap.queues] == \
            [(0, 5, 3, 2), (1, 5, 5, 0)]
        assert snap.total_lag == 2
        assert snap.queues[0].last_timestamp > 0
        stats = await admin.consume_stats("g_lag")
        assert stats.total_diff() == 2
        whole_group = await admin.lag("g_lag")
        assert whole_group.total_lag == 2 and {q.topic for q in whole_group.queues} == {"LagT"}
        d = snap.to_dict()
        assert d["total_lag"] == 2 and d["queues"][0]["broker"] == "broker-a"

        # consumer membership as the broker sees it
        assert await admin.consumer_ids("g_lag") == ["10.0.0.1@lagtest"]
        conns = await admin.consumer_connections("g_lag")
        assert [c.client_id for c in conns.connections] == ["10.0.0.1@lagtest"]
        assert conns.subscriptions["LagT"]["subString"] == "*"
        await client.unregister(addr, "10.0.0.1@lagtest", consumer_group="g_lag")
        assert await admin.consumer_ids("g_lag") == []
        with pytest.raises(ConsumerNotOnlineError):
            await admin.consumer_connections("g_lag")


async def test_offsets_stats_and_timestamps(embedded_cluster: EmbeddedCluster) -> None:
    cfg = _cfg(embedded_cluster)
    async with AsyncAdmin(cfg) as admin, AsyncProducer(cfg) as producer:
        await admin.create_topic("TsT", queues=1)
        mq = MessageQueue("TsT", "broker-a", 0)
        first = await producer.send(Message("TsT", b"a"), queue=mq)
        assert first.queue_offset == 0
        await producer.send(Message("TsT", b"b"), queue=mq)
        assert (await admin.min_offset(mq), await admin.max_offset(mq)) == (0, 2)
        assert await admin.search_offset(mq, 0) == 0
        # 4.9.7's getOffsetInQueueByTime: a time after every message gives the last one's offset
        assert await admin.search_offset(mq, int(time.time() * 1000) + 60_000) == 1
        stats = await admin.topic_stats("TsT")
        assert stats.offset_table[mq].max_offset == 2 and stats.offset_table[mq].min_offset == 0
        with pytest.raises(ConfigError):
            await admin.create_topic("bad topic")
        for call, fld in ((admin.update_consumer_offset("g", mq, -1), "offset"),
                          (admin.max_offset(("TsT", "broker-a", 0)), "mq"),  # type: ignore[arg-type]
                          (admin.search_offset(mq, "yesterday"), "ts"),  # type: ignore[arg-type]
                          (admin.committed_offset("", mq), "group")):
            with pytest.raises(ConfigError) as info:
                await call
            assert info.value.field == fld
        with pytest.raises(RouteNotFoundError):
            await admin.high_water_marks("NoSuchTopic")


async def test_create_topic_on_every_master_and_retry_on_busy_broker(
        embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(brokers=2, queues=4)
    cfg = _cfg(cluster)
    async with AsyncAdmin(cfg) as admin, AsyncProducer(cfg, retry_times=2) as producer:
        assert await admin.create_topic("Both", queues=3) == ["broker-a", "broker-b"]
        queues = await admin.topic_queues("Both")
        assert [(q.broker_name, q.queue_id) for q in queues] == \
            [(b, i) for b in ("broker-a", "broker-b") for i in range(3)]
        cluster.system_busy(RequestCode.SEND_MESSAGE_V2, broker="broker-a")
        results = [await producer.send(Message("Both", b"x")) for _ in range(6)]
        assert {r.queue.broker_name for r in results} == {"broker-b"}
        cluster.clear_faults()
        assert len(cluster.messages("Both")) == 6


def test_sync_facades(embedded_cluster: EmbeddedCluster) -> None:
    cfg = _cfg(embedded_cluster)
    with Admin(cfg) as admin, Producer(cfg) as producer:
        admin.create_topic("SyncT", queues=2)
        assert admin.broker_names() == sorted(b.name for b in embedded_cluster.brokers)
        r = producer.send(Message("SyncT", b"hello"), key="customer-1")
        assert producer.send(Message("SyncT", b"again"), key="customer-1").queue == r.queue
        assert admin.high_water_marks("SyncT")[r.queue] == 2
        assert admin.lag("nobody", "SyncT").total_lag == 2
    for closed_call in (lambda: admin.max_offset(r.queue), lambda: producer.send(Message("SyncT", b"late"))):
        with pytest.raises(ClientStateError, match="closed"):
            closed_call()
    admin.close()  # idempotent
    producer.close()


def test_admin_reconnects_after_broker_drops_connections_and_restarts(
        embedded_cluster: EmbeddedCluster) -> None:
    cfg = _cfg(embedded_cluster)
    with Admin(cfg) as admin, Producer(cfg) as producer:
        admin.create_topic("Reconn", queues=1)
        mq = MessageQueue("Reconn", "broker-a", 0)
        producer.send(Message("Reconn", b"a"), queue=mq)
        assert admin.max_offset(mq) == 1
        assert embedded_cluster.close_client_connections() >= 1
        assert admin.max_offset(mq) == 1  # idempotent read: retried on a fresh connection
        embedded_cluster.restart_broker("broker-a")
        admin.update_consumer_offset("g_re", mq, 1)
        assert admin.committed_offset("g_re", mq) == 1
        assert admin.lag("g_re", "Reconn").total_lag == 0


def test_sync_facade_deadline_is_a_typed_timeout(embedded_cluster: EmbeddedCluster) -> None:
    from airflow_provider_rocketmq.client.protocol.errors import RequestTimeoutError

    with Admin(_cfg(embedded_cluster), timeout=0.5) as admin:
        admin.create_topic("Slow", queues=1)
        mq = MessageQueue("Slow", "broker-a", 0)
        embedded_cluster.delay_responses(RequestCode.GET_MAX_OFFSET, 5.0)
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="admin call"):
            admin.max_offset(mq)
        assert time.monotonic() - started < 4.0  # the facade deadline, not the 3 s x 3 RPC retries
        embedded_cluster.clear_faults()
        assert admin.max_offset(mq) == 0
