"""Send, route, pull, offsets and membership against the embedded cluster over real sockets."""

from __future__ import annotations

from airflow_provider_rocketmq.client.protocol import fastjson
from airflow_provider_rocketmq.client.protocol.message import decode_messages, parse_offset_msg_id
from airflow_provider_rocketmq.embedded import EmbeddedCluster

from .rawclient import RawClient, heartbeat_body, props, pull_ext, send_ext


async def test_send_route_pull_roundtrip(embedded_cluster: EmbeddedCluster) -> None:
    broker = embedded_cluster.brokers[0]
    ns = await RawClient().connect(embedded_cluster.namesrv_addr)
    bc = await RawClient().connect(broker.addr)
    try:
        missing = await ns.call(105, {"topic": "T1"})
        assert missing.code == 17 and "No topic route info in name server for the topic: T1" in missing.remark

        resp = await bc.call(310, send_ext("T1", queue_id=2, props=props(TAGS="TagA", UNIQ_KEY="U1", WAIT="true")),
                             b"hello")
        assert resp.code == 0
        assert resp.ext["queueId"] == "2" and resp.ext["queueOffset"] == "0"
        host, phy = parse_offset_msg_id(resp.ext["msgId"])
        assert host == broker.addr and phy == 0

        route = fastjson.loads((await ns.call(105, {"topic": "T1"})).body)
        # auto-created like a 4.9.7 broker: min(the request's defaultTopicQueueNums 4, TBW102's 8)
        assert route["queueDatas"][0]["readQueueNums"] == 4
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker.addr}

        pulled = await bc.call(11, pull_ext("g1", "T1", 2, 0))
        assert pulled.code == 0 and pulled.remark == "FOUND"
        assert pulled.ext["nextBeginOffset"] == "1" and pulled.ext["maxOffset"] == "1"
        (msg,) = decode_messages(pulled.body)
        assert msg.body == b"hello" and msg.tags == "TagA" and msg.msg_id == "U1"
        assert msg.properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in msg.properties
        assert msg.store_host == broker.addr and msg.offset_msg_id == resp.ext["msgId"]

        # offsets: a young queue answers 0 without a stored offset; updates are kept
        q = await bc.call(14, {"consumerGroup": "g1", "topic": "T1", "queueId": 2})
        assert (q.code, q.ext["offset"]) == (0, "0")
        await bc.call(15, {"consumerGroup": "g1", "topic": "T1", "queueId": 2, "commitOffset": 1})
        q = await bc.call(14, {"consumerGroup": "g1", "topic": "T1", "queueId": 2})
        assert q.ext["offset"] == "1"
        assert broker.committed_offset("g1", "T1", 2) == 1
    finally:
        await ns.close()
        await bc.close()


async def test_heartbeat_membership_and_notifications(embedded_cluster: EmbeddedCluster) -> None:
    addr = embedded_cluster.brokers[0].addr
    a = await RawClient().connect(addr)
    b = await RawClient().connect(addr)
    try:
        none = await a.call(38, {"consumerGroup": "gm"})
        assert none.code == 1 and none.remark == "no consumer for this group, gm"
        assert (await a.call(34, body=heartbeat_body("cid-A", "gm", {"TM": "*"}))).code == 0
        # the notification reaches A before the heartbeat response
        assert [c.ext["consumerGroup"] for c in a.inbound if c.code == 40] == ["gm"]
        assert (await b.call(34, body=heartbeat_body("cid-B", "gm", {"TM": "*"}))).code == 0
        await a.wait_inbound(40, 2)
        await b.wait_inbound(40, 1)
        ids = fastjson.loads((await a.call(38, {"consumerGroup": "gm"})).body)["consumerIdList"]
        assert sorted(ids) == ["cid-A", "cid-B"]
        # a repeated heartbeat changes nothing and notifies nobody
        await a.call(34, body=heartbeat_body("cid-A", "gm", {"TM": "*"}))
        assert sum(1 for c in b.inbound if c.code == 40) == 1
        # B leaves by closing its connection: A is told, the list shrinks
        await b.close()
        await a.wait_inbound(40, 3)
        ids = fastjson.loads((await a.call(38, {"consumerGroup": "gm"})).body)["consumerIdList"]
        assert ids == ["cid-A"]
        # the retry topic exists once a clustering consumer heartbeated
        ns = await RawClient().connect(embedded_cluster.namesrv_addr)
        route = fastjson.loads((await ns.call(105, {"topic": "%RETRY%gm"})).body)
        assert route["queueDatas"][0]["readQueueNums"] == 1
        await ns.close()
    finally:
        await a.close()
        await b.close()


def test_sync_fixture_control_methods(embedded_cluster: EmbeddedCluster) -> None:
    embedded_cluster.create_topic("TS", 3)
    assert embedded_cluster.max_offsets("TS") == {("broker-a", 0): 0, ("broker-a", 1): 0, ("broker-a", 2): 0}
    addr = embedded_cluster.brokers[0].addr
    embedded_cluster.restart_broker("broker-a")
    assert embedded_cluster.brokers[0].addr == addr
    assert embedded_cluster.brokers[0].running


async def test_consume_stats_cover_read_queues_and_skip_missing_topics(embedded_cluster: EmbeddedCluster) -> None:
    """Like AdminBrokerProcessor.getConsumeStats: readQueueNums queues; an unknown topic is skipped."""
    bc = await RawClient().connect(embedded_cluster.brokers[0].addr)
    try:
        created = await bc.call(17, {"topic": "CS", "readQueueNums": 2, "writeQueueNums": 4, "perm": 6})
        assert created.code == 0
        await bc.call(15, {"consumerGroup": "gcs", "topic": "CS", "queueId": 0, "commitOffset": 0})
        stats = fastjson.loads((await bc.call(208, {"consumerGroup": "gcs"})).body)
        assert sorted(fastjson.parse_key(k)["queueId"] for k in stats["offsetTable"]) == [0, 1]
        missing = await bc.call(208, {"consumerGroup": "gcs", "topic": "NoSuchTopic"})
        assert (missing.code, fastjson.loads(missing.body)) == (0, {"consumeTps": 0.0, "offsetTable": {}})
    finally:
        await bc.close()


async def test_every_consumer_group_gets_its_retry_topic_at_heartbeat(embedded_cluster: EmbeddedCluster) -> None:
    """ClientManageProcessor.heartBeat creates %RETRY%<group> whatever the message model."""
    c = await RawClient().connect(embedded_cluster.brokers[0].addr)
    ns = await RawClient().connect(embedded_cluster.namesrv_addr)
    try:
        for group, model in (("g_clu", "CLUSTERING"), ("g_bro", "BROADCASTING")):
            assert (await ns.call(105, {"topic": f"%RETRY%{group}"})).code == 17
            assert (await c.call(34, body=heartbeat_body("cid", group, {"T": "*"}, model=model))).code == 0
            route = fastjson.loads((await ns.call(105, {"topic": f"%RETRY%{group}"})).body)
            assert route["queueDatas"][0]["readQueueNums"] == 1, model
        assert embedded_cluster.brokers[0].consumer_ids("g_bro") == ["cid"]
    finally:
        await c.close()
        await ns.close()
