"""Fault injection, name-server JSON forms, several clusters, and what bad input gets back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.errors import ConfigError, RequestTimeoutError
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, pull_ext, send_ext


async def test_busy_flow_control_dropped_and_delayed_responses(embedded_cluster: EmbeddedCluster) -> None:
    broker = embedded_cluster.brokers[0]
    c = await RawClient().connect(broker.addr)
    try:
        embedded_cluster.system_busy(310, times=1)
        r = await c.call(310, send_ext("FT", queue_id=0), b"1")
        assert r.code == 2 and "broker busy" in r.remark
        assert broker.max_offset("FT", 0) == 0  # answered busy: nothing stored
        assert (await c.call(310, send_ext("FT", queue_id=0), b"2")).code == 0  # times=1 is used up

        embedded_cluster.flow_control(11, times=1)
        assert (await c.call(11, pull_ext("g", "FT", 0, 0))).code == 215

        embedded_cluster.drop_responses(15, times=1)
        with pytest.raises(RequestTimeoutError):
            await c.call(15, {"consumerGroup": "g", "topic": "FT", "queueId": 0, "commitOffset": 1}, timeout=0.5)
        assert broker.committed_offset("g", "FT", 0) == 1  # processed, only the answer was lost

        embedded_cluster.delay_responses(30, 0.3)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        r = await c.call(30, {"topic": "FT", "queueId": 0})
        assert r.ext["offset"] == "1" and loop.time() - t0 >= 0.29
        embedded_cluster.clear_faults()
        t0 = loop.time()
        await c.call(30, {"topic": "FT", "queueId": 0})
        assert loop.time() - t0 < 0.29
    finally:
        await c.close()


async def test_route_json_forms_and_clusters(embedded_cluster_factory: Callable[..., EmbeddedCluster]) -> None:
    cluster = embedded_cluster_factory(clusters={"c1": 2, "c2": 1}, queues=2)
    await cluster.create_topic("MT", 3, brokers=["broker-a", "broker-c"])
    ns = await RawClient().connect(cluster.namesrv_addr)
    try:
        old = await ns.call(105, {"topic": "MT"}, version=399)
        assert b'"brokerAddrs":{0:"' in old.body  # fastjson's bare integer key for old clients
        new = await ns.call(105, {"topic": "MT", "acceptStandardJsonOnly": "true"}, version=399)
        route = json.loads(new.body)
        assert sorted(b["brokerName"] for b in route["brokerDatas"]) == ["broker-a", "broker-c"]
        assert {b["cluster"] for b in route["brokerDatas"]} == {"c1", "c2"}
        assert all(q["readQueueNums"] == 3 for q in route["queueDatas"])
        info = await ns.call(106, version=407)
        with pytest.raises(ValueError):
            json.loads(info.body)  # always non-standard
        parsed = fastjson.loads(info.body)
        assert parsed["clusterAddrTable"] == {"c1": ["broker-a", "broker-b"], "c2": ["broker-c"]}
        # a stopped broker leaves the routes; restarted, it is back on the same address
        addr = cluster.broker("broker-c").addr
        await cluster.stop_broker("broker-c")
        route = json.loads((await ns.call(105, {"topic": "MT"})).body)
        assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a"]
        await cluster.start_broker("broker-c")
        assert cluster.broker("broker-c").addr == addr
        route = json.loads((await ns.call(105, {"topic": "MT"})).body)
        assert len(route["brokerDatas"]) == 2
        r = await ns.call(105, {})  # 4.9.7 looks up a null topic
        assert r.code == 17 and r.remark.startswith("No topic route info in name server for the topic: null")
        with pytest.raises(RequestTimeoutError):  # a code the name server does not serve: no answer
            await ns.call(9999, {}, timeout=0.5)
    finally:
        await ns.close()


async def test_bad_requests_get_clear_answers(embedded_cluster: EmbeddedCluster) -> None:
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        r = await c.call(9999, {})
        assert (r.code, r.remark) == (3, " request type 9999 not supported")
        r = await c.call(34, body=b'{"clientID":"x","consumerDataSet":[{"groupName":')
        assert r.code == 1 and "HEART_BEAT body is not JSON" in r.remark
        r = await c.call(34, body=b'{"clientID":"x","consumerDataSet":[{"subscriptionDataSet":[]}]}')
        assert r.code == 1 and "groupName" in r.remark
        ext = send_ext("T", queue_id=0)
        del ext["b"]
        r = await c.call(310, ext, b"x")
        assert (r.code, r.remark) == (1, "the custom field <topic> is null")
        r = await c.call(310, send_ext("bad topic!", queue_id=0), b"x")
        assert r.code == 1 and "contains illegal characters" in r.remark
        r = await c.call(310, send_ext("T", queue_id=99), b"x")
        assert r.code == 1 and r.remark.startswith("request queueId[99] is illegal, TopicConfig [topicName=T, ")
        r = await c.call(310, {**send_ext("T", queue_id=0), "f": "99999999999"}, b"x")
        assert (r.code, r.remark) == (1, "the custom field <sysFlag> is out of the int32 range: 99999999999")
        r = await c.call(310, send_ext("SCHEDULE_TOPIC_XXXX", queue_id=0), b"x")
        assert r.code == 16
        r = await c.call(320, send_ext("T", queue_id=0, batch=True), b"\x00\x00\x00\x30garbage")
        assert (r.code, r.ext_fields) == (1, None) and "batch body is malformed" in r.remark  # 4.9.7: an exception
        r = await c.call(11, {**pull_ext("g", "T", 0, 0), "queueOffset": "abc"})
        assert r.code == 1 and "<queueOffset> is not a number" in r.remark
        r = await c.call(17, {"topic": "NEW", "readQueueNums": -1, "writeQueueNums": 4})
        assert r.code == 1 and "readQueueNums" in r.remark
        r = await c.call(203, {"consumerGroup": "nobody"})
        assert (r.code, r.remark) == (206, "the consumer group[nobody] not online")
        r = await c.call(202, {"topic": "Nope"})
        assert r.code == 17
        r = await c.call(32, {"topic": "Nope", "queueId": 0})
        assert (r.code, r.ext) == (0, {"timestamp": "-1"})
        r = await c.call(33, {"offset": 424242})
        assert (r.code, r.remark) == (1, "can not find message by the offset, 424242")
    finally:
        await c.close()


@pytest.mark.parametrize("kwargs,field", [
    ({"brokers": 0}, "brokers"), ({"queues": 0}, "queues"), ({"queues": 2000}, "queues"),
    ({"time_scale": 0}, "time_scale"), ({"lock_expiry": -1}, "lock_expiry"),
    ({"clusters": {"a": 0}}, "brokers"), ({"broker_ports": [1, 2]}, "broker_ports"),
])
def test_bad_cluster_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        EmbeddedCluster(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_create_topic_rejects_what_would_be_silently_wrong(embedded_cluster: EmbeddedCluster) -> None:
    for kwargs, field in (({"topic": "bad topic!"}, "topic"), ({"topic": "T", "queues": 0}, "queues"),
                          ({"topic": "T", "brokers": ["broker-z"]}, "brokers")):
        with pytest.raises(ConfigError) as info:
            embedded_cluster.create_topic(**kwargs)  # type: ignore[arg-type]
        assert info.value.field == field
    assert embedded_cluster.max_offsets("T") == {}  # nothing was created
