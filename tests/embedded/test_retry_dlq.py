"""Send-back into %RETRY%<group> with scaled delay levels, and routing to %DLQ%<group>."""

from __future__ import annotations

import time
from collections.abc import Callable

from airflow_provider_rocketmq.client.protocol.message import (
    Message,
    decode_messages,
    encode_batch,
    parse_offset_msg_id,
)
from airflow_provider_rocketmq.client.route import PERM_READ
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, props, pull_ext, send_ext

TIME_SCALE = 0.02  # level 3 (10 s) -> 0.2 s


async def _send(c: RawClient, topic: str, body: bytes, **kw: object) -> int:
    r = await c.call(310, send_ext(topic, queue_id=0, **kw), body)  # type: ignore[arg-type]
    assert r.code == 0, r.remark
    return parse_offset_msg_id(r.ext["msgId"])[1]


def _send_back(offset: int, group: str, delay: int = 0, max_times: int = 16) -> dict[str, object]:
    return {"offset": offset, "group": group, "delayLevel": delay, "originMsgId": "ORIG",
            "originTopic": "RT", "maxReconsumeTimes": max_times, "unitMode": "false", "bname": "broker-a"}


async def test_send_back_is_redelivered_to_the_retry_topic_after_the_delay(
        embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(time_scale=TIME_SCALE)
    c = await RawClient().connect(cluster.brokers[0].addr)
    try:
        phy = await _send(c, "RT", b"payload", props=props(TAGS="TagA", UNIQ_KEY="U-1", WAIT="true"))
        started = time.monotonic()
        r = await c.call(36, _send_back(phy, "rg"))
        assert (r.code, r.ext_fields, r.body) == (0, None, None)
        assert cluster.brokers[0].max_offset("%RETRY%rg", 0) == 0  # parked in the schedule topic first
        pulled = await c.call(11, pull_ext("rg", "%RETRY%rg", 0, 0, sys_flag=6, suspend_ms=10000), timeout=15)
        waited = time.monotonic() - started
        assert pulled.code == 0, pulled.remark
        assert waited >= 10 * TIME_SCALE * 0.9, f"redelivered after {waited:.3f}s, before the level-3 delay"
        (m,) = decode_messages(pulled.body)
        assert m.topic == "%RETRY%rg" and m.body == b"payload" and m.reconsume_times == 1
        p = m.properties
        assert p["RETRY_TOPIC"] == "RT" and p["REAL_TOPIC"] == "%RETRY%rg" and p["REAL_QID"] == "0"
        assert p["DELAY"] == "3" and p["WAIT"] == "false" and p["UNIQ_KEY"] == "U-1" and p["TAGS"] == "TagA"
        assert parse_offset_msg_id(p["ORIGIN_MESSAGE_ID"])[1] == phy
        assert m.born_timestamp == 1795244528602  # the original born time travels along

        # second failure: level 3 + 1 = 4 and reconsumeTimes 2, origin id unchanged
        r = await c.call(36, _send_back(m.commit_log_offset, "rg"))
        assert r.code == 0
        pulled = await c.call(11, pull_ext("rg", "%RETRY%rg", 0, 1, sys_flag=6, suspend_ms=10000), timeout=15)
        (m2,) = decode_messages(pulled.body)
        assert m2.reconsume_times == 2 and m2.properties["DELAY"] == "4"
        assert m2.properties["ORIGIN_MESSAGE_ID"] == p["ORIGIN_MESSAGE_ID"]
    finally:
        await c.close()


async def test_dead_letters(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(time_scale=TIME_SCALE)
    broker = cluster.brokers[0]
    c = await RawClient().connect(broker.addr)
    ns = await RawClient().connect(cluster.namesrv_addr)
    try:
        # reconsumeTimes (0) already at maxReconsumeTimes (0): straight to the DLQ, no delay
        phy = await _send(c, "DT", b"poison")
        assert (await c.call(36, _send_back(phy, "dg", max_times=0))).code == 0
        (dead,) = broker.messages("%DLQ%dg")
        assert dead.body == b"poison" and dead.reconsume_times == 1 and dead.properties["RETRY_TOPIC"] == "DT"
        assert dead.properties["DELAY"] == "0"
        # a negative delay level means "dead now" whatever the count
        phy = await _send(c, "DT", b"give up")
        assert (await c.call(36, _send_back(phy, "dg", delay=-1))).code == 0
        assert [m.body for m in broker.messages("%DLQ%dg")] == [b"poison", b"give up"]
        route = await ns.call(105, {"topic": "%DLQ%dg"})
        assert route.code == 0
        # a normal send to %RETRY% (the client's fallback) with reconsumeTimes >= max goes to the DLQ too
        r = await c.call(310, send_ext("%RETRY%dg", queue_id=0, props=props(DELAY="3"), reconsume=16,
                                       max_reconsume=16), b"fallback dead")
        assert r.code == 0
        assert broker.messages("%DLQ%dg")[-1].body == b"fallback dead"
        # below the max it is delayed into the retry topic
        r = await c.call(310, send_ext("%RETRY%dg", queue_id=0, props=props(DELAY="3"), reconsume=2,
                                       max_reconsume=16), b"fallback retry")
        assert r.code == 0
        pulled = await c.call(11, pull_ext("dg", "%RETRY%dg", 0, 0, sys_flag=6, suspend_ms=10000), timeout=15)
        (m,) = decode_messages(pulled.body)
        assert m.body == b"fallback retry" and m.reconsume_times == 2
        # unknown commit-log offset
        r = await c.call(36, _send_back(123456789, "dg"))
        assert (r.code, r.remark) == (1, "look message by offset failed, 123456789")
    finally:
        await c.close()
        await ns.close()


async def test_delayed_message_from_a_producer(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(time_scale=TIME_SCALE)
    c = await RawClient().connect(cluster.brokers[0].addr)
    try:
        await _send(c, "DL", b"later", props=props(DELAY="2"))  # 5 s * 0.02
        assert cluster.brokers[0].max_offset("DL", 0) == 0
        pulled = await c.call(11, pull_ext("g", "DL", 0, 0, sys_flag=6, suspend_ms=10000), timeout=15)
        assert [m.body for m in decode_messages(pulled.body)] == [b"later"]
    finally:
        await c.close()


async def test_read_only_topic_takes_plain_sends_but_refuses_send_back(embedded_cluster: EmbeddedCluster) -> None:
    # The real broker's msgCheck does not look at the topic's permission (4.9.7 and 5.3.3 store the
    # message); CONSUMER_SEND_MSG_BACK checks that %RETRY%<group> is writable.
    await embedded_cluster.create_topic("RO", 2, perm=PERM_READ)
    await embedded_cluster.create_topic("%RETRY%rog", 1, perm=PERM_READ)
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        phy = await _send(c, "RO", b"stored anyway")
        r = await c.call(320, send_ext("RO", queue_id=1, batch=True), encode_batch([Message("RO", b"batched")]))
        assert r.code == 0, r.remark
        assert sorted(m.body for m in embedded_cluster.messages("RO")) == [b"batched", b"stored anyway"]
        r = await c.call(36, _send_back(phy, "rog"))
        assert (r.code, r.remark) == (16, "the topic[%RETRY%rog] sending message is forbidden")
        assert embedded_cluster.messages("%RETRY%rog") == []
    finally:
        await c.close()
